"""The targets the report judges, each met or missed with the numbers that decide it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from bench.measures import LITELLM, PROXY, CaseResult, SessionResult

Status = Literal["met", "missed", "not measured"]


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
