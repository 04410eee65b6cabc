"""The documentation the code points to exists: every `docs/*.md` a docstring, comment, config,
test, benchmark or the README names is in the repository, and every `docs/models.md §N` it cites
is a section of that page."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "README.md", ROOT / "train.py"] + [
    path for folder in ("jcaps", "configs", "benchmarks", "tests") for path in sorted((ROOT / folder).rglob("*.py"))
]


def _citations(pattern: str) -> list[tuple[str, str]]:
    """(file:line, match) of every match of `pattern` in the sources."""
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", match) for match in re.findall(pattern, line)]
    return found


def test_every_cited_docs_page_exists():
    cited = _citations(r"docs/[\w-]+\.md")
    assert cited
    missing = [(where, page) for where, page in cited if not (ROOT / page).is_file()]
    assert not missing


def test_every_cited_models_section_exists():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "models.md").read_text(encoding="utf-8"), re.M))
    cited = _citations(r"docs/models\.md`? §(\d+)")
    assert cited
    assert not [(where, number) for where, number in cited if number not in sections]
