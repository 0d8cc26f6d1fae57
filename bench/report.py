"""The Markdown report (`bench/results/report.md`) of one run of the suite."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bench.cases.mock_check import MockCheck
from bench.growth import GrowthResult
from bench.growth import report as growth_report
from bench.measures import (
    DIRECT,
    LITELLM,
    PROXY,
    Answer,
    CaseResult,
    CellResult,
    Measure,
    SessionResult,
    Tally,
    median,
)
from bench.profiling import Profile
from bench.targets import API_NAMES, NOT_HAD, Verdict, cell_misses, pressure
from bench.workloads import KINDS, LABELLED_KINDS, TITLES

_LABELS = {DIRECT: "direct", PROXY: "compaction-proxy", LITELLM: "LiteLLM proxy"}
_STATUS = {"met": "**met**", "missed": "**MISSED**", "not measured": "not measured"}


@dataclass(slots=True)
class Run:
    """Everything one run produced, for the report and the charts."""

    machine: dict[str, str]
    settings: dict[str, str]
    cases: list[CaseResult] = field(default_factory=list)
    sessions: list[SessionResult] = field(default_factory=list)
    cells: list[CellResult] = field(default_factory=list)
    """The effectiveness matrix, cell by cell."""
    growth: GrowthResult | None = None
    """Agents with growing histories (`bench/growth.py`)."""
    mock_check: MockCheck | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    litellm: str = ""
    charts: list[tuple[str, str]] = field(default_factory=list)
    """(file name, caption) of the charts written beside the report."""


def num(value: float, digits: int = 2) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _targets(run: Run) -> list[str]:
    rows = [(v.name, v.requirement, v.measured, _STATUS[v.status]) for v in run.verdicts]
    return ["## Targets", "", *_table(("target", "requirement", "measured", "status"), rows, 9)]


def _measure_row(case: CaseResult, measure: Measure) -> list[str]:
    name = measure.target
    added = name != DIRECT
    return [
        case.title if name == DIRECT else "",
        _LABELS[name],
        num(measure.p50),
        num(measure.p99),
        num(case.added(name, 0.5)) if added else "",
        num(case.added(name, 0.99)) if added else "",
        num(measure.rps, 0),
        num(measure.cpu_ms_per_request, 3),
        num(measure.peak_rss_mib or float("nan"), 0),
        f"{measure.errors} / {measure.requests}",
    ]


def _overhead(run: Run) -> list[str]:
    header = (
        "case", "path", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "req/s",
        "server CPU ms/req", "server peak RSS MiB", "errors / requests",
    )  # fmt: skip
    rows = [
        _measure_row(case, measure)
        for case in run.cases
        if not case.stream
        for measure in case.measures.values()
    ]
    return [
        "## Overhead",
        "",
        "The same requests sent straight to the mock (`direct`), through `compaction-proxy "
        "serve` and through LiteLLM's proxy, interleaved in rounds. Added latency is the "
        "path's percentile minus direct's. CPU and peak RSS are the server process's on that "
        "path (for `direct`, the mock's). Histories are agent-like (tool calls, JSON and log "
        "results); the compaction cases use a plain chat of 14k tokens on a model whose "
        "window is 16k tokens (LiteLLM forwards those requests as they are).",
        "",
        *_table(header, rows, 2),
        *_streaming(run),
        *_ratios(run),
        *_compaction_headers(run),
        *_errors(run),
    ]


def _streaming(run: Run) -> list[str]:
    rows = []
    for case in run.cases:
        if not case.stream:
            continue
        for name, m in case.measures.items():
            added = name != DIRECT
            rows.append([
                _LABELS[name], num(m.ttfb_p50), num(m.ttfb_p99),
                num(case.added_ttfb(name)) if added else "",
                num(m.stream_p50), num(case.added_per_chunk(name) * 1000, 1) if added else "",
                num(m.events_per_stream, 0), num(m.cpu_ms_per_request, 3),
                num(m.peak_rss_mib or float("nan"), 0), f"{m.errors} / {m.requests}",
            ])  # fmt: skip
    if not rows:
        return []
    header = (
        "path", "TTFB p50 ms", "TTFB p99 ms", "added TTFB p50 ms", "first to last byte p50 ms",
        "added per chunk us", "SSE events", "server CPU ms/req", "peak RSS MiB", "errors",
    )  # fmt: skip
    return [
        "### Streaming (concurrency 1, 10k-token history)",
        "",
        "The mock sends its events back to back, so the time from the first body bytes to "
        "the last is the relay's own work per chunk.",
        "",
        *_table(header, rows, 1),
    ]


def _ratios(run: Run) -> list[str]:
    rows = []
    for case in run.cases:
        proxy, litellm = case.measures.get(PROXY), case.measures.get(LITELLM)
        if proxy is None or litellm is None:
            continue
        ours, theirs = case.added(PROXY, 0.5), case.added(LITELLM, 0.5)
        if case.stream:
            ours, theirs = case.added_ttfb(PROXY), case.added_ttfb(LITELLM)
        rows.append([
            case.title, num(ours), num(theirs), num(theirs / ours if ours > 0 else math.nan, 1),
            num(proxy.rps / litellm.rps if litellm.rps else math.nan, 1),
            num(litellm.cpu_ms_per_request / proxy.cpu_ms_per_request
                if proxy.cpu_ms_per_request else math.nan, 1),
        ])  # fmt: skip
    if not rows:
        return []
    header = (
        "case", "ours added p50 ms", "LiteLLM added p50 ms", "LiteLLM / ours (latency)",
        "ours / LiteLLM (req/s)", "LiteLLM / ours (CPU per request)",
    )  # fmt: skip
    return [
        "### Against LiteLLM's proxy",
        "",
        "Streaming compares the added time to first byte.",
        "",
        *_table(header, rows, 1),
    ]


def _errors(run: Run) -> list[str]:
    lines = [
        f"- {case.title}, {_LABELS[name]}: {m.errors} errors, e.g. {'; '.join(m.error_samples)}"
        for case in run.cases
        for name, m in case.measures.items()
        if m.errors
    ]
    return ["Errors seen by the client:", "", *lines, ""] if lines else []


def _compaction_headers(run: Run) -> list[str]:
    lines = []
    for case in run.cases:
        proxy = case.measures.get(PROXY)
        if proxy is not None and proxy.compaction:
            seen = ", ".join(f"`{k}` x{v}" for k, v in sorted(proxy.compaction.items()))
            before = median([float(b) for b, _ in proxy.tokens])
            after = median([float(a) for _, a in proxy.tokens])
            lines.append(
                f"- {case.title}: {seen}; median tokens {num(before, 0)} before, "
                f"{num(after, 0)} after"
            )
    if not lines:
        return []
    return [
        "What the proxy reported for the timed requests (`X-Compaction-Applied`, and the "
        "calibrated `X-Compaction-Tokens-Before`/`-After`, counted after an existing "
        "checkpoint is applied):",
        "",
        *lines,
        "",
    ]


def _growth(run: Run) -> list[str]:
    if run.growth is None:
        return []
    return ["## Agents with growing histories", "", growth_report(run.growth), ""]


def _mock_check(run: Run) -> list[str]:
    check = run.mock_check
    if check is None:
        return []
    rows = [
        [name, num(check.latency[name].p50, 3), num(check.latency[name].p99, 3),
         num(check.latency[name].rps, 0), num(check.throughput[name].rps, 0)]
        for name in check.latency
    ]  # fmt: skip
    proxy = next((c.measures[PROXY] for c in run.cases if c.key == "c32"), None)
    raw = next(iter(check.throughput.values()))
    note = (
        f"Through the proxy at concurrency 32: {num(proxy.rps, 0)} req/s; the raw mock alone "
        f"serves {num(raw.rps / proxy.rps, 1)}x that (on the same two cores), so it is not "
        "what limits the proxied numbers. The overhead cases use the raw mock."
        if proxy is not None and proxy.rps
        else ""
    )
    header = ("mock", "p50 ms (c=1)", "p99 ms (c=1)", "req/s (c=1)", "req/s (c=32)")
    return [
        "## Mock check",
        "",
        "Is the mock the bottleneck? Both mocks answering the 10k-token request, side by side.",
        "",
        *_table(header, rows, 1),
        note,
        "",
    ]


def _sessions(run: Run) -> list[str]:
    if not run.sessions:
        return []
    keys: list[tuple[str, Callable[[SessionResult], str]]] = [
        ("model calls", lambda s: str(s.model_calls)),
        ("client-visible errors", lambda s: str(s.client_errors)),
        ("tokens sent by the client", lambda s: f"{sum(s.sent_tokens):,}"),
        ("tokens forwarded (chat requests)", lambda s: f"{sum(s.forwarded_tokens):,}"),
        ("forwarded / sent", lambda s: f"{s.forwarded_share:.1%}"),
        ("summary calls", lambda s: str(s.summary_calls)),
        ("summary tokens in / out",
         lambda s: f"{s.summary_prompt_tokens:,} / {s.summary_completion_tokens:,}"),
        ("forwarded + summaries / sent", lambda s: f"{s.forwarded_with_summaries_share:.1%}"),
        ("largest forwarded prompt", lambda s: f"{max(s.forwarded_tokens, default=0):,}"),
        ("cached tokens", lambda s: f"{sum(s.cached_tokens):,}"),
        ("prompt-cache share", lambda s: f"{s.cache_share:.1%}"),
        ("requests with nothing cached (after the first 3)",
         lambda s: str(sum(c == 0 for c in s.cached_tokens[3:]))),
        ("requests extending the previous one", lambda s: f"{s.prefix_stable_share:.0%}"),
        ("planted facts kept", lambda s: f"{len(s.facts_kept)} of {len(s.facts_planted)}"
         + (f" (lost: {', '.join(s.facts_lost)})" if s.facts_lost else "")),
        ("upstream overflows, strict refusals",
         lambda s: f"{s.overflows}, {s.strict_rejections}"),
        ("X-Compaction-Applied", lambda s: ", ".join(
            f"{k} x{v}" for k, v in sorted(s.compactions.items())) or "-"),
        ("wall time s", lambda s: f"{s.wall_s:.1f}"),
    ]  # fmt: skip
    header = ["", *(s.label for s in run.sessions)]
    rows = [[label, *(value(s) for s in run.sessions)] for label, value in keys]
    samples = [f"- {s.label}: {e}" for s in run.sessions for e in s.error_samples]
    return [
        "## Effectiveness: a long scripted agent session",
        "",
        "An OpenAI SDK client runs a scripted tool-using agent (`proxy.mock_upstream`'s "
        "`AgentScript`: two rounds of tool calls per user turn, then an answer) with large "
        "tool results and facts planted in user turns. Through the proxy, the mock has a "
        "32,000-token window (the proxy's defaults otherwise) and refuses broken tool pairing "
        "and role order; its summarizer is poor (it keeps no fact: the proxy's own ledger of "
        "identifiers must) or good (it quotes every line with a specific). Directly, the "
        "window is unbounded. Tokens are counted "
        "with o200k_base; the cache share is cached tokens over prompt tokens as the mock "
        "reports them, after OpenAI's rule (1024-token minimum, 128-token steps).",
        "",
        *_table(header, rows, 1),
        *(["Client errors:", "", *samples, ""] if samples else []),
    ]


def _title(cell: CellResult) -> str:
    """The cell's workload as the tables name it, with the strategy its proxy ran and how
    the cell differs from the others of its workload (streamed, recall off, the client
    compacting)."""
    title = TITLES.get(cell.workload, cell.workload)
    title = f"{title}, `{cell.strategy}`" if cell.strategy else title
    title += (", streamed" if cell.stream else "") + ("" if cell.recall else ", recall off")
    title += ", thinking" if cell.thinking else ""
    return title + (", client compacting" if cell.client_compacts else "")


def _matrix_row(cell: CellResult) -> list[str]:
    kept, checked = cell.kept()
    landings = cell.landing_pressures
    highest = f" ({pressure(max(landings))})" if landings else ""
    misses = cell_misses(cell)
    return [
        f"{cell.window:,}", _title(cell),
        cell.summarizer, cell.api, str(cell.model_calls), f"{cell.history_windows:.1f}",
        str(cell.compactions), num(cell.requests_per_compaction),
        f"{cell.landings_above_target}{highest}",
        f"{cell.overflows} / {cell.overflows_after_calibration}",
        f"{kept}/{checked}", f"{cell.cache_share:.0%}", f"{cell.prefix_stable_share:.0%}",
        str(cell.summary_calls), str(cell.client_errors), str(cell.strict_rejections),
        f"{cell.wall_s:.1f}", "**" + ", ".join(misses) + "**" if misses else "none",
    ]  # fmt: skip


_COMPARED: tuple[tuple[str, Callable[[CellResult], str]], ...] = (
    ("calls", lambda c: str(c.model_calls)),
    ("requests / compaction", lambda c: num(c.requests_per_compaction)),
    ("highest landing", lambda c: pressure(max(c.landing_pressures)) if c.compactions else "-"),
    ("over window after calibration", lambda c: str(c.overflows_after_calibration)),
    ("kept", lambda c: "{}/{}".format(*c.kept())),
    ("cache", lambda c: f"{c.cache_share:.0%}"),
    ("prefix-stable", lambda c: f"{c.prefix_stable_share:.0%}"),
    ("summary calls", lambda c: str(c.summary_calls)),
    ("errors", lambda c: str(c.client_errors)),
    ("strict refusals", lambda c: str(c.strict_rejections)),
    ("targets missed", lambda c: ", ".join(cell_misses(c)) or "none"),
)


def _api_comparison(cells: list[CellResult]) -> list[str]:
    """Each cell's APIs side by side, `chat / responses`, where both ran."""
    apis = list(dict.fromkeys(cell.api for cell in cells))
    pairs: dict[tuple[int, str, str], dict[str, CellResult]] = {}
    for cell in cells:
        pairs.setdefault((cell.window, _title(cell), cell.summarizer), {})[cell.api] = cell
    rows = [
        [f"{window:,}", title, summarizer,
         *(" / ".join(value(by_api[api]) for api in apis) for _, value in _COMPARED)]
        for (window, title, summarizer), by_api in pairs.items()
        if len(by_api) == len(apis)
    ]  # fmt: skip
    if len(apis) < 2 or not rows:
        return []
    names = " / ".join(API_NAMES.get(api, api) for api in apis)
    header = ("window", "workload", "summarizer", *(name for name, _ in _COMPARED))
    return [f"The same cells side by side, {names}:", "", *_table(header, rows, 3)]


def _typed_rows(cells: list[CellResult]) -> list[list[str]]:
    rows = []
    for cell in cells:
        if cell.workload != "typed":
            continue
        counts = [cell.kept(kind) for kind in KINDS]
        kept, checked = cell.kept()
        row = [f"{cell.window:,}", cell.summarizer, cell.api, *(f"{k}/{n}" for k, n in counts)]
        rows.append([*row, f"{kept}/{checked}"])
    return rows


def _fraction(tally: Tally | None) -> str:
    return f"{tally.held}/{tally.judged}" if tally is not None else "-"


def _labelled_rows(cells: list[CellResult]) -> list[list[str]]:
    rows = []
    for cell in cells:
        if cell.workload != "labelled":
            continue
        counts = [cell.kept(kind) for kind in LABELLED_KINDS]
        kept, checked = cell.kept()
        row = [f"{cell.window:,}", cell.summarizer, cell.api, *(f"{k}/{n}" for k, n in counts)]
        stale = f"{len(cell.stale_found)}/{len(cell.stale)}"
        rows.append([*row, f"{kept}/{checked}", stale])
    return rows


def _after_first(cell: CellResult) -> str:
    """Each answered request after the first: its pressure and what the proxy applied."""
    after = zip(cell.applied[1:], cell.pressures[1:], strict=True)
    return ", ".join(f"{pressure(p)} ({applied})" for applied, p in after) or "-"


def _oversized_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"`{cell.strategy}`", cell.summarizer, cell.api, _fraction(cell.result_cut),
         "; ".join(cell.result_cut.details) if cell.result_cut else "-", _after_first(cell)]
        for cell in cells
        if cell.workload == "oversized-result"
    ]  # fmt: skip


def _fixed_heavy_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"{cell.window:,}", cell.summarizer, cell.api, str(cell.model_calls),
         str(cell.compactions), num(cell.requests_per_compaction),
         _fraction(cell.running_user), _fraction(cell.running_rounds),
         str(cell.extra_rounds), str(cell.abandoned_turns),
         f"{pressure(max(cell.landing_pressures)) if cell.compactions else '-'}"
         f" / {cell.target:.3f}"]
        for cell in cells
        if cell.workload == "fixed-heavy"
    ]  # fmt: skip


def _variant(cell: CellResult) -> str:
    variant = "recall off" if not cell.recall else ("streamed" if cell.stream else "whole")
    return variant + (", thinking" if cell.thinking else "")


def _answer(answer: Answer) -> str:
    if answer.right:
        return f"{answer.state}: right"
    said = "not had" if answer.text.startswith(NOT_HAD) else f'"{answer.text[:40]}"'
    return f"{answer.state}: **{said}**"


def _recall_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"{cell.window:,}", cell.summarizer, cell.api, _variant(cell), str(cell.model_calls),
         str(cell.compactions), *(_answer(answer) for answer in cell.answers),
         f"{cell.recall_calls} / {cell.recall_rounds}", str(cell.unknown_calls),
         _fraction(cell.stable), f"{cell.offered} / {len(cell.applied)}",
         f"{cell.cache_share:.0%}"]
        for cell in cells
        if cell.workload == "recall"
    ]  # fmt: skip


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _recall_cost_rows(cells: list[CellResult]) -> list[list[str]]:
    """Recall on (whole) beside recall off, per window, summarizer and API."""
    off = {
        (c.window, c.summarizer, c.api, c.thinking): c
        for c in cells
        if c.workload == "recall" and not c.recall
    }
    rows = []
    for cell in cells:
        baseline = off.get((cell.window, cell.summarizer, cell.api, cell.thinking))
        if cell.workload != "recall" or not cell.recall or cell.stream or baseline is None:
            continue
        on_mean, off_mean = _mean(cell.prompts_before), _mean(baseline.prompts_before)
        rows.append([
            f"{cell.window:,}", cell.summarizer, cell.api, str(cell.tool_tokens),
            f"{cell.offered} / {len(cell.applied)}",
            f"{len(cell.prompts_before)} / {len(baseline.prompts_before)}",
            f"{num(on_mean, 0)} / {num(off_mean, 0)}", f"{num(on_mean - off_mean, 0)}",
            f"{num((on_mean - off_mean) / off_mean * 100, 1)} %",
            f"{cell.cache_share:.0%} / {baseline.cache_share:.0%}",
            f"{cell.compactions} / {baseline.compactions}",
        ])  # fmt: skip
    return rows


def _recall_tables(cells: list[CellResult]) -> list[str]:
    """The tables of what issue 22 measures, where its cells ran."""
    rows, costs = _recall_rows(cells), _recall_cost_rows(cells)
    if not rows:
        return []
    keys = next((c.answers for c in cells if c.workload == "recall" and c.answers), [])
    header = (
        "window", "summarizer", "API", "cell", "calls", "compactions",
        *(f"`{answer.key}`: where, answer" for answer in keys),
        "recall calls / rounds", "context_recall seen by the client",
        "stable between compactions", "requests offering the tool", "cache",
    )  # fmt: skip
    lines = [
        "Recall of a compacted value: where each value's result stood in the request that "
        "asked for it, and the answer the client got; the model's `context_recall` calls and "
        "the rounds the proxy answered them in; client requests no compaction changed that "
        "extend the one before (tools and instructions included):",
        "",
        *_table(header, rows, 4),
    ]
    if costs:
        cost_header = (
            "window", "summarizer", "API", "tool schema tokens (ours)",
            "requests offering it", "requests before the question: on / off",
            "mean prompt tokens before the question: on / off", "difference", "difference %",
            "cache: on / off", "compactions: on / off",
        )  # fmt: skip
        lines += [
            "What offering `context_recall` costs: recall on against `context.recall: false`, "
            "the same workload, whole answers (prompt tokens as the provider counts them):",
            "",
            *_table(cost_header, costs, 3),
        ]
    return lines


def _issue_tables(cells: list[CellResult]) -> list[str]:
    """The tables of what issue 21 measures, where its cells ran."""
    labelled, oversized, heavy = (
        _labelled_rows(cells), _oversized_rows(cells), _fixed_heavy_rows(cells)
    )  # fmt: skip
    lines: list[str] = []
    if labelled:
        header = ("window", "summarizer", "API", *LABELLED_KINDS, "all", "replaced, in block")
        lines += [
            "Labelled statements kept, by type; replaced values still in the last request's "
            "compaction block:",
            "",
            *_table(header, labelled, 3),
        ]
    if oversized:
        header = (
            "strategy", "summarizer", "API", "forwarded cut", "each request after it",
            "each request after it: pressure (applied)",
        )  # fmt: skip
        lines += ["The oversized newest result (16k window):", "", *_table(header, oversized, 3)]
    if heavy:
        header = (
            "window", "summarizer", "API", "calls", "compactions", "requests / compaction",
            "user message in place", "rounds held", "extra rounds", "turns abandoned",
            "highest landing / its target",
        )  # fmt: skip
        lines += ["The fixed-heavy agent, request by request:", "", *_table(header, heavy, 3)]
    return lines


def _recall_details(cell: CellResult) -> list[str]:
    """What the recall workload's judge found wrong in `cell`, with what the rounds did."""
    parts = [
        f"`{answer.key}` ({answer.state}) not answered: {answer.recalls}"
        for answer in cell.answers
        if not answer.right
    ]
    if cell.stable is not None and cell.stable.held < cell.stable.judged:
        parts.append("unstable: " + " | ".join(cell.stable.details))
    if cell.unknown_calls:
        parts.append(f"{cell.unknown_calls} calls of a tool the client never offered")
    return parts


def _cell_details(cell: CellResult) -> str:
    strategies = ", ".join(f"`{k}` x{v}" for k, v in sorted(cell.strategies.items())) or "none"
    parts = [f"- {cell.name}: {cell.user_turns} user turns, {strategies}"]
    if cell.lost:
        parts.append("lost " + ", ".join(f"`{key}`" for key in cell.lost))
    for stale in cell.stale_found:
        parts.append(f'`{stale.key}` still in the block: "{stale.line}" under "{stale.heading}"')
    for tally in (cell.running_user, cell.running_rounds):
        if tally is not None and tally.held < tally.judged:
            parts.append(" | ".join(tally.details))
    if cell.extra_rounds or cell.abandoned_turns:
        parts.append(
            f"{cell.extra_rounds} tool rounds beyond the plan, {cell.abandoned_turns} turns "
            "abandoned at the cap"
        )
    parts += _recall_details(cell)
    if cell.strict_rejections:
        parts.append(f"{cell.strict_rejections} strict refusals")
    if cell.error_samples:
        parts.append("errors: " + " | ".join(cell.error_samples))
    return "; ".join(parts)


def _matrix_intro(cells: list[CellResult]) -> str:
    scaled = sorted({(c.window, c.bulk) for c in cells if c.bulk > 1})
    bulk = "".join(
        f" At {window:,} tokens the tool results and the model's replies are {factor:g}x "
        "larger, so that the cell compacts several times within the call cap."
        for window, factor in scaled
    )
    workloads = {cell.workload for cell in cells}
    replaced = (
        " Replaced values (labelled statements): judged in the last request's compaction "
        "block (the proxy's notes), not in the messages it forwarded as they came."
        if "labelled" in workloads
        else ""
    )
    return (
        "Each cell: a scripted session through a `compaction-proxy serve` on its default "
        "`context:` settings, in front of `proxy.mock_upstream` with the cell's window "
        "(detected at `/v1/models`), a tokenizer counting 10 % more than the proxy's, strict "
        "tool pairing and role alternation, and a useless (`poor`: keeps nothing) or `good` "
        "summarizer. Calls: the client's model calls (extra tool rounds the agent asks for "
        "after a compaction included). History: the client's whole history at the end, in "
        "windows. Compactions: answers whose `x-compaction-applied` is not `none`; above "
        "target: those whose `x-context-pressure` exceeds the target the proxy stated for "
        "them (`x-compaction-target`, by a unit of the last decimal at least), with the "
        "highest landing; that target is the default `compaction_target` t applied to the "
        "room the instructions and tools leave: f + t x (1 - f), f their share of the usable "
        "input (0.45 to 0.48 for most workloads, 0.84 for the fixed-heavy agent). Over "
        "window: requests the "
        "mock refused for its window, all / after the first answer (the first calibration). "
        "Kept: the user's statements (each topic's latest value) as exact substrings of the "
        "last forwarded request (its messages; for `responses` its instructions and input, "
        "summary requests apart). Cache: cached / prompt tokens; prefix-stable: "
        "forwarded requests extending the previous one. API: each cell runs the same "
        "workload over chat completions (`chat`) and over the Responses API (`responses`: "
        "stateless, `store` false, the model's reasoning items sent back with their "
        "`encrypted_content`, which the mock refuses altered or parted from the items they "
        "preceded); for `responses` the history is counted as the provider counts items "
        "(a reasoning item as a quarter of its ciphertext); and over Anthropic's Messages API "
        "(`messages`: the `anthropic` SDK as Claude Code sends it, a Claude model whose "
        "window the cell's proxy configures, a breakpoint on the last block; `, thinking` "
        "cells enable thinking and send the signed blocks back, which must reach the mock "
        "as it issued them). Strict refusals: requests the mock refused for broken tool "
        "pairing, role order, reasoning items or thinking signatures." + bulk + replaced
    )


def _matrix(run: Run) -> list[str]:
    if not run.cells:
        return []
    header = (
        "window", "workload", "summarizer", "API", "calls", "history (windows)", "compactions",
        "requests / compaction", "above target (highest)", "over window (after calibration)",
        "kept", "cache", "prefix-stable", "summary calls", "errors", "strict refusals",
        "wall s", "targets missed",
    )  # fmt: skip
    typed = _typed_rows(run.cells)
    typed_header = ("window", "summarizer", "API", *KINDS, "all")
    return [
        "## Effectiveness matrix",
        "",
        _matrix_intro(run.cells),
        "",
        *_table(header, [_matrix_row(cell) for cell in run.cells], 4),
        *_api_comparison(run.cells),
        *(
            ["Typed statements kept, by type:", "", *_table(typed_header, typed, 3)]
            if typed
            else []
        ),
        *_issue_tables(run.cells),
        *_recall_tables(run.cells),
        "Per cell: the strategies applied, what was lost, errors.",
        "",
        *(_cell_details(cell) for cell in run.cells),
        "",
    ]


def _dominant(profile: Profile) -> str:
    package, share = profile.packages[0] if profile.packages else ("-", 0.0)
    inner = [
        f"`{name.split(' (')[0]}` {share:.0%}"
        for name, share in profile.proxy_inclusive
        if not name.startswith("ProxyService.chat_completion")
    ][:4]
    return (
        f"Most samples end in `{package}` ({share:.0%}); the proxy's own functions with the "
        f"most samples under them: {', '.join(inner)}."
    )


def _profiles(run: Run) -> list[str]:
    lines = []
    for profile in run.profiles:
        lines += [
            f"### Profile of the proxy during `{profile.case}` ({profile.samples} samples, "
            f"raw stacks in `{profile.raw.name}`)",
            "",
            _dominant(profile),
            "",
            *_table(("where the time is spent (innermost frame)", "share"),
                    [(f"`{n}`", f"{s:.1%}") for n, s in profile.self_time], 1),
            *_table(("package of the innermost frame", "share"),
                    [(f"`{n}`", f"{s:.1%}") for n, s in profile.packages], 1),
            *_table(("proxy function, with what it calls", "share"),
                    [(f"`{n}`", f"{s:.1%}") for n, s in profile.proxy_inclusive], 1),
        ]  # fmt: skip
    intro = (
        "py-spy sampled the proxy while the case ran again. Innermost frames: where the time "
        "is spent itself (C calls count for the Python function that made them; `Runner.run` "
        "is uvloop's event loop in C: sockets, callbacks, waits). Idle thread-pool workers are "
        "left out."
    )
    return ["## Profiles of missed targets", "", intro, "", *lines] if lines else []


def render(run: Run) -> str:
    """The whole report."""
    head = [
        "# compaction-proxy benchmark report",
        "",
        *(f"- {key}: {value}" for key, value in {**run.machine, **run.settings}.items()),
        f"- LiteLLM: {run.litellm}",
        "",
    ]
    problems = ["## Problems", "", *(f"- {p}" for p in run.problems), ""] if run.problems else []
    charts = ["## Charts", "", *(f"![{caption}]({name})" for name, caption in run.charts), ""]
    body = [
        *head,
        *_targets(run),
        *problems,
        *_overhead(run),
        *_mock_check(run),
        *_growth(run),
        *_sessions(run),
        *_matrix(run),
        *_profiles(run),
        *(charts if run.charts else []),
    ]
    return "\n".join(body).rstrip() + "\n"
