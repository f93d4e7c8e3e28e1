"""What a compiled build depends on: the compiled modules and every module they import, and
nothing else (an edit to the CLI needs no build)."""

from __future__ import annotations

from pathlib import Path

from ollama_tap import compiled

ROOT = Path(__file__).resolve().parents[1]


def test_the_compiled_modules_exist() -> None:
    assert [name for name in compiled.MODULES if not (ROOT / name).is_file()] == []


def test_a_build_depends_on_what_the_compiled_modules_import_and_no_more() -> None:
    found = set(compiled.sources(ROOT))
    assert set(compiled.MODULES) <= found
    # Imported by the relay's driver, through the package and directly.
    assert {
        "ollama_tap/config.py",
        "ollama_tap/ollama/__init__.py",
        "ollama_tap/__init__.py",
    } <= found
    assert not found & {
        "ollama_tap/cli/__init__.py",
        "ollama_tap/otel/spans.py",
        "ollama_tap/app.py",
    }
    assert set(compiled.source_hashes(ROOT)) == found


def test_imports_are_followed_in_every_form(tmp_path: Path) -> None:
    package = tmp_path / "ollama_tap"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__", "a", "b", "c", "sub/__init__", "sub/d", "sub/e"):
        (package / f"{name}.py").write_text("")
    (package / "sub" / "d.py").write_text(
        "import ollama_tap.sub.e\nfrom ollama_tap import b\nfrom . import e\nfrom .. import c\n"
        "from ollama_tap.a import name\n"
        "def later() -> None:\n    import json\n"
    )
    assert compiled._imports(package / "sub" / "d.py", tmp_path) == {
        Path(p)
        for p in (
            "ollama_tap/__init__.py", "ollama_tap/a.py", "ollama_tap/b.py", "ollama_tap/c.py",
            "ollama_tap/sub/__init__.py", "ollama_tap/sub/e.py",
        )
    }  # fmt: skip
