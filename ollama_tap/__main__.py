"""`python -m ollama_tap` is the `ollama-tap` command."""

import sys

from ollama_tap.cli import main

sys.exit(main())
