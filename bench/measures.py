"""What the cases measured: per target, accumulated over rounds; and the derived numbers."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.load import Block

DIRECT, PROXY, LITELLM = "direct", "proxy", "litellm"


def percentile(samples: list[float], q: float) -> float:
    """The `q` quantile (nearest rank) of `samples`; NaN when there are none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


@dataclass(slots=True)
class Measure:
    """One target in one case, over all its rounds."""

    target: str
    latencies_ms: list[float] = field(default_factory=list)
    ttfb_ms: list[float] = field(default_factory=list)
    stream_ms: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    requests: int = 0
    wall_s: float = 0.0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    peak_rss_mib: float | None = None
    compaction: Counter[str] = field(default_factory=Counter)
    tokens: list[tuple[int, int]] = field(default_factory=list)

    def add(self, block: Block, cpu_s: float, requests: int) -> None:
        self.latencies_ms += block.latencies_ms
        self.ttfb_ms += block.ttfb_ms
        self.stream_ms += block.stream_ms
        self.events += block.events
        self.requests += requests
        self.wall_s += block.wall_s
        self.errors += block.errors
        self.error_samples += block.error_samples[: 3 - len(self.error_samples)]
        self.cpu_s += cpu_s
        self.compaction.update(block.compaction)
        self.tokens += block.tokens

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s else float("nan")

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s / self.requests * 1000 if self.requests else float("nan")

    @property
    def ttfb_p50(self) -> float:
        return percentile(self.ttfb_ms, 0.5)

    @property
    def ttfb_p99(self) -> float:
        return percentile(self.ttfb_ms, 0.99)

    @property
    def stream_p50(self) -> float:
        return percentile(self.stream_ms, 0.5)

    @property
    def events_per_stream(self) -> float:
        return median([float(n) for n in self.events])


@dataclass(slots=True)
class CaseResult:
    """One overhead case: every target's measure, and what the case was."""

    key: str
    title: str
    concurrency: int
    stream: bool
    history_tokens: int
    measures: dict[str, Measure] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def is_concurrency(self) -> bool:
        """One of the non-streaming cases at a fixed concurrency (`c1`, `c32`, ...)."""
        return self.key[:1] == "c" and self.key[1:].isdigit()

    def added(self, target: str, q: float) -> float:
        """Latency `target` adds over direct at quantile `q` (difference of quantiles)."""
        return self._added(target, lambda m: percentile(m.latencies_ms, q))

    def added_ttfb(self, target: str, q: float = 0.5) -> float:
        return self._added(target, lambda m: percentile(m.ttfb_ms, q))

    def added_per_chunk(self, target: str) -> float:
        """Added time from the first body bytes to the last, per SSE event (median)."""
        direct, other = self.measures.get(DIRECT), self.measures.get(target)
        if direct is None or other is None or not other.events:
            return float("nan")
        return (other.stream_p50 - direct.stream_p50) / max(direct.events_per_stream, 1.0)

    def _added(self, target: str, quantile: Callable[[Measure], float]) -> float:
        direct, other = self.measures.get(DIRECT), self.measures.get(target)
        if direct is None or other is None:
            return float("nan")
        return quantile(other) - quantile(direct)


@dataclass(slots=True)
class SessionResult:
    """One scripted agent session, through the proxy or straight to the mock."""

    label: str
    via_proxy: bool
    stream: bool
    model_calls: int = 0
    client_errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    sent_tokens: list[int] = field(default_factory=list)
    """What the client sent, per request (its whole history)."""
    forwarded_tokens: list[int] = field(default_factory=list)
    """What the mock received per chat request (summaries apart)."""
    cached_tokens: list[int] = field(default_factory=list)
    summary_calls: int = 0
    summary_prompt_tokens: int = 0
    summary_completion_tokens: int = 0
    facts_planted: list[str] = field(default_factory=list)
    facts_kept: list[str] = field(default_factory=list)
    facts_lost: list[str] = field(default_factory=list)
    overflows: int = 0
    strict_rejections: int = 0
    prefix_stable_share: float = float("nan")
    compactions: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def forwarded_share(self) -> float:
        sent = sum(self.sent_tokens)
        return sum(self.forwarded_tokens) / sent if sent else float("nan")

    @property
    def forwarded_with_summaries_share(self) -> float:
        sent = sum(self.sent_tokens)
        extra = self.summary_prompt_tokens + self.summary_completion_tokens
        return (sum(self.forwarded_tokens) + extra) / sent if sent else float("nan")

    @property
    def cache_share(self) -> float:
        prompt = sum(self.forwarded_tokens)
        return sum(self.cached_tokens) / prompt if prompt else float("nan")

    @property
    def facts_share(self) -> float:
        planted = len(self.facts_planted)
        return len(self.facts_kept) / planted if planted else float("nan")


@dataclass(frozen=True, slots=True)
class Check:
    """One statement the user made, and whether the last forwarded request still has it."""

    kind: str
    key: str
    kept: bool


@dataclass(frozen=True, slots=True)
class Stale:
    """A value a later statement replaced, and the line of the last forwarded request's
    compaction block that still holds it (None: it is gone, as it must be)."""

    key: str
    line: str | None
    heading: str = ""
    """The heading of the block's part that holds it (a summary's section, the ledger)."""


@dataclass(frozen=True, slots=True)
class Tally:
    """How many of the forwarded requests judged hold a property, and what the first of
    those that do not (or, where every request is described, each one) showed."""

    held: int
    judged: int
    details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """A late question about a value one file read returned, and what the client got."""

    key: str
    value: str
    state: str
    """Where the value's result stood in the question's forwarded request (`bench.recall`):
    whole, cut, cleared (a placeholder), condensed (a note replaced its turn), dropped."""
    text: str
    """The final answer the client received ("" if the turn failed)."""
    recalls: str = ""
    """What the turn's recall rounds did (`bench.recall.recalls`)."""

    @property
    def right(self) -> bool:
        return self.value in self.text

    @property
    def compacted(self) -> bool:
        """Whether the value was out of the model's sight when it was asked for."""
        return self.state not in VISIBLE


VISIBLE = frozenset({"whole", "cut, value shown", "condensed, value in the block"})
"""The `Answer.state`s in which the question's request showed the value itself."""


@dataclass(slots=True)
class CellResult:
    """One cell of the effectiveness matrix: a workload through the proxy at one window
    with one summarizer. Per response: what the proxy's headers said."""

    window: int
    workload: str
    summarizer: str
    bulk: float
    target: float
    """The landing target judged: the default `compaction_target`."""
    api: str = "chat"
    """The API the client spoke: `chat` (completions), `responses` or `messages`."""
    model_calls: int = 0
    user_turns: int = 0
    client_errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    """`x-compaction-applied` of each answered request."""
    pressures: list[float] = field(default_factory=list)
    """`x-context-pressure` of each answered request, in the same order."""
    stated: list[float] = field(default_factory=list)
    """`x-compaction-target` of each answered request (the target the proxy applied), in
    the same order (nan where it said none)."""
    history_tokens: int = 0
    """The client's whole history at the end (our count)."""
    overflows: int = 0
    overflows_before_first_answer: int = 0
    strict_rejections: int = 0
    summary_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefix_stable_share: float = float("nan")
    checks: list[Check] = field(default_factory=list)
    wall_s: float = 0.0
    strategy: str | None = None
    """The `context.strategy` the proxy ran with (None: its default, nothing configured)."""
    stale: list[Stale] = field(default_factory=list)
    """The replaced values, judged in the last forwarded request's compaction block."""
    running_user: Tally | None = None
    """Forwarded requests with the running turn's user message in place (when judged)."""
    running_rounds: Tally | None = None
    """...and with every tool round the client sent after it."""
    result_cut: Tally | None = None
    """Requests after an oversized result that forward it cut, with its item note."""
    extra_rounds: int = 0
    """Tool rounds the agent asked for beyond a turn's plan: it ran again what a cut inside
    its turn hid from it."""
    abandoned_turns: int = 0
    """Turns the client gave up on when the agent's rounds reached twice the plan (plus 2)."""
    stream: bool = False
    """Whether the client streamed every answer."""
    recall: bool = True
    """The proxy's `context.recall` (False: the cell is a baseline with it off)."""
    answers: list[Answer] = field(default_factory=list)
    """The late questions' answers (the recall workload)."""
    unknown_calls: int = 0
    """Tool calls the client received for a tool it never offered (the proxy's own
    `context_recall`, leaked): a client's loop fails on them."""
    recall_calls: int = 0
    """The `context_recall` calls the mock's model made."""
    recall_rounds: int = 0
    """Forwarded requests that carried the proxy's answers to them."""
    offered: int = 0
    """Forwarded requests (recall rounds apart) that offered `context_recall`."""
    stable: Tally | None = None
    """Forwarded requests (recall rounds apart) no compaction changed: extending the one
    before, tools and instructions included."""
    prompts_before: list[int] = field(default_factory=list)
    """The provider's prompt tokens of each request before the first question."""
    tool_tokens: int = 0
    """What offering `context_recall` adds to a request: its schema, our count."""
    client_compacts: bool = False
    """Whether the client compacted its own history through `/v1/responses/compact` (as
    Codex does), besides the proxy's compactions."""
    client_compactions: int = 0
    """How many times it did."""
    thinking: bool = False
    """Whether the client enabled thinking (Messages API): every answer opens with a signed
    `thinking` block the client sends back."""
    signatures: Tally | None = None
    """Forwarded assistant turns that came back with the thinking the provider issued for
    them, byte for byte (`bench.thinking`; when thinking is on)."""
    # Issue 38's client shapes (`bench.shapes`): each judged where the workload has it.
    floors: list[float] = field(default_factory=list)
    """What had to stay of each answered request (instructions, working set, ask, and the
    running turn's rounds at their least: `MatrixClient.running_floor`) as a share of the
    usable input, in the same order as `pressures` (nan where nothing is judged)."""
    cut_floors: list[float] = field(default_factory=list)
    """`floors` with the running turn's older results cut to their least, in the same order
    (`MatrixClient.cut_floor`)."""
    unit_share: float = float("nan")
    """The largest unit of the history a compaction could remove, as a share of the usable
    input: how far a landing may be from where it should land."""
    running_verbatim: Tally | None = None
    """Forwarded requests with the running turn's user message whole in a user message."""
    working_whole: Tally | None = None
    """Forwarded requests that could hold the running turn's working set and carry it whole."""
    working_forms: Tally | None = None
    """Consecutive requests whose working set is in the same form (no flip)."""
    ledger_order: Tally | None = None
    """Requests whose ledger lists the planted statements in the order first said."""
    paste_free: Tally | None = None
    """Requests whose compaction block's ledger holds no line of a paste."""
    newest_whole: Tally | None = None
    """Requests ending with a tool result that forward it whole, or are above the target."""
    calls_named: Tally | None = None
    """Requests whose block names every round of the running turn they no longer carry."""
    earlier_said: Tally | None = None
    """Requests carrying every sentence the user said before the running turn."""
    planned_calls: int = 0
    """The model calls of the turns the client ran, as a window where nothing compacts
    makes them (the script is deterministic: each turn's rounds, then its answer)."""
    unfinished: int = 0
    """User turns that never reached their answer (failed, or given up at the cap)."""
    summary_prompt_tokens: int = 0
    summary_cached_tokens: int = 0
    """The summaries' input, and what of it the provider's cache served."""

    @property
    def name(self) -> str:
        workload = f"{self.workload} {self.strategy}" if self.strategy else self.workload
        variant = (" streamed" if self.stream else "") + ("" if self.recall else " recall off")
        variant += " client-compacting" if self.client_compacts else ""
        variant += " thinking" if self.thinking else ""
        return f"{self.window // 1024}k {workload}{variant} {self.summarizer} ({self.api})"

    @property
    def compactions(self) -> int:
        return sum(applied != "none" for applied in self.applied)

    @property
    def strategies(self) -> Counter[str]:
        return Counter(applied for applied in self.applied if applied != "none")

    @property
    def requests_per_compaction(self) -> float:
        compactions = self.compactions
        return self.model_calls / compactions if compactions else float("nan")

    @property
    def proxy_compactions(self) -> int:
        """The compactions the proxy chose to make (by pressure): not the ones a client
        that compacts its own history asked for (`client-<strategy>`), whose times are the
        client's choice."""
        return sum(a != "none" and not a.startswith("client-") for a in self.applied)

    @property
    def landing_pressures(self) -> list[float]:
        """The pressure each compaction landed at."""
        return [p for a, p in zip(self.applied, self.pressures, strict=True) if a != "none"]

    @property
    def landings_above_target(self) -> int:
        landings = [i for i, applied in enumerate(self.applied) if applied != "none"]
        return sum(self.above_target(i) for i in landings)

    def target_of(self, index: int) -> float:
        """The target of answered request `index`: the one the proxy stated it applied, or
        the cell's (the default applied to the room the head leaves, with the provider's
        count) where it stated none."""
        stated = self.stated[index] if index < len(self.stated) else float("nan")
        return stated if math.isfinite(stated) else self.target

    def above_target(self, index: int) -> bool:
        """Whether answered request `index` landed above its target, or above what had to
        stay of it where that is higher (`floors`). The headers say the pressure and the
        target to 4 decimals: a landing on the target itself can read up to a unit of the
        last one above it."""
        floor = self.floors[index] if index < len(self.floors) else math.nan
        aim = max(self.target_of(index), floor if math.isfinite(floor) else 0.0)
        return self.pressures[index] > aim + 1e-4

    @property
    def summary_cache_share(self) -> float:
        prompt = self.summary_prompt_tokens
        return self.summary_cached_tokens / prompt if prompt else float("nan")

    @property
    def overflows_after_calibration(self) -> int:
        """Requests over the window once the proxy had seen a provider's `usage`."""
        return self.overflows - self.overflows_before_first_answer

    @property
    def cache_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else float("nan")

    @property
    def history_windows(self) -> float:
        return self.history_tokens / self.window

    def kept(self, kind: str | None = None) -> tuple[int, int]:
        """(kept, checked) statements, of one kind or all."""
        checks = [c for c in self.checks if kind is None or c.kind == kind]
        return sum(c.kept for c in checks), len(checks)

    @property
    def lost(self) -> list[str]:
        return [c.key for c in self.checks if not c.kept]

    @property
    def stale_found(self) -> list[Stale]:
        """The replaced values still in the compaction block."""
        return [stale for stale in self.stale if stale.line is not None]
