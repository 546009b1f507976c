"""The README is a front page and the reference lives in docs/ (issue 25 item 1): the front page
stays short, every page is reachable from it, and no relative link or picture points at
nothing — a file that moved or a heading that was renamed fails here, not in a reader's
browser."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_FRONT_PAGE = 300

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
HEADING = re.compile(r"^#{1,6} (.*)$", re.MULTILINE)
CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces → "-"."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def links(page: Path) -> list[str]:
    text = CODE_BLOCK.sub("", page.read_text())
    return [a or b for a, b in LINK.findall(text)]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def broken(page: Path) -> list[str]:
    found = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL: checked below, not here
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            found.append(f"{_name(page)}: {target} (no such file)")
        elif fragment and file.suffix == ".md":
            anchors = {slug(h) for h in HEADING.findall(CODE_BLOCK.sub("", file.read_text()))}
            if fragment not in anchors:
                found.append(f"{_name(page)}: {target} (no such heading)")
    return found


def test_the_front_page_is_short() -> None:
    assert len(README.read_text().splitlines()) <= MAX_FRONT_PAGE


def test_every_relative_link_and_picture_points_at_something() -> None:
    assert PAGES, "docs/ has no pages"
    problems = [p for page in [README, *PAGES] for p in broken(page)]
    assert problems == []


def test_every_docs_page_is_linked_from_the_front_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README)}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


def test_the_docs_point_at_nothing_outside_the_repository() -> None:
    outside = [
        f"{page.relative_to(ROOT)}: {t}"
        for page in [README, *PAGES]
        for t in links(page)
        if re.match(r"^[a-z][a-z0-9+.-]*:", t)
    ]
    assert outside == []


def test_the_checker_finds_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Here\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#here) [b](gone.md) [c](other.md#not-here) ![d](pic.png)\n")
    assert [p.split(": ", 1)[1] for p in broken(page)] == [
        "gone.md (no such file)",
        "other.md#not-here (no such heading)",
        "pic.png (no such file)",
    ]
