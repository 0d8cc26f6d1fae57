"""Markdown pieces the report's sections share: numbers and tables."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def num(value: float, digits: int = 2) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]
