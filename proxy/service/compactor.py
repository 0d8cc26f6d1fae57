"""Compacting a turn before it is forwarded: hooks, the plan, the summary, the checkpoint.

The core decides; this module performs. Hooks due at `turn_start` run in order (log lines,
messages to inject, compactions). A compaction runs the core's plan on the turn's view. A
request never waits for a summary: the compaction uses the summary prepared for its span
(`proxy.service.preparer`) or truncates at once, and the preparer summarizes what it dropped
for the next one. Once the turn's view is past its preparation level, the summary its next
compaction needs is started in the background.

Only an explicit `/compact` waits for a summary, written under a lock so that across all
replicas one summary is made for one prefix: the lock is held until the checkpoint is stored,
a request that finds it held waits a bounded time for the holder's checkpoint (then
truncates), and one that gets it after another let it go uses that one's checkpoint.

Every compaction is frozen as a checkpoint, so the next requests forward the same prefix,
byte for byte.

A checkpoint the store returns is trusted for the prefix it names, never for its size. One
found after the turn was read (another request's, or the one stored first in place of this
one's) is adopted only when the view over it is one this turn would not compact (`_adopted`):
a snapshot Redis restarted from, or a replica promoted when its master died, brings back a
checkpoint of an old prefix, with all the history since after it. And what a compaction
leaves standing on a checkpoint must fit the usable input, or the request is compacted from
its own messages alone (`_landed`): whatever the store said, the plan's landing holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from proxy.adapters.store import RecallIds
from proxy.adapters.summarizer import SummaryFailedError, SummaryResult
from proxy.core import hooks
from proxy.core.compaction_items import block_message, block_role
from proxy.core.messages import Message, role, text, tool_calls
from proxy.core.plan import Compacted, NeedsSummary, Situation, Unchanged, plan_compaction
from proxy.core.policy import Strategy
from proxy.core.prepared import covered, note_key, preparing
from proxy.core.room import in_room
from proxy.core.session import Checkpoint, CompactionRecord, new_checkpoint
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from proxy.service.outcome import Outcome, Uncounted, unchanged
from proxy.service.preparer import Preparer
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.compaction")

# Sessions whose hook cooldowns are remembered (per process).
MAX_HOOK_SESSIONS = 10_000
# How long a request waits for another replica's summary of the same prefix.
LOCK_WAIT_S = 10.0
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class Condensed:
    """A conversation condensed at the client's request (`Compactor.condense`)."""

    outcome: Outcome
    """The view frozen for it: the client's user messages, then the block."""
    block: str | None
    """The compaction block (None: there was nothing but the user's messages to condense)."""
    summary: SummaryResult | None = None
    """The summary written for it now (None: a prepared one, or none)."""
    task: Message | None = None
    """The user message the plan kept in place as the task (the view's first), if it did:
    the client keeps it too (the block does not carry it)."""


@dataclass(frozen=True, slots=True)
class Frozen:
    """A compaction frozen as a checkpoint: what the turn forwards now, and whether this
    request's checkpoint is the one stored (False when another request's won)."""

    outcome: Outcome
    stored: bool


class Compactor:
    """Runs a turn's hooks and compactions."""

    def __init__(
        self,
        *,
        memory: Memory,
        preparer: Preparer,
        rules: tuple[hooks.Hook, ...],
        summary_timeout_s: float,
        metrics: Metrics,
    ) -> None:
        self._memory = memory
        self.preparer = preparer
        self._rules = rules
        self._metrics = metrics
        self._lock_ttl_s = summary_timeout_s * 2 + 30
        # When each hook last fired, per session; bounded, least recently used dropped first
        # (a forgotten session only loses its hooks' cooldowns).
        self._fired: OrderedDict[tuple[str, str | None], dict[int, float]] = OrderedDict()

    async def before_forward(self, turn: Turn) -> Outcome:
        """Run the hooks due at turn start and return what to forward."""
        outcome = unchanged(turn)
        for action in self._due(turn, outcome):
            outcome = await self._perform(action, turn, outcome)
        self.preparer.prepare(turn, outcome)
        return outcome

    def uncounted(self, turn: Turn) -> Uncounted | None:
        """The turn's view to forward before counting it, when no count could make
        `before_forward` do anything: no hook of the operator's runs at turn start, the
        client asks for no compaction of its own, and a bound of the view's tokens made
        without encoding (`Turn.tokens_at_most`) is below both the trigger and the
        preparation level. None when the turn must be counted first.

        Most turns of an agent on a large window are far below both: their new tool result
        (0.15 ms of encoding for 800 tokens, 0.6 ms for 3,200) is then counted while the
        provider works, not before the request goes out."""
        if turn.request.automatic is not None:
            return None
        if any(rule.on == "turn_start" for rule in self._rules):
            return None
        messages = turn.view(turn.checkpoint)
        bound = turn.tokens_at_most(messages)
        if bound is None:
            return None
        policy = turn.policy
        if policy.auto_compact:
            pressure, fixed = turn.budget.pressure(bound), turn.fixed
            if pressure >= in_room(policy.compression_trigger, fixed):
                return None  # the default hook may fire: counted first
            if preparing(pressure, policy, fixed):
                return None  # a summary may be due for preparation: counted first
        return Uncounted(messages, lambda: unchanged(turn))

    async def compact_now(self, turn: Turn, strategy: Strategy | None) -> Outcome:
        """The operator's `/compact`: everything but the pinned messages and the recent
        window goes, however low the pressure (a forced plan takes all its layers allow)."""
        action = hooks.CompactContext(strategy=strategy, force=True)
        return await self._compact(action, turn, unchanged(turn), trigger="manual")

    async def condense(
        self,
        turn: Turn,
        kept: Callable[[str, Message | None], list[Message]],
        aside: Message | None = None,
    ) -> Condensed:
        """The client's own compaction (`/v1/responses/compact`, `compaction_trigger`): all
        of the conversation after the instructions condensed into one block by the plan
        (`Situation.whole`), with the summary prepared for it or a fresh one (waited for:
        the client asked for this compaction), frozen as the view the client's compacted
        history stands for: `kept(block, task)` (the user messages the client keeps, chosen
        once the block's size is known, the first among them when the plan kept it in place
        as the task), then the block.

        `aside`, the latest user message, is kept whatever the block's size: the block's
        ledger does not repeat what stands beside it verbatim, and the block gives way to it
        as to a running turn (`Situation.beside`).

        A conversation already condensed as it stands (its checkpoint covers all of it and
        ends with a block) gives that block again. Raises InvalidRequestError for a
        conversation whose tool calls and outputs do not pair up.
        """
        outcome = unchanged(turn)
        notes = turn.notes(outcome.checkpoint)
        again = _condensed_block(turn, notes)
        if again is not None:
            return Condensed(outcome, again)
        situation = Situation(
            outcome.messages,
            turn.tools_body(),
            turn.policy,
            turn.budget,
            force=True,
            notes=notes,
            recall=turn.recall_scope,
            whole=True,
            beside=aside,
            resent=turn.resent,
        )
        plan = await turn.planned(lambda c, m: plan_compaction(situation, c, m))
        summary, used = None, False
        if isinstance(plan, NeedsSummary):
            plan, summary, used = await self._summarized(plan, turn)
        if isinstance(plan, Unchanged):
            if plan.reason == "malformed":
                raise InvalidRequestError(
                    "The input cannot be compacted: its tool calls and their outputs do not "
                    "pair up (a call without its output, or an output without its call).",
                    param="input",
                )
            # Nothing to condense but earlier blocks: the newest stands for them.
            return Condensed(outcome, _last_note(outcome.messages, notes))
        block = plan.block
        assert block is not None  # a whole compaction that changed anything wrote its block
        # The task the plan pinned stays (the plan landed with it): the client keeps it.
        task = next((m for m in plan.messages if role(m) == "user" and block not in text(m)), None)
        users = kept(block, task)
        messages = [*turn.head, *users, block_message(block, block_role(users))]
        result = replace(
            plan,
            messages=messages,
            tokens_after=turn.tokens(messages),
            notes=frozenset({note_digest(block)}),
        )
        frozen = await self.freeze(turn, result, "client", outcome, summary)
        if frozen.stored:
            # As any compaction: what it truncated is summarized for the next one.
            self.preparer.settled(turn, used=used)
            self.preparer.fold(turn, result)
        return Condensed(frozen.outcome, block, summary, task)

    async def _summarized(
        self, need: NeedsSummary, turn: Turn
    ) -> tuple[Compacted, SummaryResult | None, bool]:
        """`need` completed with the summary prepared for its whole span, else with one
        written now (over the part a prepared one covers), else truncated; the summary
        written now, and whether a prepared one was used."""
        keys = need.keys
        fold = note_key(need.anchor, turn.session) if need.anchor and turn.session else None
        wanted = [*([fold] if fold else []), *keys]
        found = await self.preparer.find(turn.tenant, turn.session, wanted)
        if fold in found:
            need = need.rolled(found[fold].text)
        done = covered(keys, found)
        if done == len(keys):
            return need.complete(found[keys[-1]].text), None, True
        if not self.preparer.allows():
            self._metrics.summary_skipped()
            return need.fallback(), None, False
        task = need.task(done, found[keys[done - 1]].text) if done else need
        try:
            summary = await self.preparer.write(task, turn)
        except SummaryFailedError as exc:
            logger.warning("summary failed, truncating instead: %s", exc)
            return need.fallback(), None, False
        return need.complete(summary.text), summary, bool(done)

    @property
    def has_turn_end_hooks(self) -> bool:
        return any(rule.on == "turn_end" for rule in self._rules)

    async def after_answer(self, turn: Turn, outcome: Outcome) -> None:
        """Run the hooks due at turn end; a compaction there prepares the next turn (its
        checkpoint is found by the next request, which extends this one)."""
        for action in self._due(turn, outcome, "turn_end"):
            if isinstance(action, hooks.CompactContext):
                outcome = await self._compact(action, turn, outcome)
            else:
                # A log line. (The settings refuse a message to inject after the answer:
                # nobody would read it; one given in code is logged like a log line.)
                logger.info("hook: %s", action.message)

    def _due(
        self, turn: Turn, outcome: Outcome, event: hooks.Event = "turn_start"
    ) -> list[hooks.Action]:
        policy = turn.policy
        # The default hook fires where the plan starts compacting: at the trigger's share of
        # the room the instructions and tools leave.
        trigger = in_room(policy.compression_trigger, turn.fixed)
        rules = hooks.with_default_hook(
            self._rules, auto_compact=policy.auto_compact, trigger=trigger
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

    async def _perform(self, action: hooks.Action, turn: Turn, outcome: Outcome) -> Outcome:
        if isinstance(action, hooks.Log):
            logger.info("hook: %s", action.message)
            return outcome
        if isinstance(action, hooks.InjectMessage):
            message = {"role": action.role, "content": action.message}
            return replace(outcome, injected=(*outcome.injected, message))
        return await self._compact(action, turn, outcome)

    async def _compact(
        self,
        action: hooks.CompactContext,
        turn: Turn,
        outcome: Outcome,
        *,
        trigger: str | None = None,
    ) -> Outcome:
        trigger = trigger or ("hook" if action.force else "pressure")
        compacted = await self._compaction(action, turn, outcome, trigger)
        return await self._landed(turn, compacted, trigger)

    async def _compaction(
        self, action: hooks.CompactContext, turn: Turn, outcome: Outcome, trigger: str
    ) -> Outcome:
        changes = {
            "strategy": action.strategy,
            "keep_recent": action.keep_recent,
            "summary_max_tokens": action.summary_max_tokens,
        }
        policy = turn.policy.replace(**{k: v for k, v in changes.items() if v is not None})
        situation = Situation(
            outcome.messages,
            turn.tools_body(),
            policy,
            turn.budget,
            turns_since_compaction=turn.state.turns_since_compaction,
            force=action.force,
            notes=turn.notes(outcome.checkpoint),
            recall=turn.recall_scope,
            working=turn.working,
        )
        plan = await turn.planned(lambda c, m: plan_compaction(situation, c, m))
        # Whether compaction had its chance: after it, a request still over the provider's
        # window cannot be helped, and the proxy answers the overflow itself.
        tried = not isinstance(plan, Unchanged) or plan.reason == "nothing_to_remove"
        outcome = replace(outcome, tried=tried)
        if isinstance(plan, NeedsSummary) and trigger == "manual":
            return await self._summarize_once(plan, turn, outcome, trigger)
        if isinstance(plan, NeedsSummary):
            return await self._with_prepared(plan, turn, outcome, trigger)
        if isinstance(plan, Compacted):
            return (await self.freeze(turn, plan, trigger, outcome)).outcome
        if plan.reason == "cooldown":
            # Over the trigger, yet just compacted: by a request that stored its checkpoint
            # after this one looked for it (the two were read at once). Forward that one.
            stored = await self._memory.find_checkpoint(turn.tenant, turn.session, turn.hashes)
            if outcome.newer(stored):
                return self._adopted(turn, outcome, stored) or outcome
        return outcome

    async def _with_prepared(
        self, need: NeedsSummary, turn: Turn, outcome: Outcome, trigger: str
    ) -> Outcome:
        """Compact with the summary prepared for the span (the part of it that one covers),
        else truncate at once; what no summary covered is summarized for the next time."""
        keys = need.keys
        fold = note_key(need.anchor, turn.session) if need.anchor and turn.session else None
        stored, found = await self.preparer.find_prepared(turn, [*([fold] if fold else []), *keys])
        if outcome.newer(stored) and (adopted := self._adopted(turn, outcome, stored)):
            # Another request compacted this conversation since this one was read: forward
            # that (one compaction, and one prefix for the provider's cache).
            return adopted
        done = covered(keys, found)
        # What was prepared for this compaction: the summary of what the previous one
        # dropped, a summary of the span's start.
        used = [found[key] for key in (fold, keys[done - 1] if done else None) if key in found]
        if fold in found:
            need = need.rolled(found[fold].text)
        if done:
            result = need.complete(found[keys[done - 1]].text, covered=done)
        else:
            result = need.fallback()
        # The record names who wrote the summaries it used and what they cost, off the path.
        prepared = (
            SummaryResult(
                used[-1].text,
                used[-1].model,
                sum(u.tokens for u in used),
                input_tokens=sum(u.input_tokens for u in used),
                cached_tokens=sum(u.cached_tokens for u in used),
            )
            if used
            else None
        )
        frozen = await self.freeze(turn, result, trigger, outcome, prepared)
        if frozen.stored:
            # Only the request whose compaction was stored: the others forward that one.
            self.preparer.settled(turn, used=bool(used))
            self.preparer.fold(turn, result)
        return frozen.outcome

    async def _summarize_once(
        self, need: NeedsSummary, turn: Turn, outcome: Outcome, trigger: str
    ) -> Outcome:
        """Summarize and store under this prefix's lock, across all replicas.

        The lock is held until the checkpoint is stored (or the attempt given up): a request
        that gets it after another one let it go finds that one's checkpoint and uses it
        instead of writing a second summary of the same prefix.
        """
        if not self.preparer.allows():
            self._metrics.summary_skipped()
            return (await self.freeze(turn, need.fallback(), trigger, outcome)).outcome
        name = f"compact:{turn.hashes[-1]}"
        token = await self._memory.acquire(turn.tenant, name, self._lock_ttl_s)
        if token is None:
            # Another request (maybe on another replica) is summarizing this very prefix.
            waited = await self._wait_for_checkpoint(turn, outcome)
            if waited is not None:
                return waited
            return (await self.freeze(turn, need.fallback(), trigger, outcome)).outcome
        try:
            stored = await self._memory.find_checkpoint(turn.tenant, turn.session, turn.hashes)
            if outcome.newer(stored) and (adopted := self._adopted(turn, outcome, stored)):
                return adopted
            started = time.perf_counter()
            summary: SummaryResult | None
            try:
                summary = await self.preparer.write(need, turn)
            except SummaryFailedError as exc:
                logger.warning("summary failed, truncating instead: %s", exc)
                summary = None
            outcome = replace(outcome, summary_wait_s=time.perf_counter() - started)
            result = need.fallback() if summary is None else need.complete(summary.text)
            return (await self.freeze(turn, result, trigger, outcome, summary)).outcome
        finally:
            await self._memory.release(turn.tenant, name, token)

    async def _wait_for_checkpoint(self, turn: Turn, outcome: Outcome) -> Outcome | None:
        """`outcome` over the checkpoint the lock's holder stores, once it lands; None when
        none did in time."""
        deadline = time.monotonic() + LOCK_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
            found = await self._memory.find_checkpoint(turn.tenant, turn.session, turn.hashes)
            if outcome.newer(found) and (adopted := self._adopted(turn, outcome, found)):
                return adopted
        return None

    def _adopted(
        self, turn: Turn, outcome: Outcome, stored: Checkpoint, ceiling: int | None = None
    ) -> Outcome | None:
        """`outcome` over `stored`, a checkpoint another request wrote, when the view over
        it measures at most `ceiling` (by default: when it is under the turn's trigger, a
        view this turn would not compact); else None, and the caller goes on with its own.

        `newer` says only that `stored` covers more than the turn's checkpoint: a turn read
        while the store was down has none, and a checkpoint of an old prefix (kept by a
        snapshot Redis restarted from, or by the replica promoted when its master died) is
        newer than none, with all the history since it after it.
        """
        adopted = outcome.over(turn, stored)
        if ceiling is None:
            trigger = in_room(turn.policy.compression_trigger, turn.fixed)
            if turn.budget.pressure(adopted.tokens_after) < trigger:
                return adopted
        elif adopted.tokens_after <= ceiling:
            return adopted
        self._metrics.checkpoint_refused("over_trigger")
        logger.warning(
            "a stored checkpoint of %d of %d messages would forward about %d tokens: not used",
            stored.covered,
            len(turn.body),
            turn.budget.estimate(adopted.tokens_after),
        )
        return None

    async def _landed(self, turn: Turn, outcome: Outcome, trigger: str) -> Outcome:
        """`outcome`, unless it stands on a stored checkpoint and is over the usable input:
        then the request compacted from its own messages alone, when that is smaller.

        The plan lands any view it is given that can be brought under the usable input, but
        a view over a checkpoint holds what the store said (another replica's messages, of
        another version, that no longer pair with this request's): one the plan could not
        bring under it is not forwarded while the client's own messages can be.
        """
        if outcome.checkpoint is None or turn.budget.fits(outcome.tokens_after):
            return outcome
        messages = turn.view(None)
        situation = Situation(
            messages,
            turn.tools_body(),
            turn.policy,
            turn.budget,
            notes=turn.notes(None),
            recall=turn.recall_scope,
            working=turn.working,
        )
        plan = await turn.planned(lambda c, m: plan_compaction(situation, c, m))
        if isinstance(plan, NeedsSummary):
            plan = plan.fallback()  # at once: nothing the store prepared is trusted here
        alone = replace(
            outcome,
            messages=messages,
            tokens_after=turn.tokens(messages),
            checkpoint=None,
            strategy=None,
        )
        if isinstance(plan, Compacted):
            alone = replace(alone, tokens_after=plan.tokens_after)
        if alone.tokens_after >= outcome.tokens_after:
            return outcome
        self._metrics.checkpoint_refused("over_input")
        logger.warning(
            "%d tokens over a stored checkpoint, over the usable input: compacted from the "
            "request alone to %d",
            turn.budget.estimate(outcome.tokens_after),
            turn.budget.estimate(alone.tokens_after),
        )
        if isinstance(plan, Compacted):
            frozen = await self.freeze(turn, plan, trigger, alone)
            if frozen.stored:
                # As any compaction that truncated: what it dropped is summarized for the next.
                self.preparer.settled(turn, used=False)
                self.preparer.fold(turn, plan)
            alone = frozen.outcome
        return replace(alone, tried=True)

    def _recalls(self, turn: Turn, result: Compacted) -> RecallIds | None:
        """What the compaction's recall ids stand for, by content hash: the client's
        messages are archived after the answer (their bodies travel then); only the proxy's
        own (an earlier cut or note in a span) travel now."""
        if not result.recalls:
            return None
        sent = {turn.digests.of(m).hex() for m in turn.request.messages}
        refs: dict[str, list[str]] = {}
        bodies: dict[str, Message] = {}
        for rid, messages in result.recalls.items():
            hashes = [turn.digests.of(m).hex() for m in messages]
            refs[rid] = hashes
            bodies.update((h, m) for h, m in zip(hashes, messages, strict=True) if h not in sent)
        return RecallIds(refs, bodies)

    async def freeze(
        self,
        turn: Turn,
        result: Compacted,
        trigger: str,
        outcome: Outcome,
        summary: SummaryResult | None = None,
        *,
        ceiling: int | None = None,
    ) -> Frozen:
        """Store `result` as the turn's checkpoint and forward it (nothing changes when it
        took no step: a summary no smaller than its span changed nothing).

        Set-if-absent: when another request froze the same prefix first, its version wins,
        every request that extends the prefix forwards the same bytes, and only the winner
        is recorded as a compaction (fifty identical requests are one compaction, not fifty).
        Unless the view over it measures over `ceiling` (by default, the turn's trigger; see
        `_adopted`): then `result` is forwarded, and not stored.
        """
        if not result.steps:
            return Frozen(outcome, stored=False)
        recalls = self._recalls(turn, result)
        if result.recalls:
            outcome = replace(outcome, recalls={**outcome.recalls, **result.recalls})
        record = CompactionRecord(
            time.time(),
            trigger,
            result.strategy,
            result.tokens_before,
            result.tokens_after,
            summarizer_model=summary.model if summary else None,
            summarizer_tokens=summary.tokens if summary else 0,
            steps=result.steps,
            summarizer_input_tokens=summary.input_tokens if summary else 0,
            summarizer_cached_tokens=summary.cached_tokens if summary else 0,
        )
        made = new_checkpoint(
            turn.head,
            turn.body,
            turn.hashes,
            result.messages,
            created_at=record.at,
            strategy=result.strategy,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            notes=tuple(sorted(result.notes)),
        )
        if made is None:
            # The body is unchanged (only the head was cut): there is no prefix of the
            # conversation to freeze, so this is forwarded as it is and not stored.
            messages = result.messages
            outcome = replace(
                outcome,
                messages=messages,
                tokens_after=turn.tokens(messages),
                strategy=result.strategy,
            )
            await self._memory.record_compaction(turn.tenant, turn.session, record)
            if recalls is not None:
                await self._memory.put_recalls(
                    turn.tenant, turn.session, recalls.ids, recalls.bodies
                )
        else:
            # Recorded, and its recall ids stored, in the same call (recorded when it is the
            # one kept): the compaction turn waits for one round trip, not three.
            stored = await self._memory.put_checkpoint(
                turn.tenant, turn.session, made, record, recalls
            )
            if stored is not made:
                theirs = self._adopted(turn, outcome, stored, ceiling)
                return Frozen(theirs or outcome.over(turn, made), stored=False)
            outcome = outcome.over(turn, made)
        estimate = turn.budget.estimate
        self._metrics.compaction(
            result.strategy, trigger, estimate(result.tokens_before), estimate(result.tokens_after)
        )
        return Frozen(outcome, stored=True)


def _condensed_block(turn: Turn, notes: frozenset[str]) -> str | None:
    """The block a checkpoint covering the whole conversation ends with, if it does: the
    conversation was condensed as it stands (a compaction asked twice gets one answer)."""
    checkpoint = turn.checkpoint
    if checkpoint is None or checkpoint.covered != len(turn.body):
        return None
    return _last_note(checkpoint.messages[-1:], notes)


def _last_note(messages: list[Message], notes: frozenset[str]) -> str | None:
    """The last of `messages` that is one of the proxy's notes, standing alone."""
    return next(
        (text(m) for m in reversed(messages) if note_digest(text(m)) in notes),
        None,
    )
