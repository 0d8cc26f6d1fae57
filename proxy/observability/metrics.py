"""The proxy's Prometheus metrics, behind typed methods.

The service reports facts ("a compaction ran", "the upstream took 1.2 s to answer") by
calling `Metrics`; only this module knows prometheus-client. Each app owns a `Metrics` and
its registry, so several apps in one process (tests, embedders) keep separate counts.

Labels take values from small, fixed sets (route names, status codes, strategies,
triggers, overflow kinds), never session ids or tenants: every label value is a time series
kept forever by the scraper, and one per session would grow without bound.

Every update is O(1) and none may fail a request: a method that raises is logged (once per
method) and otherwise ignored.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Concatenate, ParamSpec

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

logger = logging.getLogger("proxy.metrics")

PREFIX = "compaction_proxy_"

# An LLM answers in tens of milliseconds (a cached, short prompt) to minutes (a long one).
UPSTREAM_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# The proxy's own work is counted in milliseconds; seconds mean a summary or a slow store.
OVERHEAD_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)
# Pressure over 1 happens: a request that no compaction can fit is forwarded anyway.
PRESSURE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0, 1.25, 1.5)
SUMMARY_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

_P = ParamSpec("_P")


def _never_raises(
    method: Callable[Concatenate[Metrics, _P], None],
) -> Callable[Concatenate[Metrics, _P], None]:
    """`method`, with any exception it raises logged once and swallowed."""

    @functools.wraps(method)
    def guarded(self: Metrics, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            if method.__name__ not in self._failed:
                self._failed.add(method.__name__)
                logger.exception("metric update %s failed; the request goes on", method.__name__)

    return guarded


class Metrics:
    """The proxy's metrics, registered in `registry` (a new one when not given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self._failed: set[str] = set()
        self._requests = Counter(
            f"{PREFIX}requests",
            "HTTP requests answered, by route and status code.",
            ["route", "status"],
            registry=registry,
        )
        # Every request looks its child up: a dict is a few times faster than `labels()`,
        # and the (route, status) pairs are a small set.
        self._request_children: dict[tuple[str, int], Counter] = {}
        self._upstream = Histogram(
            f"{PREFIX}upstream_latency_seconds",
            "Seconds from sending a chat completion attempt upstream to its response headers.",
            buckets=UPSTREAM_BUCKETS,
            registry=registry,
        )
        self._overhead = Histogram(
            f"{PREFIX}overhead_seconds",
            "Seconds a chat completion spent in the proxy, not waiting on the upstream, "
            "up to its response headers (summaries included).",
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self._pressure = Histogram(
            f"{PREFIX}context_pressure",
            "Forwarded chat completions' prompts as a share of (window - output reserve).",
            buckets=PRESSURE_BUCKETS,
            registry=registry,
        )
        self._register_compaction(registry)
        self._register_failures(registry)
        self._background_failures = Counter(
            f"{PREFIX}background_task_failures",
            "Background tasks (turn records, archive, summaries written ahead) that raised, "
            "by task kind; each is logged with its traceback.",
            ["kind"],
            registry=registry,
        )
        self._streams = Gauge(
            f"{PREFIX}active_streams",
            "Streamed chat completions being relayed now.",
            registry=registry,
            # With several workers (`serve --workers`): the sum of the live ones'.
            multiprocess_mode="livesum",
        )

    def _register_compaction(self, registry: CollectorRegistry) -> None:
        self._compactions = Counter(
            f"{PREFIX}compactions",
            "Compactions stored, by strategy and trigger.",
            ["strategy", "trigger"],
            registry=registry,
        )
        self._tokens_before = Counter(
            f"{PREFIX}compaction_tokens_before",
            "Prompt tokens before each compaction (minus tokens_after: tokens saved).",
            ["strategy"],
            registry=registry,
        )
        self._tokens_after = Counter(
            f"{PREFIX}compaction_tokens_after",
            "Prompt tokens after each compaction.",
            ["strategy"],
            registry=registry,
        )
        self._summaries = Counter(
            f"{PREFIX}summarizer_calls", "Summaries asked of the summary brain.", registry=registry
        )
        self._summary_failures = Counter(
            f"{PREFIX}summarizer_failures",
            "Summaries that failed (the span was truncated instead).",
            registry=registry,
        )
        self._summaries_skipped = Counter(
            f"{PREFIX}summaries_skipped",
            "Summaries not asked because the summarizer's circuit breaker was open.",
            registry=registry,
        )
        self._summaries_prepared = Counter(
            f"{PREFIX}summaries_prepared",
            "Summaries written off the request path and stored, by why: ahead of a compaction "
            "(prepare) or of what a compaction dropped (fold).",
            ["kind"],
            registry=registry,
        )
        self._summaries_used = Counter(
            f"{PREFIX}summaries_used",
            "Compactions that used a summary written ahead (as the summary or folded in).",
            registry=registry,
        )
        self._summaries_wasted = Counter(
            f"{PREFIX}summaries_wasted",
            "Summaries this replica wrote for a conversation whose next compaction used none.",
            registry=registry,
        )
        self._breaker_open = Gauge(
            f"{PREFIX}summarizer_breaker_open",
            "1 while the summarizer's circuit breaker is open (it failed repeatedly), else 0.",
            registry=registry,
            multiprocess_mode="livemax",  # 1 while any worker's is open
        )
        self._summary_latency = Histogram(
            f"{PREFIX}summarizer_latency_seconds",
            "Seconds each summary took, all its parts together, failed ones included.",
            buckets=SUMMARY_BUCKETS,
            registry=registry,
        )
        self._summary_input = Counter(
            f"{PREFIX}summarizer_input_tokens",
            "Prompt tokens of the summaries written, as the summarizer reported them, by the "
            "form they were asked in (prefix: the conversation itself, then one instruction; "
            "transcript) and by whether its prompt cache served them (cached).",
            ["form", "cached"],
            registry=registry,
        )
        self._prefix_refusals = Counter(
            f"{PREFIX}summarizer_prefix_refusals",
            "Summaries whose prefix form the summarizer refused (a 4xx), asked again as a "
            "transcript.",
            registry=registry,
        )

    def _register_failures(self, registry: CollectorRegistry) -> None:
        self._overflows = Counter(
            f"{PREFIX}overflow_errors",
            "Context-length errors from the upstream, by the classifier's kind.",
            ["kind"],
            registry=registry,
        )
        self._retries = Counter(
            f"{PREFIX}retries",
            "Retries after an overflow, by whether the retry was answered without error.",
            ["outcome"],
            registry=registry,
        )
        self._recalls = Counter(
            f"{PREFIX}recalls",
            "context_recall calls the proxy answered, by outcome: found, unknown (no such id "
            "in the conversation), expired, unavailable (the store was down), invalid (no id).",
            ["outcome"],
            registry=registry,
        )
        self._store_errors = Counter(
            f"{PREFIX}store_errors",
            "Session store calls that failed or were skipped while its breaker was open "
            "(the request went on without the store).",
            registry=registry,
        )
        self._checkpoints_refused = Counter(
            f"{PREFIX}checkpoints_refused",
            "Stored checkpoints a request did not forward over, the view over them being over "
            "its trigger or its usable input (a store that came back with old state, another "
            "replica's messages): the request compacted from its own messages instead.",
            ["reason"],
            registry=registry,
        )
        self._store_writes_lost = Counter(
            f"{PREFIX}store_writes_lost",
            "Session store writes (session state, checkpoints, archive, summaries) that failed "
            "or were skipped: what an outage did not remember.",
            registry=registry,
        )
        self._store_breaker_open = Gauge(
            f"{PREFIX}store_breaker_open",
            "1 while the session store's circuit breaker is open (calls skipped until it "
            "answers a PING), else 0.",
            registry=registry,
            multiprocess_mode="livemax",
        )

    @_never_raises
    def request(self, route: str, status: int) -> None:
        """An HTTP request was answered with `status` (`route`: a fixed route name)."""
        child = self._request_children.get((route, status))
        if child is None:
            child = self._requests.labels(route, str(status))
            self._request_children[(route, status)] = child
        child.inc()

    @_never_raises
    def upstream_latency(self, seconds: float) -> None:
        """One chat completion attempt's wait for the upstream's response headers."""
        self._upstream.observe(seconds)

    @_never_raises
    def overhead(self, seconds: float) -> None:
        """A chat completion's time in the proxy, less its waits on the upstream."""
        self._overhead.observe(max(seconds, 0.0))

    @_never_raises
    def pressure(self, value: float) -> None:
        """The pressure of a forwarded chat completion."""
        self._pressure.observe(value)

    @_never_raises
    def compaction(self, strategy: str, trigger: str, before: int, after: int) -> None:
        """A compaction was stored: `before` and `after` are the prompt's tokens."""
        self._compactions.labels(strategy, trigger).inc()
        self._tokens_before.labels(strategy).inc(max(before, 0))
        self._tokens_after.labels(strategy).inc(max(after, 0))

    @_never_raises
    def summary_skipped(self) -> None:
        """A summary was not asked: the breaker is open."""
        self._summaries_skipped.inc()

    @_never_raises
    def summary_prepared(self, kind: str) -> None:
        """A summary was written off the request path (`prepare` or `fold`) and stored."""
        self._summaries_prepared.labels(kind).inc()

    @_never_raises
    def summary_used(self) -> None:
        """A compaction used a summary written ahead."""
        self._summaries_used.inc()

    @_never_raises
    def summary_wasted(self, count: int = 1) -> None:
        """Prepared summaries were not used by the compaction they were for."""
        self._summaries_wasted.inc(count)

    @_never_raises
    def summarizer_breaker(self, *, open_: bool) -> None:
        """The summarizer's breaker opened or closed."""
        self._breaker_open.set(1 if open_ else 0)

    @_never_raises
    def summary(self, seconds: float, *, failed: bool) -> None:
        """A summary was asked for and took `seconds`."""
        self._summaries.inc()
        self._summary_latency.observe(seconds)
        if failed:
            self._summary_failures.inc()

    @_never_raises
    def summary_input(self, form: str, tokens: int, cached: int, *, refused: bool) -> None:
        """A summary was written from `tokens` prompt tokens, `cached` of them served from the
        summarizer's prompt cache, asked in `form` ("prefix" or "transcript"); `refused`: the
        prefix form was refused first."""
        cached = min(max(cached, 0), max(tokens, 0))
        self._summary_input.labels(form, "true").inc(cached)
        self._summary_input.labels(form, "false").inc(max(tokens, 0) - cached)
        if refused:
            self._prefix_refusals.inc()

    @_never_raises
    def overflow(self, kind: str) -> None:
        """The upstream answered a context-length error of `kind`."""
        self._overflows.labels(kind).inc()

    @_never_raises
    def retry(self, *, succeeded: bool) -> None:
        """A request was retried after an overflow; `succeeded`: without a second error."""
        self._retries.labels("succeeded" if succeeded else "failed").inc()

    @_never_raises
    def recall(self, outcome: str) -> None:
        """The proxy answered one `context_recall` call (`outcome`: see the counter)."""
        self._recalls.labels(outcome).inc()

    @_never_raises
    def store_error(self) -> None:
        """A call to the session store failed, or was skipped, and was served around."""
        self._store_errors.inc()

    @_never_raises
    def checkpoint_refused(self, reason: str) -> None:
        """A stored checkpoint was not used: `over_trigger` (another request's, adopted only
        under the trigger) or `over_input` (the view over it could not be landed)."""
        self._checkpoints_refused.labels(reason).inc()

    @_never_raises
    def store_write_lost(self) -> None:
        """A write to the session store failed or was skipped."""
        self._store_writes_lost.inc()

    @_never_raises
    def store_breaker(self, *, open_: bool) -> None:
        """The session store's breaker opened or closed."""
        self._store_breaker_open.set(1 if open_ else 0)

    @_never_raises
    def background_task_failed(self, kind: str) -> None:
        """A background task raised (`kind`: "turn" or "summary", a fixed set)."""
        self._background_failures.labels(kind).inc()

    @_never_raises
    def stream_started(self) -> None:
        self._streams.inc()

    @_never_raises
    def stream_ended(self) -> None:
        self._streams.dec()

    def exposition(self) -> tuple[bytes, str]:
        """The registry in Prometheus' text format, and its content type: with several
        workers (`serve --workers`, which sets PROMETHEUS_MULTIPROC_DIR for them), every
        worker's metrics summed, whichever worker answers the scrape."""
        shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not shared:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=shared)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST

    @staticmethod
    def worker_ended() -> None:
        """This worker is gone: its live gauges no longer count (its counters still do)."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
