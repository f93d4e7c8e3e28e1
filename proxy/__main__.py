"""`python -m proxy` is the `ollama-tap` command."""

import sys

from proxy.cli import main

sys.exit(main())
