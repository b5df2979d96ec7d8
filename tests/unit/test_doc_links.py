"""Every relative link of README.md and docs/*.md leads somewhere: the file exists, and an anchor
(#heading) names a heading of it, as GitHub makes anchors (lower case, punctuation dropped, spaces
as hyphens). A user who follows one never lands on a 404 (issue #31: a broken link in
docs/performance.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (a repeated heading gets -1, -2...)."""
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if match := re.match(r"#{1,6}\s+(.*)", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            n, unique = 0, slug
            while unique in found:
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_leads_somewhere(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken
