"""Makes Python find ollama_tap's modules as .py sources, never the extension modules
compiled from them (setup.py) that may sit beside them.

The test suite installs it in its own process (tests/conftest.py; not in the compiled pass,
OLLAMA_TAP_COMPILED=1) and puts this folder on PYTHONPATH, where Python imports
`sitecustomize` at start-up: the proxies the tests start as subprocesses run the sources too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


class SourcesFirst(importlib.abc.MetaPathFinder):
    """Finds `ollama_tap` and its submodules as .py files under ROOT."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "ollama_tap" and not name.startswith("ollama_tap."):
            return None
        base = ROOT.joinpath(*name.split("."))
        if (init := base / "__init__.py").exists():
            return importlib.util.spec_from_file_location(
                name, init, submodule_search_locations=[str(base)]
            )
        source = base.with_suffix(".py")
        return importlib.util.spec_from_file_location(name, source) if source.exists() else None


def install() -> None:
    if not any(isinstance(finder, SourcesFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourcesFirst())


install()  # on PYTHONPATH in every pass but the compiled one
