"""The documents cite only what exists: every relative link in the README, CONTRIBUTING.md and
docs/ names a file of the repository (and, with an anchor into a Markdown file, one of its
headings), every `NAME.md` mentioned in the text is a file there, and so is the NAME.md of
every "NAME's" (DESIGN's definitions, say)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
MENTION = re.compile(r"(?<![\w/.-])([\w-]+(?:/[\w.-]+)*\.md)\b")
OWNED = re.compile(r"\b([A-Z]{5,})'s\b")
"""A document named as an owner ("the README's Measurements"): NAME.md must exist."""
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_mentions_resolve(doc: Path) -> None:
    text = doc.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    for name in MENTION.findall(FENCE.sub("", text)):
        candidates = [doc.parent / name, REPO / name, REPO / "docs" / name]
        if not any(c.exists() for c in candidates):
            broken.append(name)
    for name in OWNED.findall(text):
        if not (REPO / f"{name}.md").exists():
            broken.append(f"{name}'s")
    assert broken == [], f"{doc.relative_to(REPO)} cites what does not exist"
