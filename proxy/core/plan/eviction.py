"""The span a note replaces (`Eviction`): the oldest unpinned units, never the recent window
or the running turn's user message, with the earlier notes it folds in. The note's ledger,
artifact trail and list of the running turn's calls are made here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from proxy.core import artifacts, recall, turn_calls
from proxy.core import statements as ledger
from proxy.core.messages import (
    Message,
    is_instruction,
    role,
    text,
)
from proxy.core.plan.work import Work
from proxy.core.splice import splice
from proxy.core.statements import Statement
from proxy.core.summary import (
    Prefix,
    marker,
    note_digest,
    prefix_fields,
    stands_for,
)
from proxy.core.units import Unit


@dataclass(frozen=True, slots=True)
class Eviction:
    """The oldest unpinned units to replace with one note, and the note they already had.

    The span starts after the leading instructions and the pinned task and never reaches
    into the recent window. An earlier note, standalone in the span or merged into a user
    message, is taken out and folded into the new one instead of piling up: its summary
    becomes the previous summary, its ledger the start of the new ledger, its artifact trail
    the end of the new trail.
    """

    work: Work
    messages: list[Message]
    start: int
    stop: int
    previous: str | None
    earlier: tuple[Statement, ...]
    """The ledger of the earlier note."""
    task: Message | None
    """The task message when the span holds it (its words rank as the task's)."""
    represented: int = 0
    """How many of the client's messages the earlier notes stood for."""
    carried: tuple[str, ...] = ()
    """The artifact trail of the earlier notes."""
    task_first: bool = False
    """Whether the task (in the span) was said before what the earlier notes carry."""
    calls: tuple[str, ...] = ()
    """The calls of the running turn an earlier note listed (`proxy.core.turn_calls`)."""

    @property
    def condensed(self) -> int:
        """How many of the client's messages the new note stands for: the span's, and those
        the earlier notes it folds stood for (through every chained checkpoint)."""
        return len(self.evicted) + self.represented

    @property
    def evicted(self) -> tuple[Message, ...]:
        """The span's messages, earlier notes apart."""
        work = self.work
        return tuple(m for m in self.messages[self.start : self.stop] if work.note_of(m) is None)

    @classmethod
    def find(cls, work: Work, *, deep: bool, note_tokens: int) -> Eviction | None:
        """The span to evict: everything before the recent window when `deep`, else just
        enough to bring `work` to its target. None when there is nothing to evict, or when
        the span frees no more than `note_tokens` (the note would cost what it saves)."""
        messages, previous, earlier, represented, carried, places = _detached(work)
        floor = work.pins.head
        # The span starts after the pinned task, unless the task is in the recent window
        # (when the conversation's only real user message is its newest).
        if work.pins.first_user is not None and work.pins.first_user < work.pins.recent:
            floor = max(floor, work.pins.first_user + 1)
        # The user message that started the running turn never goes, whatever else does: a
        # running turn let go (or one right after the pinned task, which no widened window
        # keeps) loses only its oldest rounds, and the note stands before that message.
        running = work.pins.running
        if running is not None and running < work.pins.recent:
            floor = max(floor, running + 1)
        candidates = [u for u in work.units if u.start >= floor and u.stop <= work.pins.recent]
        if not candidates:
            return None
        # Earlier notes do not count as freed: the new note carries what they said.
        sizes = [
            sum(
                work.counter.message(messages[i])
                for i in u.indices()
                if work.note_of(messages[i]) is None
            )
            for u in candidates
        ]
        if deep:
            taken = _given_back(work, messages, candidates, sizes)
        else:
            taken = _standalone_end(
                messages, candidates, _enough(work, messages, sizes, note_tokens)
            )
        # A client's compaction takes any span: what is not in the block is gone from its
        # history, so a note as big as the span is still worth writing.
        if sum(sizes[:taken]) <= note_tokens and not work.situation.whole:
            return None
        start, stop = candidates[0].start, candidates[taken - 1].stop
        users = (i for i in range(work.pins.head, len(messages)) if role(messages[i]) == "user")
        first = next(users, None)
        task = messages[first] if first is not None and start <= first < stop else None
        # The task was said before what the earlier notes carry when they all stand after it
        # (a released task goes to the ledger first, so later values replace its own).
        before = task is not None and first is not None and all(p > first for p in places)
        eviction = cls(
            work,
            messages,
            start,
            stop,
            previous,
            tuple(earlier),
            task,
            represented,
            carried,
            task_first=before,
            calls=_running_calls(work),
        )
        # Only notes of earlier compactions to evict: nothing new to gain, and replacing a note
        # with a note would change the prefix for nothing.
        return eviction if eviction.evicted else None

    def recall(self) -> str | None:
        """The recall id of the span, with the earlier note it folds in: each note names the
        id of what it stood for, so a recall leads back through every compaction. A note
        that stood alone in the span is in it; one merged into a user message was taken out
        of the conversation (`_detached`) and goes first, as the note it was."""
        span = self.messages[self.start : self.stop]
        work = self.work
        if self.previous is not None and not any(work.note_of(m) is not None for m in span):
            span = [{"role": "note", "content": self.previous}, *span]
        return work.recall_of(span)

    def prefix(self) -> Prefix | None:
        """The conversation as the plan was given it (as it was forwarded) through the span's
        end: what the provider's prompt cache holds, for a summary request it serves
        (`NeedsSummary.prefix`, and a truncated span's summary written later).

        The span was cut from the plan's own copy, where trimmed and cleared results keep
        their places: the span's end is the same index in both. None when an earlier step
        removed messages (old turns shrunk to their question and answer, an earlier span
        truncated): it is not then.
        """
        work = self.work
        given = work.situation.messages
        if [role(m) for m in self.messages] != [role(m) for m in given]:
            return None
        messages = tuple(given[: self.stop])
        body = work.situation.body
        if work.situation.recall is not None and not recall.named(given):
            # Offered only once a compaction named an id: not in what was forwarded so far.
            body = recall.without_tool(body)
        return Prefix(
            prefix_fields(body),
            messages,
            work.counter.messages(messages) + work.counter.tools(body),
            after_task=any(not is_instruction(m) for m in messages[: self.start]),
        )

    def marker(self) -> str:
        """The truncation marker that stands for the span."""
        return marker(self.condensed, self.previous, self.recall())

    def first(self, count: int) -> Eviction | None:
        """This span shortened to its first `count` messages (earlier notes apart), or None
        when they do not end on a unit's boundary."""
        seen = 0
        for index in range(self.start, self.stop):
            seen += self.work.note_of(self.messages[index]) is None
            if seen == count:
                ends = any(unit.stop == index + 1 for unit in self.work.units)
                return replace(self, stop=index + 1) if ends else None
        return None

    def ledger(self) -> list[Statement]:
        """The new note's ledger: the earlier one, then what the span's user said, in budget,
        less what the user has replaced since (see `replaced`)."""
        work = self.work
        gone = set(self.replaced())
        current = [s for s in self.statements() if s.text not in gone]
        return ledger.selected(current, work.ledger_budget, work.counter.text)

    def statements(self) -> list[Statement]:
        """The earlier ledger merged with what the span's user said (latest value of each),
        in the order first said.

        A task said before what the earlier notes carry (released now, when the earlier
        notes stand after it) goes first, and loses to them what they replaced ("Budget:
        $500" in the task, "$700" in the ledger); what the rest of the span said follows."""
        evicted = list(self.evicted)
        if self.work.situation.beside is not None:
            work = self.work
            evicted = [m for m in evicted if not work.stands_beside(work.detach_notes(m)[0])]
        if self.task is not None and self.task_first:
            task = self.work.said([self.task], self.task)
            rest = self.work.said([m for m in evicted if m is not self.task], None)
            return ledger.merged(ledger.merged(task, self.earlier), rest)
        return ledger.merged(self.earlier, self.work.said(evicted, self.task))

    def replaced(self) -> list[str]:
        """What the earlier ledger or the span's user said that a later statement replaced
        (in the span or after it, still in the conversation): a stale value kept in the
        block beside the new one misleads as much as a lost one."""
        work = self.work
        said = [*self.earlier, *work.said(self.evicted, self.task)]
        later = work.said(self.messages[self.stop :], None)
        current = {s.text for s in ledger.merged(self.statements(), later)}
        return [s.text for s in said if s.text not in current]

    def turn_calls(self) -> list[str]:
        """The calls of the running turn the new note lists: those an earlier note of the
        turn listed, then the span's, when the span is the turn's own rounds (what was done
        in an earlier turn is the summary's and the trail's). A span older than the turn
        (the pinned task released, the turns before it) folds the earlier note all the same:
        its calls stay listed, or the agent would start the turn over."""
        work = self.work
        running = work.pins.running
        if running is None:
            return []
        if self.start <= running:
            return list(self.calls)
        made = turn_calls.call_lines(self.evicted, lambda result: work.recall_of([result]))
        return [*self.calls, *(line for line in made if line not in self.calls)]

    def trail(self) -> list[str]:
        """The new note's artifact trail: what the span mentioned, then the earlier one."""
        return self.work.trail_of(self.evicted, self.carried, self.work.trail_budget)

    def apply(
        self,
        note: str,
        step: str,
        kept: list[Statement] | None = None,
        trail: list[str] | None = None,
    ) -> None:
        """Replace the span with `note`, the ledger (`kept`, or this span's own) and the
        artifact trail (`trail`, or this span's own)."""
        listed = turn_calls.with_calls(note, self.turn_calls())
        noted = artifacts.with_trail(listed, self.trail() if trail is None else trail)
        block = ledger.with_ledger(noted, self.ledger() if kept is None else kept)
        work = self.work
        work.notes.add(note_digest(block))
        # Earlier notes standing before the span (a running turn's span starts after its
        # user message) are folded into the new note like those in it: they go too.
        head = work.pins.head
        before = [
            m for i, m in enumerate(self.messages[: self.start])
            if i < head or work.note_of(m) is None
        ]  # fmt: skip
        reduced = [*before, *self.messages[self.stop :]]
        at = len(before)
        if work.pins.running is not None and work.pins.running == self.start - 1:
            # The span is the running turn's oldest rounds: the note goes before the user
            # message that started the turn, which stays last of the user's words (merged, the
            # note opens it, never follows the ask).
            at -= 1
        messages = splice(reduced, at, at, block).messages
        count = work.counter.messages
        # A note as big as what it replaces would make the request no smaller: not worth it
        # (unless the client asked for the compaction: then the span leaves its history).
        if work.situation.whole or count(messages) < count(work.messages):
            work.update(messages, step)
            work.note, work.block = note, block
            if step == "truncate":
                if not work.dropped:
                    work.dropped_after = self.previous
                # Through the end of the newest span (None once an earlier one was cut out).
                work.dropped_prefix = self.prefix()
                work.dropped += self.evicted
                named = recall.ids_in(note)
                work.dropped_recall = named[0] if named else None


def _running_calls(work: Work) -> tuple[str, ...]:
    """The calls an earlier note of the running turn listed: one standing right before the
    turn's user message, or opening it."""
    running = work.pins.running
    if running is None:
        return ()
    for index in (running, running - 1):
        message = work.messages[index]
        standalone = work.note_of(message)
        for note in [standalone] if standalone is not None else work.detach_notes(message)[1]:
            rest, _ = ledger.without_ledger(note)
            rest, _ = artifacts.without_trail(rest)
            _, calls = turn_calls.without_calls(rest)
            if calls:
                return tuple(calls)
    return ()


def _enough(work: Work, messages: list[Message], sizes: list[int], note_tokens: int) -> int:
    """How many of the oldest candidate units to take to bring `work` to its target."""
    need = work.counter.messages(messages) + work.tools - work.target + note_tokens
    need += work.ledger_budget + work.trail_budget
    taken, freed = 0, 0
    while taken < len(sizes) and freed < need:
        freed += sizes[taken]
        taken += 1
    return max(taken, 1)


def _detached(
    work: Work,
) -> tuple[list[Message], str | None, list[Statement], int, tuple[str, ...], tuple[float, ...]]:
    """`work.messages` with every note merged into a user message taken out (wherever it
    stands: the new note carries them all, so no message ever holds two), the newest
    earlier note's summary part (or marker) with the ledgers of all of them, how many
    messages they stood for, their artifact trails (the newest note's first), and where
    each note stood (its message's index; less a half for a note opening a message, plus a
    half for one closing it)."""
    messages = list(work.messages)
    found: list[str] = []
    places: list[float] = []
    for index in range(work.pins.head, len(messages)):
        standalone = work.note_of(messages[index])
        if standalone is not None:
            if index < work.pins.recent:  # one in the recent window stays where it is
                found.append(standalone)
                places.append(index)
            continue
        original = text(messages[index])
        messages[index], merged_notes = work.detach_notes(messages[index])
        found += merged_notes
        places += [index - 0.5 if original.startswith(n) else index + 0.5 for n in merged_notes]
    earlier: list[Statement] = []
    carried: list[str] = []
    previous = None
    for note in found:
        previous, statements = ledger.without_ledger(note)
        previous, trail = artifacts.without_trail(previous)
        previous, _ = turn_calls.without_calls(previous)  # carried apart (`_running_calls`)
        earlier = ledger.merged(earlier, statements)
        carried = artifacts.merged(trail, carried)
    represented = sum(stands_for(note) for note in found)
    return messages, previous, earlier, represented, tuple(carried), tuple(places)


def _given_back(
    work: Work, messages: list[Message], candidates: Sequence[Unit], sizes: list[int]
) -> int:
    """How many units a deep span takes: all of them, or fewer so that it ends right before
    a user message (the note then stands alone instead of being merged into the task, which
    would change the pinned prefix too), as long as the result still lands on the target."""
    taken = len(candidates)
    if work.situation.whole or _is_user_at(messages, candidates[-1].stop):
        return taken
    total = work.counter.messages(messages) + work.tools + work.block_budget
    for fewer in range(taken - 1, 0, -1):
        if total - sum(sizes[:fewer]) > work.target:
            break
        if _is_user_at(messages, candidates[fewer - 1].stop):
            return fewer
    return taken


def _standalone_end(messages: Sequence[Message], candidates: Sequence[Unit], taken: int) -> int:
    """How many units to evict so that the span ends right before a user message, where one
    unit more does it: the note then stands alone between the task and that message instead
    of being merged into the task, which would change the pinned prefix too."""
    if _is_user_at(messages, candidates[taken - 1].stop):
        return taken
    if taken < len(candidates) and _is_user_at(messages, candidates[taken].stop):
        return taken + 1
    return taken


def _is_user_at(messages: Sequence[Message], index: int) -> bool:
    return index < len(messages) and role(messages[index]) == "user"
