"""Issue 38's matrix targets: what the client sends for this turn is never destroyed.

Judged on the issue's client shapes (`bench/workloads/clients.py`, `pastes.py`,
`schemas.py`), from what `bench.shapes` found request by request and what the cells count.
The thresholds are the issue's; a target the proxy misses is reported missed with its
numbers, never eased to pass.
"""

from __future__ import annotations

import math
from typing import Final

from bench.matrix_checks import MatrixTarget, all_kept, pressure, rare_compactions, tally
from bench.measures import CellResult

SHAPES: Final = frozenset(
    {"aider", "paste-per-turn", "long-turn", "schema-heavy", "fixed-heavy-pastes"}
)
TOOL_SHAPES: Final = SHAPES - {"aider"}
"""The shapes whose agent calls tools."""
SUMMARY_CACHE_SHARE: Final = 0.8
"""The fidelity issue's (21) share of summary input read from the provider's cache."""


def _near_landing(cell: CellResult) -> tuple[bool | None, str]:
    """Each compaction lands within a unit (the largest turn it could remove) of where it
    should: the target, or what had to stay when that is above the target."""
    landed = [i for i, applied in enumerate(cell.applied) if applied != "none"]
    if not landed:
        return None, "no compaction"
    unit = cell.unit_share
    off = []
    for index in landed:
        floor = cell.floors[index] if index < len(cell.floors) else math.nan
        aim = max(cell.target_of(index), floor if math.isfinite(floor) else 0.0)
        landing = cell.pressures[index]
        if not aim - unit <= landing <= aim + unit:
            off.append(f"request {index + 1} at {pressure(landing)} for {aim:.3f}")
    lowest = pressure(min(cell.pressures[i] for i in landed))
    shown = "".join(f"; {where}" for where in off[:3])
    numbers = f"{len(landed) - len(off)} of {len(landed)} within {unit:.3f}, lowest {lowest}"
    return not off, numbers + shown


def _no_repeat(cell: CellResult) -> tuple[bool | None, str]:
    """As many requests per user turn as with a window where nothing compacts."""
    if not cell.user_turns:
        return None, "no turn ran"
    per, unbounded = cell.model_calls / cell.user_turns, cell.planned_calls / cell.user_turns
    return cell.model_calls == cell.planned_calls, (
        f"{per:.2f} per turn against {unbounded:.2f} unbounded ({cell.model_calls} calls, "
        f"{cell.extra_rounds} rounds beyond the plan)"
    )


def _finished(cell: CellResult) -> tuple[bool | None, str]:
    """Every long turn reached its answer."""
    done = cell.user_turns - cell.unfinished
    return cell.unfinished == 0 and cell.user_turns > 0, (
        f"{done} of {cell.user_turns} turns answered ({cell.abandoned_turns} given up at the "
        f"cap, {cell.extra_rounds} rounds beyond the plan)"
    )


def _summaries_cached(cell: CellResult) -> tuple[bool | None, str]:
    share = cell.summary_cache_share
    if math.isnan(share):
        return None, "no summary"
    return share >= SUMMARY_CACHE_SHARE, (
        f"{share:.1%} ({cell.summary_cached_tokens:,} of {cell.summary_prompt_tokens:,} "
        f"tokens, {cell.summary_calls} summaries)"
    )


def _own_history(cell: CellResult) -> bool:
    """Whether the client left its history to the proxy: a client that compacts its own
    (through `/v1/responses/compact`) takes its turn's rounds out itself, and its agent runs
    them again whatever the proxy does."""
    return not cell.client_compacts


CLIENT_TARGETS: Final = (
    MatrixTarget(
        "running-ask",
        "the running turn's user message forwarded whole, in place, as a user message "
        "(issue 38's client shapes)",
        "in every forwarded request",
        lambda cell: cell.workload in SHAPES,
        tally(lambda cell: cell.running_verbatim),
    ),
    MatrixTarget(
        "working-set",
        "the latest working set (aider's files message) forwarded whole, aider-shaped client",
        "in every forwarded request that can hold it",
        lambda cell: cell.workload == "aider",
        tally(lambda cell: cell.working_whole),
    ),
    MatrixTarget(
        "working-flips",
        "the working set in the same form from one request to the next, aider-shaped client",
        "no flip (whole, cut, in the block, gone) in any cell",
        lambda cell: cell.workload == "aider",
        tally(lambda cell: cell.working_forms),
    ),
    MatrixTarget(
        "landing-unit",
        "compactions landing within a unit of the target, or of what had to stay when that "
        "is above it, aider-shaped client",
        "every compaction, never far below",
        lambda cell: cell.workload == "aider",
        _near_landing,
    ),
    MatrixTarget(
        "paste-kept",
        "planted statements kept beside a paste per turn, both summarizers",
        "10 of 10 in every cell",
        lambda cell: cell.workload == "paste-per-turn",
        all_kept,
    ),
    MatrixTarget(
        "paste-order",
        "planted statements in the ledger in the order first said, a paste per turn",
        "in every request whose ledger lists two or more",
        lambda cell: cell.workload == "paste-per-turn",
        tally(lambda cell: cell.ledger_order),
    ),
    MatrixTarget(
        "paste-ledger",
        "no line of a user's paste in the ledger",
        "in every request with a compaction block",
        lambda cell: cell.workload in {"paste-per-turn", "fixed-heavy-pastes"},
        tally(lambda cell: cell.paste_free),
    ),
    MatrixTarget(
        "newest-whole",
        "the newest tool result forwarded whole while the prompt is under the target "
        "(issue 38's tool-calling shapes)",
        "in every request that ends with one",
        lambda cell: cell.workload in TOOL_SHAPES,
        tally(lambda cell: cell.newest_whole),
    ),
    MatrixTarget(
        "no-repeat",
        "requests per user turn as with a window where nothing compacts (no call repeated), "
        "issue 38's tool-calling shapes",
        "equal in every cell whose client leaves its history to the proxy",
        lambda cell: cell.workload in TOOL_SHAPES and _own_history(cell),
        _no_repeat,
    ),
    MatrixTarget(
        "long-finishes",
        "every long single turn (25 tool rounds) reaches its answer",
        "every turn in every cell whose client leaves its history to the proxy",
        lambda cell: cell.workload == "long-turn" and _own_history(cell),
        _finished,
    ),
    MatrixTarget(
        "long-named",
        "every folded round of the running turn named in the block (its tool and arguments)",
        "in every forwarded request, long single turns",
        lambda cell: cell.workload == "long-turn",
        tally(lambda cell: cell.calls_named),
    ),
    MatrixTarget(
        "schema-earlier",
        "every earlier user sentence in the ledger or a forwarded message, tool-schema-heavy "
        "client",
        "in every forwarded request",
        lambda cell: cell.workload == "schema-heavy",
        tally(lambda cell: cell.earlier_said),
    ),
    MatrixTarget(
        "pastes-frequency",
        "requests per compaction, fixed-heavy agent with pastes",
        ">= 3",
        lambda cell: cell.workload == "fixed-heavy-pastes",
        rare_compactions,
    ),
    MatrixTarget(
        "summary-cache",
        "summary input read from the provider's cache, fixed-heavy agent with pastes",
        f">= {SUMMARY_CACHE_SHARE:.0%} of it in every cell that summarized",
        lambda cell: cell.workload == "fixed-heavy-pastes",
        _summaries_cached,
    ),
)
