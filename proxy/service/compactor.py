"""Compacting a turn before it is forwarded: hooks, the plan, the summary, the checkpoint.

The core decides; this module performs. Hooks due at `turn_start` run in order (log lines,
messages to inject, compactions). A compaction runs the core's plan on the turn's view; a
summary is written by the summary brain under a lock, so that across all replicas only one
summary is made for one prefix: the lock is held until the checkpoint is stored, a request
that finds it held waits a bounded time for the holder's checkpoint (then truncates), and one
that gets it after another let it go uses that one's checkpoint. Every compaction is frozen
as a checkpoint, so the next requests forward the same prefix, byte for byte.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeGuard

from proxy.adapters.summarizer import Summarizer, SummaryFailedError, SummaryResult
from proxy.core import hooks
from proxy.core.breaker import Breaker
from proxy.core.messages import Message, tool_calls
from proxy.core.plan import Compacted, NeedsSummary, Situation, Unchanged, plan_compaction
from proxy.core.session import Checkpoint, CompactionRecord, new_checkpoint
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.compaction")

# Sessions whose hook cooldowns are remembered (per process).
MAX_HOOK_SESSIONS = 10_000
# How long a request waits for another replica's summary of the same prefix.
LOCK_WAIT_S = 10.0
_POLL_S = 0.1


@dataclass(slots=True)
class Outcome:
    """What a turn forwards, and what compaction did to get there."""

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    pressure: float
    strategy: str | None = None
    injected: list[Message] = field(default_factory=list)
    sent: int = 0
    """Our count of the request as the client sent it (before any checkpoint was applied)."""
    tried: bool = False
    """Whether the plan ran (not waiting under the trigger, off, or malformed)."""

    @property
    def forwarded(self) -> list[Message]:
        return [*self.messages, *self.injected]


class Compactor:
    """Runs a turn's hooks and compactions."""

    def __init__(
        self,
        *,
        memory: Memory,
        summarizer: Summarizer,
        rules: tuple[hooks.Hook, ...],
        summary_timeout_s: float,
        metrics: Metrics,
        breaker: Breaker | None = None,
    ) -> None:
        self._memory = memory
        self._summarizer = summarizer
        self._rules = rules
        self._metrics = metrics
        # One per process: a brain that keeps failing is skipped for a while (see breaker.py).
        self._breaker = breaker or Breaker()
        self._clock: Callable[[], float] = time.monotonic
        self._lock_ttl_s = summary_timeout_s * 2 + 30
        # When each hook last fired, per session; bounded, least recently used dropped first
        # (a forgotten session only loses its hooks' cooldowns).
        self._fired: OrderedDict[tuple[str, str | None], dict[int, float]] = OrderedDict()

    async def before_forward(self, turn: Turn) -> Outcome:
        """Run the hooks due at turn start and return what to forward."""
        outcome = unchanged(turn)
        for action in self._due(turn, outcome):
            await self._perform(action, turn, outcome)
        return outcome

    async def compact_now(self, turn: Turn, outcome: Outcome, strategy: str | None) -> None:
        """The operator's `/compact`: everything but the pinned messages and the recent
        window goes, however low the pressure (a forced plan takes all its layers allow)."""
        action = hooks.CompactContext(strategy=strategy, force=True)
        await self._compact(action, turn, outcome, trigger="manual")

    @property
    def has_turn_end_hooks(self) -> bool:
        return any(rule.on == "turn_end" for rule in self._rules)

    async def after_answer(self, turn: Turn, outcome: Outcome) -> None:
        """Run the hooks due at turn end; a compaction there prepares the next turn (its
        checkpoint is found by the next request, which extends this one)."""
        for action in self._due(turn, outcome, "turn_end"):
            if isinstance(action, hooks.Log):
                logger.info("hook: %s", action.message)
            elif isinstance(action, hooks.CompactContext):
                await self._compact(action, turn, outcome)

    def _due(
        self, turn: Turn, outcome: Outcome, event: hooks.Event = "turn_start"
    ) -> list[hooks.Action]:
        policy = turn.policy
        rules = hooks.with_default_hook(
            self._rules, auto_compact=policy.auto_compact, trigger=policy.compression_trigger
        )
        facts = hooks.TurnFacts(
            turn=turn.state.turns,
            tokens=outcome.tokens_before,
            messages=len(outcome.messages),
            pressure=outcome.pressure,
            tool_calls=sum(len(tool_calls(m)) for m in outcome.messages),
        )
        now = time.monotonic()
        fired = self._fired.pop((turn.tenant, turn.session), {})
        self._fired[(turn.tenant, turn.session)] = fired
        if len(self._fired) > MAX_HOOK_SESSIONS:
            self._fired.popitem(last=False)
        due = hooks.due_actions(rules, event, facts, now=now, last_fired=fired)
        for index, _ in due:
            fired[index] = now
        return [action for _, action in due]

    async def _perform(self, action: hooks.Action, turn: Turn, outcome: Outcome) -> None:
        if isinstance(action, hooks.Log):
            logger.info("hook: %s", action.message)
        elif isinstance(action, hooks.InjectMessage):
            outcome.injected.append({"role": action.role, "content": action.message})
        else:
            await self._compact(action, turn, outcome)

    async def _compact(
        self,
        action: hooks.CompactContext,
        turn: Turn,
        outcome: Outcome,
        *,
        trigger: str | None = None,
    ) -> None:
        changes = {
            "strategy": action.strategy,
            "keep_recent": action.keep_recent,
            "summary_max_tokens": action.summary_max_tokens,
        }
        policy = turn.policy.replace(**{k: v for k, v in changes.items() if v is not None})
        situation = Situation(
            outcome.messages,
            turn.request.body,
            policy,
            turn.budget,
            turns_since_compaction=turn.state.turns_since_compaction,
            force=action.force,
        )
        plan = plan_compaction(situation, turn.counter)
        # Whether compaction had its chance: after it, a request still over the provider's
        # window cannot be helped, and the proxy answers the overflow itself.
        outcome.tried = not isinstance(plan, Unchanged) or plan.reason == "nothing_to_remove"
        trigger = trigger or ("hook" if action.force else "pressure")
        if isinstance(plan, NeedsSummary):
            await self._summarize_once(plan, turn, outcome, trigger)
        elif isinstance(plan, Compacted):
            await self.freeze(turn, plan, trigger, outcome)

    async def _summarize_once(
        self, need: NeedsSummary, turn: Turn, outcome: Outcome, trigger: str
    ) -> None:
        """Summarize and store under this prefix's lock, across all replicas.

        The lock is held until the checkpoint is stored (or the attempt given up): a request
        that gets it after another one let it go finds that one's checkpoint and uses it
        instead of writing a second summary of the same prefix.
        """
        if not self._breaker.allows(self._clock()):
            self._metrics.summary_skipped()
            await self.freeze(turn, need.fallback(), trigger, outcome)
            return
        name = f"compact:{turn.hashes[-1]}"
        token = await self._memory.acquire(turn.tenant, name, self._lock_ttl_s)
        if token is None:
            # Another request (maybe on another replica) is summarizing this very prefix.
            waited = await self._wait_for_checkpoint(turn)
            if waited is not None:
                _adopt(turn, waited, outcome)
            else:
                await self.freeze(turn, need.fallback(), trigger, outcome)
            return
        try:
            stored = await self._memory.find_checkpoint(turn.tenant, turn.hashes)
            if _newer(stored, turn):
                _adopt(turn, stored, outcome)
                return
            try:
                summary = await self._summary(need, turn)
            except SummaryFailedError as exc:
                logger.warning("summary failed, truncating instead: %s", exc)
                self._summary_failed()
                await self.freeze(turn, need.fallback(), trigger, outcome)
                return
            self._summary_worked()
            await self.freeze(turn, need.complete(summary.text), trigger, outcome, summary)
        finally:
            await self._memory.release(turn.tenant, name, token)

    def _summary_failed(self) -> None:
        now = self._clock()
        opening = self._breaker.state(now) != "open"
        self._breaker = self._breaker.failed(now)
        if opening and self._breaker.state(now) == "open":
            # Logged once per opening, not on every skipped summary.
            logger.warning(
                "the summarizer failed %d times in a row: not asking it for %.0f s, "
                "compacting without summaries meanwhile",
                self._breaker.failures,
                self._breaker.cool_off_s,
            )
            self._metrics.summarizer_breaker(open_=True)

    def _summary_worked(self) -> None:
        if self._breaker.open_until is not None:
            logger.warning("the summarizer answers again: summaries resume")
            self._metrics.summarizer_breaker(open_=False)
        self._breaker = self._breaker.succeeded()

    def summarizer_state(self) -> str | None:
        """Why summaries are not asked now (None when they are)."""
        now = self._clock()
        if self._breaker.allows(now) or self._breaker.open_until is None:
            return None
        return (
            f"circuit open after {self._breaker.failures} failed summaries in a row; "
            f"compacting without summaries for {self._breaker.open_until - now:.0f} s more"
        )

    async def _summary(self, need: NeedsSummary, turn: Turn) -> SummaryResult:
        # The request model's window, decided by the one rule; a brain with a model of its
        # own sizes its parts by its own window (`summary_brain.context_window`, else known).
        window = turn.budget.context_window
        started = time.perf_counter()
        failed = True
        try:
            summary = await self._summarizer.summarize(
                need, credentials=turn.credentials, count=turn.counter.message, window=window
            )
            failed = False
        finally:
            # A cancelled summary (the client went away) counts as failed: it gave nothing.
            self._metrics.summary(time.perf_counter() - started, failed=failed)
        return summary

    async def _wait_for_checkpoint(self, turn: Turn) -> Checkpoint | None:
        deadline = time.monotonic() + LOCK_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
            found = await self._memory.find_checkpoint(turn.tenant, turn.hashes)
            if _newer(found, turn):
                return found
        return None

    async def freeze(
        self,
        turn: Turn,
        result: Compacted,
        trigger: str,
        outcome: Outcome,
        summary: SummaryResult | None = None,
    ) -> None:
        """Store `result` as the turn's checkpoint and make it what the turn forwards
        (nothing when it took no step: a summary no smaller than its span changed nothing)."""
        if not result.steps:
            return
        made = new_checkpoint(
            turn.head,
            turn.body,
            turn.hashes,
            result.messages,
            created_at=time.time(),
            strategy=result.strategy,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
        )
        record = CompactionRecord(
            time.time(),
            trigger,
            result.strategy,
            result.tokens_before,
            result.tokens_after,
            summarizer_model=summary.model if summary else None,
            summarizer_tokens=summary.tokens if summary else 0,
            steps=result.steps,
        )
        await self._memory.record_compaction(turn.tenant, turn.session, record)
        estimate = turn.budget.estimate
        self._metrics.compaction(
            result.strategy, trigger, estimate(result.tokens_before), estimate(result.tokens_after)
        )
        if made is None:
            outcome.messages = result.messages
        else:
            # Set-if-absent: when another request froze the same prefix first, its version
            # wins, so every request that extends this prefix forwards the same bytes.
            _adopt(turn, await self._memory.put_checkpoint(turn.tenant, made), outcome)
        outcome.tokens_after = turn.tokens(outcome.messages)
        outcome.strategy = result.strategy


def unchanged(turn: Turn) -> Outcome:
    """The turn's view as it stands, before any compaction of this turn."""
    messages = turn.view()
    tokens = turn.tokens(messages)
    return Outcome(messages, tokens, tokens, turn.budget.pressure(tokens))


def _newer(checkpoint: Checkpoint | None, turn: Turn) -> TypeGuard[Checkpoint]:
    """Whether `checkpoint` covers more of the conversation than the one the turn came with."""
    covered = turn.checkpoint.covered if turn.checkpoint else 0
    return checkpoint is not None and checkpoint.covered > covered


def _adopt(turn: Turn, checkpoint: Checkpoint, outcome: Outcome) -> None:
    turn.checkpoint = checkpoint
    outcome.messages = turn.view()
    outcome.tokens_after = turn.tokens(outcome.messages)
    outcome.strategy = checkpoint.strategy
