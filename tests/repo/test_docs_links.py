"""Every relative link in README.md and docs/*.md points at a file of this repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target), images included


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # not in code blocks
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{page.relative_to(REPO)} links to missing files: {missing}"


def test_the_readme_links_every_guide() -> None:
    linked = {(REPO / t).resolve() for t in relative_links(REPO / "README.md")}
    guides = {p.resolve() for p in PAGES[1:]}
    assert guides - linked == set()
