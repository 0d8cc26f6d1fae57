"""What the repository itself must not hold: a merge's conflict markers slipped into a
commit once (docs/operations.md) and nothing failed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"^(<{7}|>{7}) ", re.MULTILINE)
_SOURCES = ("*.py", "*.md", "*.yaml", "*.yml", "*.toml", "*.json", "Makefile", "Dockerfile")
_SKIPPED = {".git", ".venv", ".venv-llm", "node_modules", ".ci", "build", "dist"}


def _files() -> list[Path]:
    found: list[Path] = []
    for pattern in _SOURCES:
        for path in ROOT.rglob(pattern):
            parts = set(path.relative_to(ROOT).parts)
            if not parts & _SKIPPED and not any(p.startswith(".") for p in parts):
                found.append(path)
    return found


def test_no_file_holds_a_merge_conflict_marker() -> None:
    files = _files()
    assert any(path.name == "README.md" for path in files)  # the walk reads the repository
    marked = [
        str(path.relative_to(ROOT))
        for path in files
        if _MARKER.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert marked == []


# A test may skip, or look a program up, only through tests/optional.py, which counts the rest
# of it apart from the coverage gates (tests/gates.py): a skip made any other way would leave
# the gates leaning on a test that a newcomer's machine does not run.
_SKIPS = re.compile(
    r"pytest\.skip\b|\.skipif\b|importorskip|mark\.skip\b|xfail|\bwhich\(|find_spec\("
)
_MAY_SKIP = {"tests/optional.py", "tests/test_repository.py"}


def test_tests_skip_and_find_tools_only_through_tests_optional() -> None:
    tests = sorted((ROOT / "tests").rglob("*.py"))
    assert len(tests) > 100  # the walk reads the suite
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tests
        if str(path.relative_to(ROOT)) not in _MAY_SKIP
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _SKIPS.search(line)
    ]
    assert found == []
