"""Spec references in the code point at design notes that ship with the repository.

Why: docstrings used to cite the product spec (`10-canvas.md §4`), which lives outside the repository, so a
reader of the code could not open it. Citations now name a file under `docs/` and, optionally, a heading in
it: `(docs/design/canvas.md, "Execution")` or `docs/design/canvas.md#execution`. These tests fail when a
citation names a file or a heading that does not exist, or when an outside-spec reference comes back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("flowsteer_mcp", "operators", "training", "benchmarks")

# `10-canvas.md`, `20-operators.md §3`, `spec 20-operators §3`: the numbered files of the outside spec.
OUTSIDE_SPEC = re.compile(r"\b\d{2}-[a-z]+(?:\.md\b|\s*§)")
# `docs/x/y.md`, then `#anchor`, or `, "Heading"` with further `and "Heading"` / `, "Heading"`.
CITATION = re.compile(r"(docs/[\w./-]+?\.md)(?:#([\w-]+)|((?:(?:,\s*|\s+and\s+)\"[^\"\n]+\")*))")
QUOTED = re.compile(r"\"([^\"\n]+)\"")
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def headings(markdown: str) -> list[str]:
    """The heading texts of a Markdown file, ignoring lines inside fenced code blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.append(match.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")


def citation_problems(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the docs citations in `text`: missing files and missing headings."""
    problems = []
    for match in CITATION.finditer(text):
        path, anchor, quoted = match.group(1), match.group(2), match.group(3) or ""
        target = root / path
        if not target.is_file():
            problems.append(f"{path} does not exist")
            continue
        titles = headings(target.read_text(encoding="utf-8"))
        if anchor is not None and anchor not in {slug(t) for t in titles}:
            problems.append(f"{path} has no heading with anchor #{anchor}")
        problems.extend(f'{path} has no heading "{title}"' for title in QUOTED.findall(quoted) if title not in titles)
    return problems


def source_files() -> list[Path]:
    return sorted(path for folder in SOURCE_DIRS for path in (ROOT / folder).rglob("*.py"))


def test_the_checks_catch_what_they_should() -> None:
    assert OUTSIDE_SPEC.search("Update rules (10-canvas.md §4)")
    assert OUTSIDE_SPEC.search("on this CPU (spec 20-operators §3)")
    assert not OUTSIDE_SPEC.search("a 2-core CPU, utf-8 text, see docs/design/canvas.md")
    assert citation_problems('(docs/design/canvas.md, "Execution")') == []
    assert citation_problems('(docs/design/canvas.md, "Stage kinds" and "Execution")') == []
    assert citation_problems("docs/design/canvas.md#finish-gate") == []
    assert citation_problems('(docs/design/nowhere.md, "Execution")') == ["docs/design/nowhere.md does not exist"]
    assert citation_problems('(docs/design/canvas.md, "Execution" and "Nowhere")') == [
        'docs/design/canvas.md has no heading "Nowhere"'
    ]
    assert citation_problems("docs/design/canvas.md#nowhere") == [
        "docs/design/canvas.md has no heading with anchor #nowhere"
    ]


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_to_the_outside_spec(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [f"{number}: {line.strip()}" for number, line in enumerate(lines, 1) if OUTSIDE_SPEC.search(line)]
    assert not found, "cite the design notes in docs/ instead of the outside spec:\n" + "\n".join(found)


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_citations_resolve(path: Path) -> None:
    assert citation_problems(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs/design").glob("*.md")))
def test_links_between_docs_resolve(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    missing = [link for link in MARKDOWN_LINK.findall(text) if "://" not in link and not (path.parent / link).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"
    assert citation_problems(text) == []
