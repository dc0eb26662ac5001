"""Every relative link in the docs leads somewhere in the repository: the file exists, and a ``#anchor`` names a
heading of the Markdown file it points into (GitHub's heading ids)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a ``#`` there is a comment, a ``[x](y)`` is code)."""
    lines, in_fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            lines.append(line)
    return lines


def heading_ids(path: Path) -> set[str]:
    """The ids GitHub gives a file's headings: lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2``
    appended to repeats."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def relative_links(path: Path) -> list[str]:
    links = [target for line in _prose_lines(path) for target in LINK.findall(line)]
    return [t for t in links if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ...


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    dead = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists() or ROOT not in linked.parents and linked != ROOT:
            dead.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in heading_ids(linked):
            dead.append(f"{target}: no heading with that id in {linked.relative_to(ROOT)}")
    assert not dead, f"{doc.relative_to(ROOT)}: " + "; ".join(dead)


def test_heading_ids_follow_github() -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    ids = heading_ids(doc)
    assert "the-store-thread-what-writing-off-the-event-loop-costs" in ids
    assert "filtered-pulls-sluice-bench-filter" in ids
