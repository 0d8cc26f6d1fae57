"""The conversation being compacted (`Work`): its messages as each step leaves them, what
they pin (the head, the task, the recent window, the running turn, the working set), the
block's budget, the proxy's notes in it, and the recall ids made so far."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core import artifacts, pastes, recall
from proxy.core import statements as ledger
from proxy.core.mentions import Mentions
from proxy.core.messages import (
    Message,
    role,
    text,
    tool_call_name,
)
from proxy.core.plan.results import Compacted, SummaryTask
from proxy.core.plan.situation import LEDGER_FLOOR, Allowances, Counter, Situation
from proxy.core.statements import Statement
from proxy.core.summary import (
    Prefix,
    detach_notes,
    note_digest,
    note_of,
    offered_tools,
)
from proxy.core.tool_results import (
    is_trimmed,
    recall_of,
)
from proxy.core.units import Pins, Unit, group_units, pins
from proxy.core.working_set import latest_copy

# What a note costs beyond its parts (role, framing, its opening line).
NOTE_OVERHEAD = 48

# Steps that finish a landing; the strategy reported is the last step that is not one (or
# "summarize", when a summary stands in the result).
_FINISHING = frozenset(
    {"release_task", "trim_recent", "fit_block", "clear_recent", "release_running", "cap_recent"}
)


@dataclass(slots=True)
class Work:
    """A conversation being compacted, step after step."""

    situation: Situation
    counter: Counter
    messages: list[Message]
    mentions: Mentions = field(default_factory=Mentions)
    steps: list[str] = field(default_factory=list)
    before: int = 0
    tools: int = 0
    beside: int = 0
    """What `Situation.beside` counts (0: none)."""
    allowances: Allowances = field(init=False)
    fixed: float = field(init=False)
    """The share of the usable input the head takes (`Situation.fixed`)."""
    ledger_budget: int = 0
    """The ledger's budget: what the ledger of everything that could leave costs, within
    the allowance (a conversation whose user said little keeps a bigger recent window)."""
    trail_budget: int = 0
    """The artifact trail's budget: what the trail of everything that could leave costs,
    within the allowance (like the ledger's)."""
    block_budget: int = 0
    """The most the compaction block of this conversation can take."""
    units: tuple[Unit, ...] = ()
    pins: Pins = field(init=False)
    pin_task: bool = True
    keep_running: bool = True
    """Whether the running turn stays whole (until a landing lets it be cut too)."""
    target_override: int | None = None
    """A fixed token target (the emergency plan's) instead of `compaction_target`'s."""
    summarizes: bool | None = None
    """Whether a summary may be written (None: as the strategy says)."""
    note: str | None = None
    """The newest compaction block's text (its ledger and trail apart)."""
    block: str | None = None
    """The newest compaction block as written (ledger and trail included)."""
    dropped: list[Message] = field(default_factory=list)
    """What truncations removed, oldest first, and the note before the first of them."""
    dropped_after: str | None = None
    dropped_recall: str | None = None
    dropped_prefix: Prefix | None = None
    """The conversation as forwarded through `dropped`'s end (`Eviction.prefix`), if known."""
    """The recall id the newest truncation marker names (what `dropped`'s summary replaces)."""
    notes: set[str] = field(init=False)
    """The digests of the proxy's notes: the situation's, and every block written since."""
    recalls: dict[str, tuple[Message, ...]] = field(default_factory=dict)
    """Every recall id made so far (some may stand in no message in the end)."""
    _notes_seen: dict[int, tuple[Message, int, str | None]] = field(default_factory=dict)
    """`note_of`'s answers by message (kept alive here, so its id is not reused), with how
    many notes were known then: a plan asks it of each message several times, and each
    answer hashes the message's whole text."""

    _working_seen: tuple[list[Message], int | None] | None = None

    def __post_init__(self) -> None:
        self.notes = set(self.situation.notes)
        situation = self.situation
        self.fixed = situation.fixed(self.counter)
        self.allowances = Allowances.of(situation.budget, situation.policy, self.fixed)
        self.pin_task = self.situation.policy.pin_first_user
        self.tools = self.counter.tools(self.situation.body)
        beside = situation.beside
        self.beside = 0 if beside is None else self.counter.message(beside)
        self.before = self.total() - self.beside - situation.resent
        self.size_block()
        self.regroup()

    def size_block(self) -> None:
        """Size the compaction block of this conversation within the allowances."""
        allowances, count = self.allowances, self.counter.text
        earlier: list[Statement] = []
        carried: list[str] = []
        said: list[Message] = []
        summary = 0
        for message in self.messages:
            standalone = self.note_of(message)
            restored, notes = self.detach_notes(message)
            for note in [standalone] if standalone is not None else notes:
                without, statements = ledger.without_ledger(note)
                without, trail = artifacts.without_trail(without)
                earlier, summary = ledger.merged(earlier, statements), count(without)
                carried = artifacts.merged(trail, carried)
            if standalone is None and not self.stands_beside(restored):
                said.append(restored)
        said_now = self.said(said, None)
        everything = ledger.merged(earlier, said_now)
        # The user's rules, specifics and task may take up to half the allowance again when
        # they need it (a small window's allowance holds a dozen of them), and everything the
        # user said, their plain requests too ("Flag it as urgent."), up to the ledger's floor
        # (at most half the room the instructions leave): where schemas take 0.9 of the
        # usable input, the allowance (a quarter of that room) held two thirds of ten short
        # turns. Nothing more in an emergency, which must land at its own, lower target.
        allowance = allowances.ledger
        if self.target_override is None:
            needed = ledger.cost(ledger.above_chatter(everything), count)
            spoken = min(ledger.cost(everything, count), LEDGER_FLOOR, allowances.room // 2)
            allowance = max(allowance, min(needed, allowance * 3 // 2), spoken)
        chosen = ledger.selected(everything, allowance, count)
        self.ledger_budget = ledger.cost(chosen, count)
        whole = self.trail_of(said, carried, allowances.artifacts)
        self.trail_budget = artifacts.cost(whole, count)
        summarizes = self.summarizes
        if summarizes is None:
            summarizes = self.situation.policy.strategy in ("auto", "summarize")
        if summarizes:
            tools = offered_tools(self.situation.body)
            summary = max(summary, allowances.summary + allowances.facts + count(", ".join(tools)))
        self.block_budget = self.ledger_budget + self.trail_budget + summary + NOTE_OVERHEAD

    def said(self, messages: Sequence[Message], task: Message | None) -> list[Statement]:
        """What the user (or a late instruction) said in `messages`, in order (`task`: the
        message that first stated the task, when among them): each message's statements,
        then the line naming what it pasted with the id that recalls it whole (the id its
        cut named, once it was cut)."""
        found: list[Statement] = []
        for message in messages:
            for statement in self.mentions.statements(message, message is task):
                if statement.rank == ledger.PASTE:
                    body = text(message)
                    rid = pastes.recall_of(body) or self.recall_of([message])
                    statement = Statement(pastes.ledger_line(body, rid) or "", ledger.PASTE)
                found.append(statement)
        return found

    def trail_of(
        self, removed: Sequence[Message], carried: Sequence[str], budget: int
    ) -> list[str]:
        """The artifact trail of a block standing for `removed` and for earlier blocks whose
        trail was `carried`: the names of the newest removed message first, within `budget`."""
        found = [self.mentions.names(message) for message in reversed(removed)]
        names = [name for names in found for name in names]
        leading = {*(names[0] for names in found if names), *carried}
        trail = artifacts.merged(names, carried)
        return artifacts.selected(trail, budget, self.counter.text, leading)

    def recall_of(self, removed: Sequence[Message]) -> str | None:
        """The recall id of what a placeholder or a note stands for (`removed`, as the plan
        was given it), when recall is on. A result already cut to head and tail keeps the id
        its cut named: it stands for the original, which the cut no longer holds."""
        scope = self.situation.recall
        if scope is None:
            return None
        if len(removed) == 1 and is_trimmed(removed[0]):
            earlier = recall_of(removed[0])
            if earlier is not None:
                return earlier
        rid = recall.recall_id(scope, removed)
        self.recalls.setdefault(rid, tuple(removed))
        return rid

    def note_of(self, message: Message) -> str | None:
        """The note `message` stands for, if it is one the proxy wrote (see `notes`): the
        whole message, or a note that opened a message with nothing else left in it. By its
        digest first: a summary can quote the text that closes an opening note (a small
        model echoes what it read), which makes the message look like an opened one."""
        seen = self._notes_seen.get(id(message))
        if seen is not None and seen[1] == len(self.notes):
            return seen[2]
        body = text(message)
        if note_digest(body) in self.notes:
            found: str | None = body
        else:
            note = note_of(message)
            found = note if note is not None and note_digest(note) in self.notes else None
        # Notes are only ever added: an answer given with as many known is still right.
        self._notes_seen[id(message)] = (message, len(self.notes), found)
        return found

    def detach_notes(self, message: Message) -> tuple[Message, list[str]]:
        """`message` without the notes the proxy wrote into it (see `notes`), and those."""
        return detach_notes(message, lambda note: note_digest(note) in self.notes)

    def holds_note(self, message: Message) -> bool:
        """Whether `message` is or carries a note the proxy wrote: such a message is never cut
        (a cut would take the ledger with it); evicting it folds its note into the new one."""
        return self.note_of(message) is not None or bool(self.detach_notes(message)[1])

    def notes_left(self) -> frozenset[str]:
        """The digests of the proxy's notes the conversation holds now."""
        found: set[str] = set()
        for message in self.messages:
            standalone = self.note_of(message)
            notes = [standalone] if standalone is not None else self.detach_notes(message)[1]
            found.update(note_digest(note) for note in notes)
        return frozenset(found)

    def regroup(self) -> None:
        self.units = group_units(self.messages)
        self.pins = self._pins(recent_tokens=None)
        self.pins = self._pins(recent_tokens=self.recent_allowance())

    def _pins(self, *, recent_tokens: int | None) -> Pins:
        found = pins(
            self.messages,
            self.units,
            keep_recent=self.situation.policy.keep_recent,
            pin_first_user=self.pin_task,
            bound=None if recent_tokens is None else (recent_tokens, self.counter.message),
            is_note=lambda message: self.note_of(message) is not None,
        )
        if self.situation.whole:
            # Everything goes into the block: the client keeps its user messages itself.
            found = replace(found, recent=len(self.messages), running=None, asked=None)
        found = found.protecting(running=self.keep_running)
        # A note of the proxy's never opens the recent window: it stands for what is before
        # it, and a new block folds it in. Kept in the window, the next block (a released
        # task's) was written before it: two blocks, the newer one's ledger without the
        # older one's statements, the task's words after what was said later.
        recent = found.recent
        while recent < len(self.messages) - 1 and self._note_unit_at(recent):
            recent += 1
        # The client's working set is no history: its latest copy stays in the window. So
        # does the paste the running ask follows with only a reply between (what it is about,
        # as the tool exchange an ask follows is): on a client's first request, nothing yet
        # tells a working set (aider's files, then "Ok.") from a paste.
        for kept in (self.working_at(), self._asked_paste(found)):
            if kept is not None and kept >= found.head:
                start = next((u.start for u in self.units if u.start <= kept < u.stop), kept)
                recent = min(recent, start)
        return replace(found, recent=recent)

    def _asked_paste(self, found: Pins) -> int | None:
        """The user message two before the running one, when it pasted something and a reply
        with no tool call stands between them."""
        running = found.running
        if running is None or running < 2 or self.situation.whole:
            return None
        reply, pasted = self.messages[running - 1], self.messages[running - 2]
        if role(reply) != "assistant" or reply.get("tool_calls") or role(pasted) != "user":
            return None
        said = self.mentions.statements(pasted, False)
        return running - 2 if any(s.rank == ledger.PASTE for s in said) else None

    def working_at(self) -> int | None:
        """Where the latest copy of the client's working set stands, if the request has one."""
        if not self.situation.working:
            return None
        seen = self._working_seen
        if seen is not None and seen[0] is self.messages:
            return seen[1]
        at = latest_copy(self.messages, self.situation.working, lambda m: self.detach_notes(m)[0])
        # Asked of every message a step looks at: found once per list of messages (each step
        # makes a new one), and the list kept, so its id is not reused.
        self._working_seen = (self.messages, at)
        return at

    def _note_unit_at(self, index: int) -> bool:
        """Whether message `index` is a note of the proxy's standing alone, a unit of its own."""
        alone = any(u.start == index and u.stop == index + 1 for u in self.units)
        return alone and self.note_of(self.messages[index]) is not None

    def recent_allowance(self) -> int:
        """What the target leaves the recent window: the target less the instructions, the
        tools, the pinned task and the compaction block's allowance."""
        fixed = self.messages[: self.pins.head]
        if self.pins.first_user is not None:
            fixed = [*fixed, self.messages[self.pins.first_user]]
        return self.target - self.counter.messages(fixed) - self.tools - self.block_budget

    def stands_beside(self, message: Message) -> bool:
        """Whether `message` (its notes detached) is `Situation.beside`: the ledger leaves
        it out."""
        beside = self.situation.beside
        return beside is not None and message == beside

    def total(self) -> int:
        """What the next request counts: this one's messages and tools, the message the
        client keeps beside the block (`Situation.beside`), and what it sends again beside
        the compacted history (`Situation.resent`)."""
        resent = self.situation.resent
        return self.counter.messages(self.messages) + self.tools + self.beside + resent

    @property
    def target(self) -> int:
        if self.target_override is not None:
            return self.target_override
        return self.allowances.target

    def done(self) -> bool:
        return self.total() <= self.target

    def update(self, messages: list[Message], step: str) -> None:
        if messages != self.messages:
            self.messages = messages
            self.steps.append(step)
            self.regroup()

    def result(self) -> Compacted:
        after = self.total()
        fits = self.situation.budget.fits(after)
        steps = tuple(self.steps)
        # No step at all: a summary that came back no smaller than its span, so nothing changed.
        fallback = steps[-1] if steps else "none"
        strategy = next((s for s in reversed(steps) if s not in _FINISHING), fallback)
        if "summarize" in steps:
            # A summary stands in the result, whatever landed it after (the part of the span
            # a prepared summary did not cover, truncated): that is what the headers report.
            strategy = "summarize"
        dropped = None
        if self.dropped:
            body = self.situation.body
            dropped = SummaryTask(
                tuple(self.dropped),
                self.dropped_after,
                model_of(body),
                self.allowances.summary,
                tuple(offered_tools(body)),
                recall=self.dropped_recall,
                prefix=self.dropped_prefix,
            )
        return Compacted(
            self.messages,
            strategy,
            self.before,
            after,
            fits,
            steps,
            self.note,
            dropped,
            self.notes_left(),
            self.named_recalls(),
            self.block,
        )

    def named_recalls(self) -> dict[str, tuple[Message, ...]]:
        """The recall ids the conversation names now, with what each stands for (an id made
        for a cut that was tried and not kept is no one's), and the ids what they stand for
        names: a span evicted after its results were cleared holds their placeholders, and
        a recall of the span must lead to the results too."""
        if not self.recalls:
            return {}
        named = {rid for message in self.messages for rid in recall.ids_in(text(message))}
        found: dict[str, tuple[Message, ...]] = {}
        while named:
            rid = named.pop()
            if rid in found or rid not in self.recalls:
                continue
            found[rid] = self.recalls[rid]
            named.update(i for m in found[rid] for i in recall.ids_in(text(m)))
        return found

    def outcome(self) -> Compacted | None:
        """The result if the conversation has reached its target, else None (and always
        None when forced: a forced compaction goes through every layer of its strategy)."""
        if self.situation.force or not self.steps:
            return None
        return self.result() if self.done() else None

    def tool_name(self, index: int) -> str | None:
        """The name of the tool whose result is message `index`."""
        call_id = self.messages[index].get("tool_call_id")
        for unit in self.units:
            if unit.start < index < unit.stop and isinstance(call_id, str):
                return tool_call_name(self.messages[unit.start], call_id)
        return None


def model_of(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


def mentions_or_new(mentions: Mentions | None) -> Mentions:
    return Mentions() if mentions is None else mentions
