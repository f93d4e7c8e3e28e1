"""The shape of `ollama_tap/`: no import cycles, no observer importing another, modules of a
readable length, and comments that say why rather than when or how much.

The import rules read the graph built here rather than import-linter's contracts: the
graph is already needed for the cycles, and a contract file would be a second place to keep
the observer list."""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parent.parent / "ollama_tap"
AIM_LINES: Final = 400
"""Above it a module is a prompt for review (a pytest warning): does it hold one concern?"""
MAX_LINES: Final = 600
"""Above it the suite fails. Never delete a docstring to get under either."""


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


OBSERVERS: Final = {
    "attribution": "ollama_tap.attribution",
    "access log": "ollama_tap.accesslog",
    "in-flight": "ollama_tap.inflight",
    "truncation": "ollama_tap.truncation",
    "loads": "ollama_tap.loads",
    "metrics": "ollama_tap.metrics.observer",
    "recorder": "ollama_tap.recorder",
    "otel": "ollama_tap.otel",
    "reload guard": "ollama_tap.guard",
}
"""Each observer's own modules: a package (every module under it) or one module. The rest of
`metrics/` (families, registered) is how every observer counts, not the metrics observer."""
SHARED_OBSERVERS: Final = frozenset({"ollama_tap.names"})
"""Observers that are also a service handed to the others: ModelLabels is the vocabulary of
the `model` label every counting observer asks; its hook only teaches it names."""


def owner(module: str) -> str | None:
    """The observer whose modules include `module`, if any."""
    for observer, prefix in OBSERVERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return observer
    return None


def lengths() -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}


def oversized() -> set[str]:
    return {name for name, n in lengths().items() if n > MAX_LINES}


def test_no_import_cycles() -> None:
    # No exception for a package's __init__ and its submodules either: a submodule takes
    # what it needs from the sibling that defines it, never from its package.
    found = [sorted(c) for c in cycles(import_graph())]
    assert not found, f"import cycles: {found}"


def test_no_module_over_max_lines() -> None:
    found = sorted(oversized())
    assert not found, f"over {MAX_LINES} lines: {found}"
    long = sorted(f"{name} ({n})" for name, n in lengths().items() if AIM_LINES < n <= MAX_LINES)
    if long:
        warnings.warn(
            f"over {AIM_LINES} lines, worth a look for a second concern: {', '.join(long)}",
            stacklevel=1,
        )


def test_no_observer_imports_another() -> None:
    # What one observer finds for the others is a typed field of the Exchange (facts.py),
    # so a reader never needs the finder's module, and either can change alone.
    graph = import_graph()
    crossings = sorted(
        f"{module} ({mine}) imports {target} ({theirs})"
        for module, targets in graph.items()
        if (mine := owner(module)) is not None
        for target in targets
        if (theirs := owner(target)) is not None and theirs != mine
    )
    assert not crossings, crossings
    assert (owner("ollama_tap.recorder.record"), owner("ollama_tap.otel.content")) == (
        "recorder",
        "otel",
    )
    assert owner("ollama_tap.metrics.families") is None and owner("ollama_tap.facts") is None


def test_every_observer_that_declares_a_phase_is_known_here() -> None:
    declaring = {
        name
        for name, path in MODULES.items()
        if re.search(r"^\s+phase = Phase\.", path.read_text(), re.M)
    }
    unknown = sorted(m for m in declaring if owner(m) is None and m not in SHARED_OBSERVERS)
    assert not unknown, f"observers missing from OBSERVERS: {unknown}"
    for prefix in OBSERVERS.values():
        assert any(m == prefix or m.startswith(prefix + ".") for m in declaring), prefix


NARRATION: Final = re.compile(
    r"\bused to\b|\bissue \d+|\bresearch\b|\btimes the instructions\b"
    r"|\ba (third|fifth|tenth|quarter) of (its|the|a|every)\b|\d µs per\b",
    re.IGNORECASE,
)
"""History ("it used to"), outside references (issues, research notes not in the
repository) and measured figures that drift ("a tenth of its CPU"): CONTRIBUTING forbids
them in the code; the figures belong in docs/performance-log.md."""


NARRATION_ELSEWHERE: Final = frozenset({"ollama_tap.otel.emit", "ollama_tap.otel.encode"})
"""Modules whose export code is being replaced by the SDK's exporter in a change of its own:
their measured figures go with it. Empty this set when that change lands."""


def test_no_comment_narrates_history_or_cites_what_is_not_in_the_repository() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for name, path in MODULES.items()
        if name not in NARRATION_ELSEWHERE
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if NARRATION.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_narration_guard_catches_what_it_is_for() -> None:
    for text in (
        "# it used to wake every second",
        "# Readable output (issue 21)",
        "(research §10.B, rules L0-L7)",
        "its two stat calls were a tenth of its CPU",
        "the SDK's encoder took five times the instructions",
    ):
        assert NARRATION.search(text), text
    for text in ("gen_ai.system_instructions", "`812 µs`, `31.4 ms`", "the rules of §3"):
        assert not NARRATION.search(text), text


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


def test_no_test_module_imports_another() -> None:
    # A helper two test files share lives in tests/support/ (or a folder's helper module):
    # importing a test module runs its tests' collection twice and ties the files together.
    tests = PACKAGE.parent / "tests"
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [
                f"{path.relative_to(tests.parent)} imports {name}"
                for name in names
                if name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")
            ]
    assert not found, found


def metadata_keys(tree: ast.AST) -> Iterator[ast.expr]:
    """The keys a module reads or writes in `<x>.metadata`: subscripts and get/pop/setdefault."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_metadata(node.value):
            yield node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_metadata(node.func.value)
            and node.args
        ):
            yield node.args[0]
        elif isinstance(node, ast.Compare) and any(_is_metadata(c) for c in node.comparators):
            yield node.left


def _is_metadata(node: ast.expr) -> bool:
    """`x.metadata`, for any x but the `importlib` module."""
    if not (isinstance(node, ast.Attribute) and node.attr == "metadata"):
        return False
    return not (isinstance(node.value, ast.Name) and node.value.id == "importlib")


def test_an_observer_keeps_only_its_own_state_in_metadata() -> None:
    # `ex.metadata` is each observer's scratch space under a key of its own module; a fact
    # for others is a typed Exchange field. A string literal or a borrowed key is how one
    # observer would start reading another's state.
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        own = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        for key in metadata_keys(tree):
            if not (isinstance(key, ast.Name) and key.id in own):
                found.append(f"{name}:{key.lineno}: {ast.unparse(key)}")
            elif owner(name) is None and name not in SHARED_OBSERVERS:
                found.append(f"{name}:{key.lineno}: not an observer")
    assert not found, found
    sample = ast.parse(
        'ex.metadata["recorder"]\nex.metadata.get(NAME)\nKEY in ex.metadata\n'
        'importlib.metadata.version("x")'
    )
    assert [ast.unparse(k) for k in metadata_keys(sample)] == ["'recorder'", "NAME", "KEY"]
