"""The targets the report judges, each met or missed with the numbers that decide it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from bench.cases.store_load import StoreLoadResult
from bench.client_targets import CLIENT_TARGETS
from bench.growth import GrowthResult, added_p99, workers_ratio
from bench.matrix_checks import (
    CellCheck,
    MatrixTarget,
    all_kept,
    pressure,
    rare_compactions,
    tally,
)
from bench.measures import (
    LITELLM,
    PROXY,
    CaseResult,
    CellResult,
    SessionResult,
    percentile,
)

Status = Literal["met", "missed", "not measured"]
NOT_HAD = "I do not have the value"
"""How the mock's recaller answers a question it found no value for."""
USER_STATED = frozenset({"tool-heavy", "chatty", "typed"})
"""The workloads whose checks are the user's typed statements and facts (`kept`)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    requirement: str
    measured: str
    status: Status
    case: str | None = None
    """The overhead case to profile when the target is missed."""


def _status(ok: bool, *numbers: float) -> Status:
    if any(math.isnan(n) for n in numbers):
        return "not measured"
    return "met" if ok else "missed"


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _latency(cases: dict[str, CaseResult]) -> Verdict | None:
    case = cases.get("c1")
    if case is None:
        return None
    p50, p99 = case.added(PROXY, 0.5), case.added(PROXY, 0.99)
    return Verdict(
        "added latency, concurrency 1, 10k-token history",
        "p50 <= 1 ms and p99 <= 3 ms",
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms",
        _status(p50 <= 1 and p99 <= 3, p50, p99),
        "c1",
    )


def _versus_litellm(cases: dict[str, CaseResult]) -> Verdict | None:
    case = cases.get("c32")
    if case is None:
        return None
    ours, theirs = case.added(PROXY, 0.5), case.added(LITELLM, 0.5)
    proxy, litellm = case.measures[PROXY], case.measures.get(LITELLM)
    rps_ratio = _ratio(proxy.rps, litellm.rps) if litellm is not None else float("nan")
    if litellm is None:
        measured = f"added p50 {ours:.2f} ms, {proxy.rps:,.0f} req/s; LiteLLM not measured"
    else:
        measured = (
            f"added p50 {ours:.2f} ms vs LiteLLM {theirs:.2f} ms ({_ratio(ours, theirs):.3f}x); "
            f"{proxy.rps:,.0f} vs {litellm.rps:,.0f} req/s ({rps_ratio:.1f}x)"
        )
    return Verdict(
        "concurrency 32 against LiteLLM's proxy",
        "added p50 <= 1/10 of LiteLLM's, throughput >= 10x LiteLLM's",
        measured,
        _status(ours <= theirs / 10 and rps_ratio >= 10, theirs, rps_ratio),
        "c32",
    )


def _ttfb(cases: dict[str, CaseResult]) -> Verdict | None:
    case = cases.get("stream")
    if case is None:
        return None
    added, per_chunk_us = case.added_ttfb(PROXY), case.added_per_chunk(PROXY) * 1000
    return Verdict(
        "streaming, time to first byte, concurrency 1",
        "added <= 1 ms",
        f"added p50 {added:.2f} ms ({per_chunk_us:.1f} us per chunk after it)",
        _status(added <= 1, added),
        "stream",
    )


def _history(cases: dict[str, CaseResult]) -> Verdict | None:
    small, large = cases.get("history-1k"), cases.get("history-100k")
    if small is None or large is None:
        return None
    a, b = small.added(PROXY, 0.5), large.added(PROXY, 0.5)
    return Verdict(
        "a 100k-token history against a 1k-token one, nothing to compact",
        "added p50 at 100k <= 4x added p50 at 1k",
        f"{b:.2f} ms vs {a:.2f} ms ({_ratio(b, a):.1f}x)",
        _status(b <= 4 * a, a, b),
        "history-100k",
    )


def overhead_verdicts(cases: dict[str, CaseResult]) -> list[Verdict]:
    found = (_latency(cases), _versus_litellm(cases), _ttfb(cases), _history(cases))
    return [verdict for verdict in found if verdict is not None]


def session_verdicts(direct: SessionResult, proxied: list[SessionResult]) -> list[Verdict]:
    """Effectiveness targets; every proxied session must meet each."""
    errors = sum(s.client_errors for s in proxied)
    shares = [s.forwarded_share for s in proxied]
    cache = [_ratio(s.cache_share, direct.cache_share) for s in proxied]
    kept = [s.facts_share for s in proxied]
    labels = "; ".join(s.label.removeprefix("proxy, ") for s in proxied)
    return [
        Verdict(
            "client-visible errors",
            "zero",
            f"{errors} in {sum(s.model_calls for s in proxied)} model calls ({labels})",
            "met" if errors == 0 else "missed",
        ),
        Verdict(
            "tokens forwarded / tokens sent, long session",
            "<= 40 %",
            " / ".join(f"{share:.1%}" for share in shares),
            _status(max(shares) <= 0.40, *shares),
        ),
        Verdict(
            "prompt-cache share through the proxy / direct share",
            ">= 90 %",
            " / ".join(f"{ratio:.1%}" for ratio in cache)
            + f" (direct share {direct.cache_share:.1%}; proxied "
            + " / ".join(f"{s.cache_share:.1%}" for s in proxied)
            + ")",
            _status(min(cache) >= 0.9, *cache),
        ),
        Verdict(
            "planted facts in the last forwarded request",
            "all",
            " / ".join(f"{len(s.facts_kept)} of {len(s.facts_planted)}" for s in proxied),
            _status(min(kept) >= 1.0, *kept),
        ),
    ]


# --- the effectiveness matrix -----------------------------------------------------------------


def _no_late_overflow(cell: CellResult) -> tuple[bool | None, str]:
    late = cell.overflows_after_calibration
    return late == 0, f"{late} of {cell.overflows}"


def _no_high_landing(cell: CellResult) -> tuple[bool | None, str]:
    above, landings = cell.landings_above_target, cell.landing_pressures
    peak = f", highest {pressure(max(landings))}" if landings else ""
    # A head-heavy cell's target is in the room its instructions and tools leave.
    own = f" (its target {cell.target:.3f})" if cell.workload == "fixed-heavy" else ""
    return above == 0, f"{above} of {cell.compactions}{peak}{own}"


def _stale_gone(cell: CellResult) -> tuple[bool | None, str]:
    if not cell.stale:
        return None, "no replaced value"
    found = cell.stale_found
    return not found, f"{len(found)} of {len(cell.stale)} still there" + "".join(
        f'; `{stale.key}` under "{stale.heading}"' for stale in found
    )


def _landed_after_result(cell: CellResult) -> tuple[bool | None, str]:
    # The first request is the one the result answers; the compactions after it cut it.
    after = list(zip(cell.applied[1:], cell.pressures[1:], strict=True))
    if not after:
        return None, "no request after the result"
    indices = [i for i in range(1, len(cell.applied)) if cell.applied[i] != "none"]
    landings = [cell.pressures[i] for i in indices]
    above = sum(cell.above_target(i) for i in indices)
    shown = ", ".join(f"{pressure(p)} ({applied})" for applied, p in after)
    return bool(landings) and above == 0, f"{above} of {len(landings)} above; {shown}"


def _no_client_error(cell: CellResult) -> tuple[bool | None, str]:
    return cell.client_errors == 0, f"{cell.client_errors} in {cell.model_calls} calls"


def _no_strict_refusal(cell: CellResult) -> tuple[bool | None, str]:
    return cell.strict_rejections == 0, str(cell.strict_rejections)


def _answers(cell: CellResult) -> str:
    return ", ".join(
        f"`{a.key}` {a.state}: " + ("right" if a.right else f'"{a.text[:48]}"')
        for a in cell.answers
    )


def _recalled(cell: CellResult) -> tuple[bool | None, str]:
    if not cell.answers:
        return None, "no question asked"
    right = sum(answer.right for answer in cell.answers)
    return right == len(cell.answers), f"{right} of {len(cell.answers)} ({_answers(cell)})"


def _needed(cell: CellResult) -> tuple[bool | None, str]:
    compacted = [answer for answer in cell.answers if answer.compacted]
    if not compacted:
        return None, "no value compacted when asked for"
    missing = sum(a.text.startswith(NOT_HAD) and not a.right for a in compacted)
    return missing == len(compacted), (
        f"{missing} of the {len(compacted)} compacted said they do not have it ({_answers(cell)})"
    )


def _hidden(cell: CellResult) -> tuple[bool | None, str]:
    return cell.unknown_calls == 0, (
        f"{cell.unknown_calls} (the model made {cell.recall_calls} in {cell.recall_rounds} rounds)"
    )


def _per_cell(name: str, requirement: str, cells: list[CellResult], check: CellCheck) -> Verdict:
    """One target judged in every cell: which cells hold it, which miss it, and by how much."""
    judged = [(cell, *check(cell)) for cell in cells]
    missed = [f"{cell.name}: {numbers}" for cell, ok, numbers in judged if ok is False]
    held = [cell.name for cell, ok, _ in judged if ok]
    unmeasured = [f"{cell.name}: {numbers}" for cell, ok, numbers in judged if ok is None]
    parts = [f"holds in {len(held)} of {len(judged)} cells"]
    if missed:
        parts.append("missed in " + "; ".join(missed))
    if unmeasured:
        parts.append("not measured in " + "; ".join(unmeasured))
    if not held and not missed:
        status: Status = "not measured"
    else:
        status = "missed" if missed else "met"
    return Verdict(name, requirement, ". ".join(parts), status)


MATRIX_TARGETS = (
    MatrixTarget(
        "errors",
        "client-visible errors",
        "0 in every cell",
        lambda cell: True,
        _no_client_error,
    ),
    MatrixTarget(
        "strict",
        "provider refusals of broken tool pairing, role order or reasoning items",
        "0 in every cell",
        lambda cell: True,
        _no_strict_refusal,
    ),
    # Issue 25: a thinking block comes back as the provider issued it, or not at all.
    MatrixTarget(
        "signatures",
        "thinking blocks forwarded byte-identical to those the provider issued for their turn",
        "every assistant turn that thought, in every cell with thinking",
        lambda cell: cell.thinking,
        tally(lambda cell: cell.signatures),
    ),
    MatrixTarget(
        "overflow",
        "requests over the provider's window after the first calibration",
        "0 in every cell (measured: after / all overflows)",
        lambda cell: True,
        _no_late_overflow,
    ),
    MatrixTarget(
        "landing",
        "compactions landing above the target, or above what had to stay where that is higher",
        "0 in every cell (x-context-pressure > compaction_target {target:g})",
        # A client's working set, or a running turn's rounds, can keep a request above the
        # target by design: those landings are judged against what had to stay (`floors`).
        lambda cell: True,
        _no_high_landing,
    ),
    MatrixTarget(
        "frequency",
        "requests per compaction, 8k tool-heavy agent",
        ">= 3",
        lambda cell: cell.window == 8_192 and cell.workload == "tool-heavy",
        rare_compactions,
    ),
    MatrixTarget(
        "kept",
        "user-stated rules, constraints, facts, goals, preferences kept, useless summarizer",
        "100 % in every cell",
        lambda cell: cell.summarizer == "poor" and cell.workload in USER_STATED,
        all_kept,
    ),
    # Issue 21: what the agent needs, kept with either summarizer.
    MatrixTarget(
        "labelled",
        "labelled statements kept (each subject's latest value), both summarizers",
        "100 % in every cell",
        lambda cell: cell.workload == "labelled",
        all_kept,
    ),
    MatrixTarget(
        "stale",
        "replaced values in the last request's compaction block, labelled statements",
        "0 in every cell",
        lambda cell: cell.workload == "labelled",
        _stale_gone,
    ),
    MatrixTarget(
        "identifiers",
        "identifiers only tool results carried, kept, both summarizers",
        "100 % in every cell",
        lambda cell: cell.workload == "artifacts",
        all_kept,
    ),
    MatrixTarget(
        "result-cut",
        "the oversized newest result forwarded cut with its item note, every strategy",
        "in every request after it",
        lambda cell: cell.workload == "oversized-result",
        tally(lambda cell: cell.result_cut),
    ),
    MatrixTarget(
        "result-landing",
        "compactions carrying the oversized result at or below the target, every strategy",
        "at least one, each x-context-pressure <= compaction_target {target:g}",
        lambda cell: cell.workload == "oversized-result",
        _landed_after_result,
    ),
    MatrixTarget(
        "running-user",
        "the running turn's user message forwarded in place, fixed-heavy agent",
        "in every forwarded request",
        lambda cell: cell.workload == "fixed-heavy",
        tally(lambda cell: cell.running_user),
    ),
    MatrixTarget(
        "running-rounds",
        "no round of the running turn dropped while anything older is forwarded, nor a "
        "placeholder where its cuts fit the usable input, fixed-heavy agent",
        "in every forwarded request",
        lambda cell: cell.workload == "fixed-heavy",
        tally(lambda cell: cell.running_rounds),
    ),
    MatrixTarget(
        "head-frequency",
        "requests per compaction, fixed-heavy agent",
        ">= 3",
        lambda cell: cell.workload == "fixed-heavy",
        rare_compactions,
    ),
    # Issue 22: what a compaction removed, recalled.
    MatrixTarget(
        "recall-answer",
        "late questions answered with the value only a compacted result held, recall on",
        "every question in every cell (streamed and not)",
        lambda cell: cell.workload == "recall" and cell.recall,
        _recalled,
    ),
    MatrixTarget(
        "recall-hidden",
        "context_recall calls that reached the client, recall workload",
        "0 in every cell (streamed and not)",
        lambda cell: cell.workload == "recall",
        _hidden,
    ),
    MatrixTarget(
        "recall-stable",
        "client requests no compaction changed that extend the one before, tools and "
        "instructions included, recall workload",
        "every such request in every cell",
        lambda cell: cell.workload == "recall",
        tally(lambda cell: cell.stable),
    ),
    MatrixTarget(
        "recall-needed",
        "late questions about a compacted value answered without recall (context.recall false)",
        '"I do not have the value ..." to every such question in every cell',
        lambda cell: cell.workload == "recall" and not cell.recall,
        _needed,
    ),
    # Issue 38: what the client sends for this turn is never destroyed.
    *CLIENT_TARGETS,
)


def cell_misses(cell: CellResult) -> list[str]:
    """The short names of the matrix targets `cell` misses."""
    return [t.short for t in MATRIX_TARGETS if t.applies(cell) and t.check(cell)[0] is False]


API_NAMES = {
    "chat": "chat completions",
    "responses": "Responses API",
    "responses+compact": "Responses API, the client compacting through /v1/responses/compact",
    "messages": "Messages API",
}


def api_of(cell: CellResult) -> str:
    """The API a cell's targets are judged under: the Responses cells whose client compacts
    its own history (as Codex does) apart from the others."""
    return f"{cell.api}+compact" if cell.client_compacts else cell.api


def matrix_verdicts(cells: list[CellResult]) -> list[Verdict]:
    """The matrix's targets per API, each judged per cell (a miss in any cell misses it)."""
    verdicts = []
    for api in dict.fromkeys(api_of(cell) for cell in cells):
        for target in MATRIX_TARGETS:
            judged = [cell for cell in cells if api_of(cell) == api and target.applies(cell)]
            if judged:
                name = f"matrix, {API_NAMES.get(api, api)}: {target.name}"
                requirement = target.requirement.format(target=judged[0].target)
                verdicts.append(_per_cell(name, requirement, judged, target.check))
    return verdicts


def store_load_verdict(result: StoreLoadResult) -> Verdict:
    """A burst of conversations on Redis: every stream answered, nothing the store lost."""
    measured = (
        f"{result.completed:,} / {result.streams:,} streams answered, "
        f"{result.store_errors:,.0f} store errors, {result.writes_lost:,.0f} writes lost, "
        f"{result.stored:,} / {result.streams:,} conversations stored, {result.seconds:.1f} s"
    )
    if result.problem is not None:
        measured = f"not measured: {result.problem}"
    complete = result.completed == result.stored == result.streams
    return Verdict(
        f"{result.streams:,} concurrent streams with zero store errors on Redis",
        "every stream answered, 0 store errors, every conversation's state stored",
        measured,
        _status(
            complete and result.store_errors == 0 and result.writes_lost == 0,
            result.store_errors,
            result.writes_lost,
        ),
    )


def _num(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def growth_verdicts(result: GrowthResult) -> list[Verdict]:
    """Issue 23's targets for agents whose histories grow (`bench/growth.py`)."""
    nan = float("nan")
    large, small = result.one_large.added, result.one_small.added_compacting
    large_p50 = percentile(large, 0.5) if large else nan
    small_p99 = percentile(small, 0.99) if small else nan
    fleet = added_p99(result, "proxy")
    ratio = workers_ratio(result)
    tokens = f"{result.steps} steps"
    return [
        Verdict(
            f"1 agent, growing history ({tokens}), no compaction: added p50 <= 1.5 ms",
            "added p50 <= 1.5 ms",
            f"{_num(large_p50)} ms over {len(large)} requests",
            _status(large_p50 <= 1.5, large_p50),
        ),
        Verdict(
            "1 agent, 16k window: compaction turns' added p99 <= 15 ms",
            "added p99 <= 15 ms",
            f"{_num(small_p99)} ms over {len(small)} compaction turns",
            _status(small_p99 <= 15, small_p99),
        ),
        Verdict(
            f"{result.agents} agents, 16k window: added p99 <= 60 ms",
            "added p99 <= 60 ms",
            f"{_num(fleet, 1)} ms",
            _status(fleet <= 60, fleet),
        ),
        Verdict(
            "--workers 2: throughput >= 1.5x one worker's",
            ">= 1.5x",
            f"{_num(ratio)}x",
            _status(ratio >= 1.5, ratio),
        ),
    ]
