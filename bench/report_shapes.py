"""Issue 38's tables in the report: each client shape, cell by cell, what its requests showed."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

from bench.markdown import num, table
from bench.matrix_checks import pressure
from bench.measures import CellResult, Tally
from bench.workloads import TITLES

Column = tuple[str, Callable[[CellResult], str]]


def _held(tally: Tally | None) -> str:
    return f"{tally.held}/{tally.judged}" if tally is not None and tally.judged else "-"


def _variant(cell: CellResult) -> str:
    variant = "streamed" if cell.stream else "whole"
    variant += ", thinking" if cell.thinking else ""
    return variant + (", client compacting" if cell.client_compacts else "")


def _landings(cell: CellResult) -> str:
    """The lowest and highest landing, against the target (and what had to stay)."""
    landed = cell.landing_pressures
    if not landed:
        return "-"
    floors = [f for f in cell.floors if math.isfinite(f)]
    stay = f", had to stay {max(floors):.3f}" if floors else ""
    return f"{pressure(min(landed))}-{pressure(max(landed))} / {cell.target:.3f}{stay}"


def _calls(cell: CellResult) -> str:
    return f"{cell.model_calls} / {cell.planned_calls}"


def _summaries(cell: CellResult) -> str:
    share = cell.summary_cache_share
    cached = "-" if math.isnan(share) else f"{share:.0%}"
    return f"{cell.summary_calls}, {cached}"


_COMMON: Final[tuple[Column, ...]] = (
    ("calls / unbounded", _calls),
    ("compactions", lambda c: str(c.compactions)),
    ("requests / compaction", lambda c: num(c.requests_per_compaction)),
    ("landings: lowest-highest / target", _landings),
    ("ask whole in place", lambda c: _held(c.running_verbatim)),
)
_NEWEST: Final[Column] = ("newest result whole (under target)", lambda c: _held(c.newest_whole))
_OWN: Final[dict[str, tuple[Column, ...]]] = {
    "aider": (
        ("files message whole", lambda c: _held(c.working_whole)),
        ("same form as before", lambda c: _held(c.working_forms)),
    ),
    "paste-per-turn": (
        ("kept", lambda c: "{}/{}".format(*c.kept())),
        ("ledger in order", lambda c: _held(c.ledger_order)),
        ("ledger free of pastes", lambda c: _held(c.paste_free)),
        _NEWEST,
    ),
    "long-turn": (
        ("turns answered", lambda c: f"{c.user_turns - c.unfinished}/{c.user_turns}"),
        ("rounds beyond the plan", lambda c: str(c.extra_rounds)),
        ("folded rounds named", lambda c: _held(c.calls_named)),
        _NEWEST,
    ),
    "schema-heavy": (
        ("earlier sentences all there", lambda c: _held(c.earlier_said)),
        _NEWEST,
    ),
    "fixed-heavy-pastes": (
        ("summaries, cached share", _summaries),
        ("ledger free of pastes", lambda c: _held(c.paste_free)),
        _NEWEST,
    ),
}
_INTRO: Final = (
    "Issue 38's client shapes, cell by cell (`bench/shapes.py` judges every forwarded "
    "request). Calls: the client's model calls against those of a window where nothing "
    "compacts (the script's: each turn's rounds and its answer). Landings: the pressure of "
    "each compaction's request, lowest and highest, against the cell's target (for aider, "
    "with the most the instructions, files message and ask took: what had to stay). Each "
    "other column: the requests that hold the property of those judged."
)


def _rows(cells: Sequence[CellResult], columns: Sequence[Column]) -> list[list[str]]:
    return [
        [f"{c.window:,}", c.summarizer, c.api, _variant(c), *(read(c) for _, read in columns)]
        for c in cells
    ]


def shape_tables(cells: Sequence[CellResult]) -> list[str]:
    """A table per client shape that ran."""
    lines: list[str] = []
    for workload, own in _OWN.items():
        ran = [cell for cell in cells if cell.workload == workload]
        if not ran:
            continue
        columns = (*_COMMON, *own)
        header = ("window", "summarizer", "API", "cell", *(name for name, _ in columns))
        lines += [f"{TITLES[workload].capitalize()}:", "", *table(header, _rows(ran, columns), 4)]
    return [_INTRO, "", *lines] if lines else []


def shape_details(cell: CellResult) -> list[str]:
    """What issue 38's judges found wrong in `cell`: each tally's first misses."""
    tallies = (
        cell.running_verbatim, cell.working_whole, cell.working_forms, cell.ledger_order,
        cell.paste_free, cell.newest_whole, cell.calls_named, cell.earlier_said,
    )  # fmt: skip
    return [
        " | ".join(tally.details)
        for tally in tallies
        if tally is not None and tally.held < tally.judged
    ]
