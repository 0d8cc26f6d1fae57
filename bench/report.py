"""The Markdown report (`bench/results/report.md`) of one run of the suite."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.cases.mock_check import MockCheck
from bench.growth import GrowthResult
from bench.growth import report as growth_report
from bench.markdown import num
from bench.markdown import table as _table
from bench.measures import (
    DIRECT,
    LITELLM,
    PROXY,
    CaseResult,
    CellResult,
    Measure,
    SessionResult,
    median,
)
from bench.profiling import Profile
from bench.report_matrix import matrix_section
from bench.targets import Verdict

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
        *matrix_section(run.cells),
        *_profiles(run),
        *(charts if run.charts else []),
    ]
    return "\n".join(body).rstrip() + "\n"
