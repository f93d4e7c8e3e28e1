"""The shape of `ollama_tap/`: no import cycles and no module over MAX_LINES lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parent.parent / "ollama_tap"
MAX_LINES: Final = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Final = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, tree: ast.AST) -> Iterator[str]:
    """Every proxy module `name` imports: at module level, in functions, under TYPE_CHECKING."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                # `from ollama_tap import ollama` imports the module;
                # `from ollama_tap.x import f`, x.
                submodule = f"{base}.{alias.name}"
                yield from _known(submodule if submodule in MODULES else base)


def _known(dotted: str) -> Iterator[str]:
    """The longest prefix of `dotted` that is a proxy module (`import a.b.c` binds a.b.c)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in MODULES:
            yield prefix
            return


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = set(imported(name, tree)) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def oversized() -> set[str]:
    return {
        name for name, path in MODULES.items() if len(path.read_text().splitlines()) > MAX_LINES
    }


def test_no_import_cycles() -> None:
    # No exception for a package's __init__ and its submodules either: a submodule takes
    # what it needs from the sibling that defines it, never from its package.
    found = [sorted(c) for c in cycles(import_graph())]
    assert not found, f"import cycles: {found}"


def test_no_module_over_max_lines() -> None:
    found = sorted(oversized())
    assert not found, f"over {MAX_LINES} lines: {found}"


def test_the_graph_sees_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import ollama_tap.names
from ollama_tap import exchange
from . import framing
from .tokens.store import ModelStore
if TYPE_CHECKING:
    from ollama_tap.config import Settings
def lazy() -> None:
    from ollama_tap.recorder import Recorder
"""
    found = set(imported("ollama_tap.app", ast.parse(source)))
    assert found == {
        "ollama_tap.names",
        "ollama_tap.exchange",
        "ollama_tap.framing",
        "ollama_tap.tokens.store",
        "ollama_tap.config",
        "ollama_tap.recorder",
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
