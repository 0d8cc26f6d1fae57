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
