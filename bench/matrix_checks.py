"""What a matrix target is, and the checks more than one family of targets uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.measures import CellResult, Tally

CellCheck = Callable[[CellResult], tuple[bool | None, str]]
"""Judges one cell: met (True), missed (False) or not measured (None), and its numbers."""


@dataclass(frozen=True, slots=True)
class MatrixTarget:
    short: str
    """The name a cell's row gives a target it misses."""
    name: str
    requirement: str
    """May name `{target}`, the compaction target."""
    applies: Callable[[CellResult], bool]
    check: CellCheck


def pressure(value: float) -> str:
    """A pressure as the headers give it; a budget near zero makes it huge (thousands)."""
    return f"{value:.3f}" if value < 10 else f"{value:,.0f}"


def tally(read: Callable[[CellResult], Tally | None]) -> CellCheck:
    """A check that every forwarded request judged holds the tallied property."""

    def check(cell: CellResult) -> tuple[bool | None, str]:
        counted = read(cell)
        if counted is None or not counted.judged:
            return None, "no request judged"
        details = "".join(f"; {detail}" for detail in counted.details if detail)
        return counted.held == counted.judged, f"{counted.held} of {counted.judged}{details}"

    return check


def rare_compactions(cell: CellResult) -> tuple[bool | None, str]:
    """At least 3 requests per compaction the proxy chose to make."""
    # How often the proxy chose to compact: a client that compacts its own history decides
    # when it does (its compactions are judged for their landing, not their frequency).
    own = cell.proxy_compactions
    if not own:
        return None, "no compaction"
    per = cell.model_calls / own
    clients = cell.compactions - own
    theirs = f", and {clients} the client asked for" if clients else ""
    return per >= 3, f"{per:.2f} ({cell.model_calls} calls, {own} compactions{theirs})"


def all_kept(cell: CellResult) -> tuple[bool | None, str]:
    """Every checked statement in the last forwarded request."""
    kept, checked = cell.kept()
    return kept == checked, f"{kept} of {checked}"  # what was lost: the report's details
