"""Summaries written off the request path: prepared before the trigger, folded in after.

No client request waits for the summarizer; only an explicit `/compact` does. Once a
conversation's pressure passes its preparation level (`context.prepare_at`), a background
job writes the summary its next compaction will need and stores it under the keys of the
span it covers (`proxy.core.prepared`). The compaction at the trigger finds it there, on any
replica, and uses it for the part of its span it covers. When nothing is prepared (the
conversation jumped past the trigger, the summary is still being written) the compaction
truncates at once, with the ledger, and a job summarizes what it dropped: that summary is
folded into the next compaction as its previous summary.

Summaries are rolling and anchored: a job summarizes only what no summary covers yet and
folds in the summary before it (a prepared summary of the span's start, the previous
compaction's summary or the summary of what it dropped), never the originals again.

One job per conversation per replica at a time (a later one waits, the latest wins), at most
`summary_brain.max_concurrent` summaries at once per replica, and one summary per span
across replicas: a job takes the span's lock in the store, looks whether another replica
stored it meanwhile, and holds the lock until it has stored its own. With the store down
the results are kept in this process, found by the requests this replica serves, and
written to the store when it answers again.

The summarizer's circuit breaker lives here too: after `breaker_failures` failed summaries
in a row it is not asked for `breaker_cool_off_s`; compaction goes on without summaries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.adapters.summarizer import Summarizable, Summarizer, SummaryFailedError, SummaryResult
from proxy.core.breaker import Breaker
from proxy.core.mentions import Mentions
from proxy.core.messages import Message
from proxy.core.plan import (
    Compacted,
    NeedsSummary,
    Plan,
    Situation,
    SummaryTask,
    plan_compaction,
)
from proxy.core.prepared import covered, note_key, preparing
from proxy.core.session import Checkpoint
from proxy.core.tokens import TokenCounter
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from proxy.service.outcome import Outcome
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.compaction")

# Summaries kept in this process (by tenant and key), the least recently used dropped first:
# what serves this replica's requests while the store is down.
MAX_KEPT = 2_000
# Conversations with summaries prepared here since their last compaction (the wasted count).
MAX_AWAITING = 10_000
# Conversations whose last preparation check is remembered (a check runs a forced plan).
MAX_CHECKED = 10_000
# Jobs waiting for a slot, per slot: past that, new preparations are skipped (the next
# request of the conversation asks again) rather than queued without bound.
WAITING_PER_SLOT = 8
# A conversation is checked again once its prompt has grown by this share of its usable
# input since the last check: a check plans a whole compaction, and the span grows by little
# more than the prompt does.
RECHECK_SHARE = 0.05

_Conversation = tuple[str, str]
_Job = Callable[[], Coroutine[Any, Any, None]]


class Preparer:
    """Writes summaries ahead of the compactions that need them, and finds them again."""

    def __init__(
        self,
        *,
        memory: Memory,
        summarizer: Summarizer,
        metrics: Metrics,
        breaker: Breaker | None = None,
        max_concurrent: int = 4,
        lock_ttl_s: float = 270.0,
    ) -> None:
        self._memory = memory
        self._summarizer = summarizer
        self._metrics = metrics
        self._breaker = breaker or Breaker()
        self._clock: Callable[[], float] = time.monotonic
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_jobs = max_concurrent * WAITING_PER_SLOT
        self._lock_ttl_s = lock_ttl_s
        self._running: dict[_Conversation, asyncio.Task[None]] = {}
        self._next: dict[_Conversation, _Job] = {}
        self._kept: OrderedDict[tuple[str, str], SummaryResult] = OrderedDict()
        # By tenant, session and key: stored in the session when the store is back.
        self._unstored: OrderedDict[tuple[str, str, str], SummaryResult] = OrderedDict()
        self._awaiting: OrderedDict[_Conversation, int] = OrderedDict()
        self._checked: OrderedDict[_Conversation, tuple[str | None, int]] = OrderedDict()

    # --- finding -----------------------------------------------------------------------------

    async def find(
        self, tenant: str, session: str | None, keys: Sequence[str]
    ) -> dict[str, SummaryResult]:
        """The summaries stored under any of `keys`: this process's first, then the ones the
        store keeps for the session."""
        found = {key: kept for key in keys if (kept := self._kept.get((tenant, key)))}
        missing = [key for key in keys if key not in found]
        if missing:
            stored = await self._memory.find_summaries(tenant, session, missing)
            found |= {key: parsed for key, raw in stored.items() if (parsed := _parsed(raw))}
        return found

    async def find_prepared(
        self, turn: Turn, keys: Sequence[str]
    ) -> tuple[Checkpoint | None, dict[str, SummaryResult]]:
        """`find(keys)`, with the stored checkpoint of `turn`'s longest prefix read in the
        same call (one round trip, and no task: under load, every wait for one is a lap of
        the event loop behind every other request)."""
        found = {key: kept for key in keys if (kept := self._kept.get((turn.tenant, key)))}
        missing = [key for key in keys if key not in found]
        stored, raw = await self._memory.find_prepared(
            turn.tenant, turn.session, turn.hashes, missing
        )
        found |= {key: parsed for key, text in raw.items() if (parsed := _parsed(text))}
        return stored, found

    def settled(self, turn: Turn, *, used: bool) -> None:
        """`turn`'s conversation was compacted, with a summary written ahead (`used`) or
        without: the summaries this replica prepared for it since its last compaction were
        wasted if none was used."""
        if used:
            self._metrics.summary_used()
        if turn.session is None:
            return
        prepared = self._awaiting.pop((turn.tenant, turn.session), 0)
        if prepared and not used:
            self._metrics.summary_wasted(prepared)

    # --- starting jobs -----------------------------------------------------------------------

    def prepare(self, turn: Turn, outcome: Outcome) -> None:
        """Start writing the summary `turn`'s conversation (what `outcome` forwards) will
        need at its next compaction, if it is due and not being written already."""
        policy, budget = turn.policy, turn.budget
        messages, tokens = outcome.messages, outcome.tokens_after
        if turn.session is None or not preparing(budget.pressure(tokens), policy, turn.fixed):
            return
        conversation = (turn.tenant, turn.session)
        if conversation in self._running or not self._breaker.allows(self._clock()):
            return
        if self._memory.down:
            # Without the store no checkpoint is found, so every request past the trigger
            # compacts anew, and the summary of what each one drops (kept in this process)
            # serves the next: a summary per compaction at most, none ahead.
            return
        # Checked again after a compaction (a new checkpoint), else after enough growth.
        prefix = outcome.checkpoint.prefix_hash if outcome.checkpoint else None
        last = self._checked.get(conversation)
        grown = tokens - last[1] if last is not None and last[0] == prefix else None
        if grown is not None and 0 <= grown < budget.tokens_at(RECHECK_SHARE):
            return
        self._remember(self._checked, conversation, (prefix, tokens), MAX_CHECKED)
        notes = turn.notes(outcome.checkpoint)
        self._start(conversation, lambda: self._prepare(turn, messages, notes))

    def fold(self, turn: Turn, result: Compacted) -> None:
        """Start summarizing what `result` dropped with no summary covering it, to fold into
        the conversation's next compaction (after the job running for it, if any)."""
        dropped, note, session = result.dropped, result.note, turn.session
        if dropped is None or note is None or session is None:
            return
        if turn.policy.strategy not in ("auto", "summarize"):
            return
        key = note_key(note, session)
        conversation = (turn.tenant, session)
        outputs = {key: dropped.note, **({result.covers: _raw} if result.covers else {})}

        def job() -> Coroutine[Any, Any, None]:
            return self._write(turn, dropped, outputs, "fold", lock=result.covers or key)

        if conversation in self._running:
            self._next[conversation] = job  # the latest compaction's drop is the one to fold
        else:
            self._start(conversation, job)

    def _start(self, conversation: _Conversation, job: _Job) -> None:
        if len(self._running) >= self._max_jobs:
            logger.debug("summary jobs at their bound: not preparing %s", conversation)
            return
        task = asyncio.create_task(self._guarded(job))
        self._running[conversation] = task
        task.add_done_callback(lambda _: self._finished(conversation))

    def _finished(self, conversation: _Conversation) -> None:
        self._running.pop(conversation, None)
        waiting = self._next.pop(conversation, None)
        if waiting is not None:
            self._start(conversation, waiting)

    async def _guarded(self, job: _Job) -> None:
        # A job is nobody's request: what goes wrong is logged and counted, never lost. Its
        # coroutine is made here, inside the task: a task cancelled before it ran (the proxy
        # closing) would otherwise leave a coroutine never awaited, and Python warns of it.
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("a background summary failed")
            self._metrics.background_task_failed("summary")

    # --- the jobs ----------------------------------------------------------------------------

    async def _prepare(self, turn: Turn, messages: list[Message], notes: frozenset[str]) -> None:
        # The plan a compaction would make now, forced: its span is what the compaction at
        # the trigger will summarize, up to the messages added by then.
        situation = Situation(
            messages,
            turn.tools_body(),
            turn.policy,
            turn.budget,
            force=True,
            notes=notes,
            recall=turn.recall_scope,
            working=turn.working,
        )
        need = await turn.planned(lambda c, m: _planned(situation, c, m))
        if not isinstance(need, NeedsSummary):
            return
        keys = need.keys
        fold = note_key(need.anchor, turn.session) if need.anchor and turn.session else None
        found = await self.find(turn.tenant, turn.session, [*([fold] if fold else []), *keys])
        done = covered(keys, found)
        if fold in found:
            need = need.rolled(found[fold].text)
        task = need.task(done, found[keys[done - 1]].text if done else None)
        # Nothing new, or too little to be worth a summary: truncating it at the trigger
        # loses less than one summary's worth (the ledger keeps what the user said in it).
        if not task.span or (done and turn.counter.messages(task.span) < task.max_tokens):
            return
        await self._write(turn, task, {keys[-1]: _raw}, "prepare", lock=keys[-1])

    async def _write(
        self,
        turn: Turn,
        task: SummaryTask,
        outputs: Mapping[str, Callable[[str], str]],
        kind: str,
        *,
        lock: str,
    ) -> None:
        """Write `task`'s summary once across replicas and keep it under each of `outputs`'
        keys (as the function of that key makes it of the summary). `lock` names what it
        summarizes: a preparation and a fold of the same span take the same lock."""
        tenant, session = turn.tenant, turn.session or ""
        conversation = (tenant, session)
        async with self._slots:
            await self._flush()
            if not self._breaker.allows(self._clock()):
                self._metrics.summary_skipped()
                return
            name = f"summary:{lock}"
            token = await self._memory.acquire(tenant, name, self._lock_ttl_s)
            if token is None:
                return  # another replica writes it; the compaction finds it in the store
            try:
                found = await self.find(tenant, session, [*outputs, *task.keys])
                if all(key in found for key in outputs):
                    return  # written meanwhile
                # A summary of the span's start is there (prepared while the compaction
                # was truncating): only the rest is summarized, over it.
                done = covered(task.keys, found)
                rest = turn.counter.messages(task.span[done:])
                # The rest too small to be worth a summary (as when preparing): the prepared
                # summary stands for all of it (the ledger keeps what the user said there).
                if done == len(task.span) or (done and rest < task.max_tokens):
                    summary = found[task.keys[done - 1]]
                else:
                    if done:
                        task = task.after(done, found[task.keys[done - 1]].text)
                    try:
                        summary = await self.write(task, turn)
                    except SummaryFailedError as exc:
                        logger.warning("a summary failed; compactions truncate meanwhile: %s", exc)
                        return
                for key, shape in outputs.items():
                    shaped = replace(summary, text=shape(summary.text))
                    await self._keep(tenant, session, key, shaped)
                self._metrics.summary_prepared(kind)
                count = self._awaiting.get(conversation, 0) + 1
                self._remember(self._awaiting, conversation, count, MAX_AWAITING)
            finally:
                await self._memory.release(tenant, name, token)

    async def _keep(self, tenant: str, session: str, key: str, summary: SummaryResult) -> None:
        self._remember(self._kept, (tenant, key), summary, MAX_KEPT)
        if not await self._memory.put_summary(tenant, session, key, _stored(summary)):
            self._remember(self._unstored, (tenant, session, key), summary, MAX_KEPT)

    async def _flush(self) -> None:
        """Store what was written while the store was down, now that it may be back.

        Several jobs flush at once (one per slot): each takes its summary out of the table
        before storing it, so no two store the same one, and one the store refuses goes
        back at the front (unless a newer summary of its key came meanwhile)."""
        while self._unstored:
            name, summary = self._unstored.popitem(last=False)
            if not await self._memory.put_summary(*name, _stored(summary)):
                self._unstored.setdefault(name, summary)
                self._unstored.move_to_end(name, last=False)
                return

    def _remember(self, table: OrderedDict[Any, Any], key: Any, value: Any, bound: int) -> None:
        table.pop(key, None)
        table[key] = value
        while len(table) > bound:
            _, forgotten = table.popitem(last=False)
            if table is self._awaiting:
                # Never used while this replica remembered the conversation.
                self._metrics.summary_wasted(forgotten)

    # --- the summarizer and its breaker --------------------------------------------------------

    def allows(self) -> bool:
        """Whether the summarizer may be asked now (its breaker is not open)."""
        return self._breaker.allows(self._clock())

    async def write(self, need: Summarizable, turn: Turn) -> SummaryResult:
        """One summary of `need`, asked of the summary brain now. Raises SummaryFailedError."""
        # The request model's window, decided by the one rule; a brain with a model of its
        # own sizes its parts by its own window (`summary_brain.context_window`, else known).
        window = turn.budget.context_window
        started = time.perf_counter()
        failed = True
        try:
            summary = await self._summarizer.summarize(
                need,
                credentials=turn.credentials,
                count=turn.counter.message,
                window=window,
                api=turn.request.api,
                calibration=turn.budget.calibration,
            )
            failed = False
        except SummaryFailedError:
            self._failed()
            raise
        finally:
            # A cancelled summary (the client went away) counts as failed: it gave nothing.
            self._metrics.summary(time.perf_counter() - started, failed=failed)
        self._worked()
        self._metrics.summary_input(
            summary.form, summary.input_tokens, summary.cached_tokens, refused=summary.refused
        )
        return summary

    def _failed(self) -> None:
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

    def _worked(self) -> None:
        if self._breaker.open_until is not None:
            logger.warning("the summarizer answers again: summaries resume")
            self._metrics.summarizer_breaker(open_=False)
        self._breaker = self._breaker.succeeded()

    def state(self) -> str | None:
        """Why summaries are not asked now (None when they are)."""
        now = self._clock()
        if self._breaker.allows(now) or self._breaker.open_until is None:
            return None
        return (
            f"circuit open after {self._breaker.failures} failed summaries in a row; "
            f"compacting without summaries for {self._breaker.open_until - now:.0f} s more"
        )

    # --- lifetime ------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait for the jobs started so far (and those they start)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the jobs: a summary nobody waits for is not worth holding a shutdown."""
        self._next.clear()
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)


def _raw(summary: str) -> str:
    return summary


def _stored(summary: SummaryResult) -> str:
    """A summary as the store keeps it: its text, and who wrote it at what cost (the input
    too, and how much of it the provider's cache served, for the compaction's record)."""
    return json.dumps(
        {
            "text": summary.text,
            "model": summary.model,
            "tokens": summary.tokens,
            "input_tokens": summary.input_tokens,
            "cached_tokens": summary.cached_tokens,
        }
    )


def _parsed(raw: str) -> SummaryResult | None:
    """A stored summary, or None when it is not one (written by another version; one
    stored before its input was recorded reads as no input)."""
    try:
        value = json.loads(raw)
        return SummaryResult(
            str(value["text"]),
            value.get("model"),
            int(value.get("tokens", 0)),
            input_tokens=int(value.get("input_tokens", 0)),
            cached_tokens=int(value.get("cached_tokens", 0)),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _planned(situation: Situation, counter: TokenCounter, mentions: Mentions) -> Plan:
    """The plan of a preparation, with the facts of its span found (and remembered) along:
    the compaction at the trigger checks its summary against them, and finds them here
    instead of finding them itself, on the event loop."""
    plan = plan_compaction(situation, counter, mentions)
    if isinstance(plan, NeedsSummary):
        for message in plan.fact_sources():
            mentions.facts(message)
    return plan
