"""The compaction plan: what a conversation becomes before it is forwarded.

`plan_compaction` looks at a request and returns a decision, never performing anything:

- `Unchanged`: forward as is (under the trigger, in cooldown, malformed, nothing to remove);
- `Compacted`: forward these messages instead;
- `NeedsSummary`: the span to summarize; `complete(summary)` with a summary of it (or of its
  first messages: `covered`) gives the `Compacted` result, `fallback()` truncates instead.

A request never waits for a summary (`proxy.service.preparer`): the summary is written ahead
of time and found by the span's keys (`proxy.core.prepared`). What a compaction drops with no
summary covering it is its `dropped` summary task: written afterwards, it is folded into the
next compaction as its previous summary (`rolled`).

Budgets are shares of the usable input U (`proxy.core.budget`): compaction starts when the
prompt passes `compression_trigger` x U and lands at or below `compaction_target` x U, so the
new prefix lasts many requests (the gap between the two is what makes compactions rare). The
compaction block, the one message standing for what was removed, has allowances that scale
with U: the ledger of the user's own words, the artifact trail (what removed tool results
and calls mentioned), the summary (capped by `summary_max_tokens`) and the facts the summary
lost. The recent window, kept whole, gets what the target leaves after the instructions, the
tools, the pinned task and the block: at most `keep_recent` messages, whole units only (a tool
call with all its results), the newest unit always.

The strategy's layers run cheapest first and stop at the target:

1. trim a single tool result over `tool_result_max_share` of the window;
2. clear old tool results before the recent window, and cut what users pasted there (logs,
   files, JSON: `proxy.core.pastes`) to head and tail, their words whole;
3. summarize everything before the recent window (rolling: the previous summary is folded in),
   the summary checked against the span's fact ledger;
4. truncate the oldest units.

`context.strategy` picks one layer alone instead of all (`auto`). With `max_context_turns`,
turns older than the budget first shrink to their question and answer.

Landing: when the strategy's layers leave the conversation above the target, a fixed order of
reductions follows, each only while it is still above: clear old tool results, truncate
everything before the recent window, let the pinned task go (its words go to the ledger), cut
the recent window's tool results to head and tail (the oldest first), shorten the block to the
room left (its summary's last lines, then its trail's and its ledger's lowest-ranked entries;
only when that reaches the target), let the running turn's oldest rounds go (only when its
cut rounds do not fit the usable input: they are what must stay). Last, and only
to fit the usable input, never just to reach the target, the text of the newest messages is
cut, never the running turn's user message.

The recent window never starts inside the running turn (from the last user message on) while
anything older can go, and always holds the tool exchange that message follows (the result
the user asks about): the newest results are cut to head and tail, never cleared or dropped,
and the user message that started the running turn is forwarded in place, as sent, the last
of the user's words (a note of the turn's own rounds goes before it, never after the ask). The
result names every step it took. Whatever a user (or a late instruction) said and a step
removed is carried verbatim in the block's ledger (`proxy.core.statements`); the ids, paths,
versions and errors the removed tool results and calls mentioned, in its artifact trail
(`proxy.core.artifacts`), whatever the summary. What a message mentions is found once
(`proxy.core.mentions`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from proxy.core import artifacts, pastes, recall, turn_calls
from proxy.core import statements as ledger
from proxy.core.budget import Budget
from proxy.core.digests import digest
from proxy.core.ledger import appendix, ledger_of, missing_facts
from proxy.core.mentions import Mentions
from proxy.core.messages import (
    Message,
    is_instruction,
    leading_instructions,
    role,
    text,
    tool_call_name,
)
from proxy.core.policy import ContextPolicy
from proxy.core.prepared import span_keys
from proxy.core.room import fixed_share, in_room
from proxy.core.splice import splice
from proxy.core.statements import Statement
from proxy.core.summary import (
    TOOLS_REMINDER,
    Prefix,
    detach_notes,
    marker,
    note_digest,
    note_of,
    offered_tools,
    prefix_fields,
    replace_note,
    stands_for,
    summary_request,
    summary_text,
)
from proxy.core.tool_results import (
    NOTE_ALLOWANCE,
    clear,
    is_cleared,
    is_tool_result,
    is_trimmed,
    names_kept,
    recall_of,
    trim,
)
from proxy.core.turn_budget import shrink_old_turns
from proxy.core.units import Pins, Unit, group_units, is_well_formed, pins

# What a note costs beyond its parts (role, framing, its opening line).
_NOTE_OVERHEAD = 48
# The smallest allowances, for tiny windows: a ledger of a few rules, a summary of a few lines.
LEDGER_FLOOR = 256
SUMMARY_FLOOR = 128
# The artifact trail's share of the usable input, and its floor for small windows: room for
# a dozen names (a build id, a checksum, the files touched) whatever the window.
ARTIFACTS_SHARE = 0.03
ARTIFACTS_FLOOR = 192
# A trimmed message keeps at least this many tokens: less than that is all note and no text.
_MIN_CUT = 64
_PASTE_KEPT = 96
"""What an old paste keeps of its head and tail, beside the user's words (like a cleared
result's placeholder, enough to say what it was)."""
_CUT_ATTEMPTS = 4
# Steps that finish a landing; the strategy reported is the last step that is not one (or
# "summarize", when a summary stands in the result).
_FINISHING = frozenset(
    {"release_task", "trim_recent", "fit_block", "release_running", "cap_recent"}
)


class Counter(Protocol):
    """What the plan needs of the token counter (see `proxy.core.tokens.TokenCounter`)."""

    def message(self, message: Message) -> int: ...

    def messages(self, messages: Sequence[Message]) -> int: ...

    def tools(self, body: Mapping[str, Any]) -> int: ...

    def text(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything the plan looks at for one request."""

    messages: Sequence[Message]
    body: Mapping[str, Any]
    policy: ContextPolicy
    budget: Budget
    turns_since_compaction: int | None = None
    """Turns since this conversation was last compacted; None if never."""
    force: bool = False
    """Compact now whatever the pressure and cooldown (a manual `/compact`, a hook): every
    layer then takes all it may, not just what reaches the target."""
    notes: frozenset[str] = frozenset()
    """The digests (`note_digest`) of the notes the proxy wrote into `messages` (its
    checkpoint's): only these are read as notes. A message that merely looks like one (a
    model imitating the block it saw, sent back as history) is the client's text."""
    recall: str | None = None
    """The conversation's scope (tenant and session) when the model can recall what this
    compaction removes (`proxy.core.recall`): every placeholder, cut and note then names the
    id of what it stands for. None: recall is off, and the texts say nothing of it."""
    whole: bool = False
    """The client asked for this compaction (`/v1/responses/compact`, `compaction_trigger`):
    everything after the instructions (and the pinned task) is condensed into the block,
    whatever it costs or saves. No recent window, no running turn kept apart; the span is
    summarized (or truncated, as the strategy says) from its original messages, none trimmed
    or cleared first (`proxy.core.compaction_items` gives the client its user messages back
    beside the block)."""
    working: frozenset[bytes] = frozenset()
    """The digests of the messages that are the client's working set (`proxy.core.
    working_set`: what it re-sends whole on every request, aider's files message): the
    latest is kept whole, in the recent window, while the request fits the window."""
    beside: Message | None = None
    """A message of `messages` forwarded again beside the block (`whole`: the latest user
    message, which the client keeps): it is condensed with the rest, but the ledger does not
    repeat what it says, and the block gives way to it as to a running turn (`_fit_block`)."""

    def fixed(self, counter: Counter) -> float:
        """The share of the usable input the leading instructions and the tools take: the
        compaction's levels and allowances apply to the room they leave (`proxy.core.room`)."""
        head = self.messages[: leading_instructions(self.messages)]
        return fixed_share(self.budget, counter.messages(head) + counter.tools(self.body))


@dataclass(frozen=True, slots=True)
class Allowances:
    """The token budget of one compaction, in our raw tokens."""

    target: int
    """Where the compaction lands (at or below)."""
    limit: int
    """The usable input U: nothing is forwarded above it when compaction can help it."""
    ledger: int
    summary: int
    facts: int
    """The appendix of facts the summary lost."""
    artifacts: int
    """The artifact trail: what removed tool results and calls mentioned."""

    @classmethod
    def of(cls, budget: Budget, policy: ContextPolicy, fixed: float = 0.0) -> Allowances:
        """The allowances of a request with `budget` under `policy`, whose instructions and
        tools take `fixed` of the usable input: the block's parts are shares of the room
        they leave, and the target is `compaction_target` of that room."""
        limit = budget.tokens_at(1.0)
        room = int(limit * (1 - fixed))
        ledger_size = max(min(LEDGER_FLOOR, room // 4), int(room * policy.ledger_share))
        summary = min(
            policy.summary_max_tokens, max(SUMMARY_FLOOR, int(room * policy.summary_share))
        )
        trail = max(min(ARTIFACTS_FLOOR, room // 8), int(room * ARTIFACTS_SHARE))
        target = budget.tokens_at(in_room(policy.compaction_target, fixed))
        return cls(target, limit, ledger_size, summary, summary // 2, trail)


@dataclass(frozen=True, slots=True)
class Unchanged:
    reason: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Compacted:
    messages: list[Message]
    strategy: str
    tokens_before: int
    tokens_after: int
    fits: bool
    """Whether the result fits the usable input (the plan did what it could if not)."""
    steps: tuple[str, ...] = ()
    """Every reduction used, in order (the strategy is "summarize" when one of them is, else
    the last one that is not a finish)."""
    note: str | None = None
    """The compaction block's text (its ledger and trail apart), as the next compaction finds
    it."""
    dropped: SummaryTask | None = None
    """What the compaction removed with no summary covering it, as a summary to write later
    (folded into the next compaction under `note`'s key)."""
    notes: frozenset[str] = frozenset()
    """The digests of the proxy's notes in `messages` (for the checkpoint to keep)."""
    recalls: Mapping[str, tuple[Message, ...]] = field(default_factory=dict)
    """What each recall id the new messages name stands for (`Situation.recall`): the
    messages as the plan had them when it removed them (a span evicted after its results
    were cleared holds their placeholders, whose ids are here too), for the store to
    resolve a `context_recall`."""
    block: str | None = None
    """The newest compaction block as written (ledger and trail included), as it stands in
    `messages` (alone, or merged into a user message); None when no step wrote one."""

    @property
    def covers(self) -> str | None:
        """The span key a summary of `dropped` also stands for (a summary of the whole span
        the compaction was asked to summarize), if it does."""
        return self.dropped.keys[-1] if self.dropped and self.dropped.keys else None


@dataclass(frozen=True, slots=True)
class SummaryTask:
    """A summary to write: `span` folded into `previous` (the summary before it)."""

    span: tuple[Message, ...]
    previous: str | None
    model: str | None
    max_tokens: int
    tools: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    """The span key through each message of `span` in its conversation (`NeedsSummary.keys`):
    a summary found under one covers `span` up to that message (and `previous` with it).
    Empty when the span is not one a compaction was asked to summarize."""
    prefix: Prefix | None = None
    """The conversation as it was forwarded through the span's end (`NeedsSummary.prefix`),
    for a summary request the provider's cache serves; None when it is not known. A task
    `after` a summary of the span's start keeps it: the span still ends there."""
    recall: str | None = None
    """The recall id the truncation marker this summary will replace names: the summary
    names it too, so what it condenses stays one recall away."""

    def after(self, count: int, previous: str) -> SummaryTask:
        """The task left when a summary (`previous`) covers the first `count` messages."""
        return replace(self, span=self.span[count:], previous=previous, keys=self.keys[count:])

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]:
        """The summarizer request for one part of the span (when it is summarized in parts,
        each part folds in the summary of the parts before it)."""
        return summary_request(
            part, previous=previous, model=self.model, max_tokens=self.max_tokens
        )

    def note(self, summary: str) -> str:
        """`summary` as the note that stands for the span (what a later compaction folds)."""
        return summary_text(summary, condensed=len(self.span), tools=self.tools, recall=self.recall)


@dataclass(frozen=True, slots=True)
class NeedsSummary:
    """The span to summarize and the request to send; finish with `complete` or `fallback`
    (once: the plan's work goes on from there)."""

    request: dict[str, Any]
    span: tuple[Message, ...]
    _eviction: _Eviction
    anchor: str | None
    """The note the span follows in the conversation (what its keys are chained from)."""

    @property
    def previous(self) -> str | None:
        """The earlier summary the new one must fold in, if any."""
        return self._eviction.previous

    @property
    def keys(self) -> list[str]:
        """The key of each prefix of the span, shortest first (`proxy.core.prepared`)."""
        return span_keys(self.anchor, self.span)

    @property
    def max_tokens(self) -> int:
        """The summary's allowance."""
        return self._eviction.work.allowances.summary

    @property
    def prefix(self) -> Prefix | None:
        """The conversation as the plan was given it (as it was forwarded) through the span's
        end: what the provider's prompt cache holds, for a summary request it serves.

        The span was cut from the plan's own copy, where trimmed and cleared results keep
        their places: the span's end is the same index in both. None when an earlier step
        removed messages (old turns shrunk to their question and answer): it is not then.
        """
        eviction = self._eviction
        work = eviction.work
        given = work.situation.messages
        if [role(m) for m in eviction.messages] != [role(m) for m in given]:
            return None
        messages = tuple(given[: eviction.stop])
        body = work.situation.body
        if work.situation.recall is not None and not recall.named(given):
            # Offered only once a compaction named an id: not in what was forwarded so far.
            body = recall.without_tool(body)
        return Prefix(
            prefix_fields(body),
            messages,
            work.counter.messages(messages) + work.counter.tools(body),
            after_task=any(not is_instruction(m) for m in messages[: eviction.start]),
        )

    def task(self, covered: int = 0, previous: str | None = None) -> SummaryTask:
        """The summary to write of the span after its first `covered` messages, folding in
        `previous` (the summary of those) or, with none covered, the earlier summary."""
        work = self._eviction.work
        return SummaryTask(
            self.span[covered:],
            previous if covered else self.previous,
            _model(work.situation.body),
            work.allowances.summary,
            tuple(offered_tools(work.situation.body)),
            prefix=self.prefix,
        )

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]:
        """The summarizer request for one part of the span (see `SummaryTask.request_for`)."""
        return self.task().request_for(part, previous)

    def fact_sources(self) -> list[Message]:
        """The messages whose facts `complete` checks the summary against. Finding them
        ahead (`Mentions.facts`, where the summary is prepared) spares the compaction turn
        that work: it was most of a summarizing turn's time, on the event loop."""
        return _fact_sources(self._eviction.evicted, self.previous)

    def rolled(self, note: str) -> NeedsSummary:
        """This plan with `note` as the earlier summary instead of the one the conversation
        holds (the summary written later of what that one's compaction dropped)."""
        return replace(self, _eviction=replace(self._eviction, previous=note))

    def complete(self, summary: str, covered: int | None = None) -> Compacted:
        """The conversation with the span, or its first `covered` messages (a summary
        prepared before the span grew), replaced by `summary` plus what it lost; the rest of
        the span is landed like any conversation above its target."""
        eviction = self._eviction
        if covered is not None and covered < len(self.span):
            shorter = eviction.first(covered)
            if shorter is None:
                return self.fallback()
            eviction = shorter
        work = eviction.work
        kept = eviction.ledger()
        replaced = eviction.replaced()
        clipped = _without(_clipped(summary, work.allowances.summary, work.counter.text), replaced)
        sources = _fact_sources(eviction.evicted, self.previous)
        # What the ledger or the trail lists, the appendix need not list again; nor what the
        # user has since replaced ("$500" after "Budget: $700").
        trail = eviction.trail()
        known = [*(s.text for s in kept), *trail, *replaced]
        checked = _with_lost_facts(clipped, sources, known, work)
        tools = offered_tools(work.situation.body)
        note = summary_text(
            checked, condensed=eviction.condensed, tools=tools, recall=eviction.recall()
        )
        eviction.apply(note, "summarize", kept, trail)
        _land(work)
        return self._finished()

    def fallback(self) -> Compacted:
        """The conversation truncated instead (no summary of the span is at hand)."""
        eviction = self._eviction
        eviction.apply(eviction.marker(), "truncate")
        _land(eviction.work)
        return self._finished()

    def _finished(self) -> Compacted:
        result = self._eviction.work.result()
        dropped = result.dropped
        # What was dropped is the span's end: its summary, rolled over the summary of the
        # span's start (or the earlier one), is a summary of the whole span.
        if dropped is None or self.span[len(self.span) - len(dropped.span) :] != dropped.span:
            return result
        keys = tuple(self.keys[len(self.span) - len(dropped.span) :])
        return replace(result, dropped=replace(dropped, keys=keys, prefix=self.prefix))


Plan = Unchanged | Compacted | NeedsSummary


def _fact_sources(evicted: Sequence[Message], previous: str | None) -> list[Message]:
    """The messages whose facts a summary of `evicted` must keep (folding in `previous`)."""
    # A cleared result's facts went with it (its size is no fact); the names it kept stay.
    sources: list[Message] = [
        {"role": "tool", "content": names_kept(m)} if is_cleared(m) else m for m in evicted
    ]
    # The earlier summary's facts count too: a rolling summary that drops one loses it for
    # good, since the turns it came from are gone.
    if previous:
        sources.insert(0, {"role": "assistant", "content": previous})
    return sources


def plan_compaction(
    situation: Situation, counter: Counter, mentions: Mentions | None = None
) -> Plan:
    """Decide what to forward for `situation`.

    `mentions` remembers what each message mentions across plans (the service keeps one for
    the life of the process); without it the plan finds each message's once, for itself.
    """
    tokens = counter.messages(situation.messages) + counter.tools(situation.body)
    if not is_well_formed(group_units(situation.messages)):
        # Malformed input is the client's to fix: forwarded as sent, never silently repaired.
        return Unchanged("malformed", tokens)
    reason = _reason_to_wait(situation, tokens, situation.fixed(counter))
    if reason is not None:
        return Unchanged(reason, tokens)
    # Only now the work that reads the whole conversation (its statements, its pins).
    work = _Work(situation, counter, list(situation.messages), _mentions(mentions))
    for layer in _layers(situation):
        outcome = layer(work)
        if outcome is not None:
            return outcome
    _land(work)
    return work.result() if work.steps else Unchanged("nothing_to_remove", work.before)


def _layers(situation: Situation) -> tuple[_Layer, ...]:
    layers = _LAYERS[situation.policy.strategy]
    if not situation.whole:
        return layers
    # A client's compaction condenses everything into the block, whatever the strategy (what
    # is not in it is gone from the client's history): from the original messages, since
    # nothing is left to trim or clear, summarized where the strategy summarizes.
    return (_summarize_layer, _truncate_layer) if _summarize_layer in layers else (_truncate_layer,)


def _mentions(mentions: Mentions | None) -> Mentions:
    return Mentions() if mentions is None else mentions


def _reason_to_wait(situation: Situation, tokens: int, fixed: float) -> str | None:
    if situation.force:
        return None
    budget, policy = situation.budget, situation.policy
    fits = budget.fits(tokens)
    if not policy.auto_compact:
        return "auto_compact_off"
    if budget.pressure(tokens) < in_room(policy.compression_trigger, fixed):
        return "under_trigger"
    cooling = situation.turns_since_compaction is not None and (
        situation.turns_since_compaction < policy.cooldown_turns
    )
    # A request that cannot fit at all is compacted even in cooldown.
    return "cooldown" if cooling and fits else None


@dataclass(slots=True)
class _Work:
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
        fixed = situation.fixed(self.counter)
        self.allowances = Allowances.of(situation.budget, situation.policy, fixed)
        self.pin_task = self.situation.policy.pin_first_user
        self.tools = self.counter.tools(self.situation.body)
        beside = situation.beside
        self.beside = 0 if beside is None else self.counter.message(beside)
        self.before = self.total() - self.beside
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
        # they need it (a small window's allowance holds a dozen of them); chatter never, and
        # nothing in an emergency, which must land at its own, lower target.
        allowance = allowances.ledger
        if self.target_override is None:
            needed = ledger.cost(ledger.above_chatter(everything), count)
            allowance = max(allowance, min(needed, allowance * 3 // 2))
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
        self.block_budget = self.ledger_budget + self.trail_budget + summary + _NOTE_OVERHEAD

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
        found = (i for i in range(len(self.messages) - 1, -1, -1) if self._is_working(i))
        at = next(found, None)
        # Asked of every message a step looks at: found once per list of messages (each step
        # makes a new one), and the list kept, so its id is not reused.
        self._working_seen = (self.messages, at)
        return at

    def _is_working(self, index: int) -> bool:
        # A block merged into the copy (opening it, where roles must alternate) is no part
        # of what the client sent.
        message = self.messages[index]
        if role(message) != "user":
            return False
        return digest(self.detach_notes(message)[0]) in self.situation.working

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
        return self.counter.messages(self.messages) + self.tools + self.beside

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
                _model(body),
                self.allowances.summary,
                tuple(offered_tools(body)),
                recall=self.dropped_recall,
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


# --- The strategy's layers -------------------------------------------------------------------


def _trim_layer(work: _Work) -> Plan | None:
    policy, budget = work.situation.policy, work.situation.budget
    cap = int(budget.context_window * policy.tool_result_max_share)
    _cap_messages(work, cap, is_tool_result, "trim_tool_results")
    return work.outcome()


def _cap_messages(work: _Work, cap: int, eligible: Callable[[Message], bool], step: str) -> None:
    messages = list(work.messages)
    for index, message in enumerate(work.messages):
        if not eligible(message) or is_trimmed(message) or work.holds_note(message):
            continue
        tokens = work.counter.message(message)
        if tokens > cap:
            name = work.tool_name(index)
            trimmed = trim(
                message,
                max_tokens=cap,
                count=work.counter.text,
                tool_name=name,
                names=_names(work, message),
                recall=work.recall_of([message]),
            )
            # A result barely over a small cap would grow by the note: keep it whole then.
            if work.counter.message(trimmed) < tokens:
                messages[index] = trimmed
    work.update(messages, step)


def _clear_layer(work: _Work) -> Plan | None:
    # Every old result goes once one has to: the provider's prompt cache is lost from the
    # first cleared result on anyway, so clearing only what reaches the target would pay
    # that miss again a few turns later for the next few (Anthropic's context editing
    # `clear_at_least` answers the same trade-off).
    messages = list(work.messages)
    for index in range(work.pins.recent):
        message = messages[index]
        if is_tool_result(message) and not is_cleared(message):
            tokens = work.counter.message(message)
            names = work.mentions.names(message)  # found once per result, not per clearing
            rid = work.recall_of([message])
            placeholder = clear(message, work.tool_name(index), tokens, names, rid)
            if work.counter.message(placeholder) < tokens:  # a short result stays whole
                messages[index] = placeholder
    _cut_pastes(work, messages, range(work.pins.recent))
    work.update(messages, "clear_tool_results")
    return work.outcome()


def _cut_pastes(work: _Work, messages: list[Message], indices: range) -> None:
    """Cut what the user pasted in messages `indices` (never the running turn's) to head and
    tail, as old tool results are cleared: a paste is data, and its id recalls it whole.
    The user's words beside it stay as they were."""
    for index in indices:
        if _holds_paste(work, index):
            messages[index] = _paste_cut(work, index, _PASTE_KEPT)


def _holds_paste(work: _Work, index: int) -> bool:
    """Whether message `index` is a user message (not the running turn's, not the working
    set's latest copy) whose paste a cut would make smaller."""
    message = work.messages[index]
    return (
        role(message) == "user"
        and index != work.pins.running
        and index != work.working_at()
        and isinstance(message.get("content"), str)
        and not work.holds_note(message)
        and any(s.rank == ledger.PASTE for s in work.mentions.statements(message, False))
        and not pastes.is_cut(text(message))
    )


def _paste_cut(work: _Work, index: int, size: int) -> Message:
    """Message `index` with its pastes cut so that it takes about `size` tokens (never less
    than its words)."""
    message = work.messages[index]
    body = text(message)
    cut = pastes.cut(body, size, work.counter.text, work.recall_of([message]))
    if cut == body or work.counter.text(cut) >= work.counter.text(body):
        return message
    return {**message, "content": cut}


def _summarize_layer(work: _Work) -> Plan | None:
    # A summary condenses everything before the recent window, not just enough to reach
    # the target: the provider's prompt cache is lost from the span's start on either way,
    # so a deeper summary costs no more cache and puts the next one many turns further off.
    allowances = work.allowances
    eviction = _Eviction.find(work, deep=True, note_tokens=allowances.summary + _NOTE_OVERHEAD)
    if eviction is None:
        return None
    request = summary_request(
        eviction.evicted,
        previous=eviction.previous,
        model=_model(work.situation.body),
        max_tokens=allowances.summary,
    )
    return NeedsSummary(request, eviction.evicted, eviction, eviction.previous)


def _truncate_layer(work: _Work) -> Plan | None:
    eviction = _Eviction.find(work, deep=work.situation.force, note_tokens=_NOTE_OVERHEAD)
    if eviction is None:
        return None
    eviction.apply(eviction.marker(), "truncate")
    return work.outcome()


def _shrink_turns_layer(work: _Work) -> Plan | None:
    budget = work.situation.policy.max_context_turns
    if budget:
        work.update(shrink_old_turns(work.messages, budget, work.pins), "max_context_turns")
        return work.outcome()
    return None


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


# --- Landing ---------------------------------------------------------------------------------


def _land(work: _Work) -> None:
    """Bring `work` to its target by the fixed order of reductions, each only while it is
    still above, as far as that is possible."""
    steps = (_clear_rest, _truncate_rest, _release_task, _trim_recent, _fit_block)
    for step in (*steps, _release_running, _fit_block, _cap_recent, _shed_block, _fit_earlier):
        if work.done():
            return
        step(work)


def _clear_rest(work: _Work) -> None:
    _clear_layer(work)


def _truncate_rest(work: _Work) -> None:
    _evict_everything(work)


def _release_task(work: _Work) -> None:
    """Let the pinned task go too: its words are then carried by the ledger. Not when the
    task is the running turn's user message (an agent's first turn): that stays in place."""
    first = work.pins.first_user
    if first is None or first >= work.pins.recent or first == work.pins.running:
        return
    work.pin_task = False
    work.regroup()
    if _evict_everything(work):
        work.steps.append("release_task")


def _evict_everything(work: _Work) -> bool:
    """Truncate everything before the recent window; whether anything went."""
    eviction = _Eviction.find(work, deep=True, note_tokens=0)
    if eviction is None:
        return False
    steps = len(work.steps)
    eviction.apply(eviction.marker(), "truncate")
    return len(work.steps) > steps


def _release_running(work: _Work) -> None:
    """With nothing older left to go and its results cut, a running turn still over the usable
    input is windowed like the rest: its oldest rounds go (its user's words to the ledger, its
    calls to the block's list). Over the target alone, it is what must stay: forwarded with its
    rounds cut, above the target, every call still in place (a folded round an agent cannot
    read back is a round it runs again)."""
    if work.pins.running is None or work.total() <= work.allowances.limit:
        return
    work.keep_running = False
    work.regroup()
    if _evict_everything(work):
        work.steps.append("release_running")


def _shed_block(work: _Work) -> None:
    """Last, when nothing else reached the target and the block names the recall id of what
    it stands for: `_fit_block` down to the ledger's rules and no trail. What the block
    lists verbatim is then a recall away, and a block that stays whole lands above the
    target on every request after it (a client's compaction beside a large user message,
    `Situation.beside`)."""
    if work.situation.recall is not None:
        _fit_block(work, shed=True)


def _fit_block(work: _Work, *, shed: bool = False) -> None:
    """Shorten the block written in this compaction to the room what must stay leaves it
    (the running turn's user message can take most of a small window): first its summary's
    last lines (the part any summarizer could write), then the trail's paths and the
    ledger's chatter, each part in proportion to its size, only as far as the target still
    needs, and only when that reaches it (`shed`: the trail's ids and the ledger's
    specifics and task too, see `_shed_block`)."""
    fitted = _fit_note(work, work.block, shed=shed)
    if fitted is not None:
        work.note, work.block = fitted


def _fit_earlier(work: _Work) -> None:
    """Last of all, the newest note of an earlier compaction shortened as `_fit_block`
    shortens this one's (shed too, with recall), when that alone reaches the target: one
    that stands inside the running turn (a client's compaction block, which the client
    keeps after its latest user message) or alone before it cannot be evicted, and the turn
    grows by a round a request."""
    notes = (
        work.note_of(m) or next(iter(work.detach_notes(m)[1][-1:]), None) for m in work.messages
    )
    earlier = [note for note in notes if note is not None and note != work.block]
    if not earlier:
        return
    if _fit_note(work, earlier[-1]) is None and work.situation.recall is not None:
        _fit_note(work, earlier[-1], shed=True)


def _fit_note(work: _Work, block: str | None, *, shed: bool = False) -> tuple[str, str] | None:
    """`_fit_block` of `block`: its shortened text (ledger and trail apart) and whole, once
    it stands in the conversation in place of `block`; None when it stayed as it was."""
    found = _block_index(work, block)
    if block is None or found is None:
        return None
    count = work.counter
    excess = work.total() - work.target

    def fitted_to(excess: int) -> tuple[str, str, list[Message], int]:
        note, fitted = _fitted(block, excess, count.text, shed=shed)
        messages = list(work.messages)
        messages[found] = replace_note(messages[found], block, fitted)
        over = count.messages(messages) + work.tools + work.beside - work.target
        return note, fitted, messages, over

    # A block that cannot be made small enough stays whole: the request lands above the
    # target (it still fits), and nothing the block carries is lost for no gain.
    barest = fitted_to(work.total())
    if barest[3] > 0:
        return None
    for _ in range(_CUT_ATTEMPTS):
        note, fitted, messages, over = fitted_to(excess)
        # Each part's saving is counted apart; the message as a whole can count a little
        # more (tokens merge differently at the joins): the overshoot is cut again, and
        # short of the target after a few tries the barest block is taken.
        if over <= 0:
            break
        excess += over
    else:
        note, fitted, messages, _ = barest
    work.notes.add(note_digest(fitted))
    work.update(messages, "fit_block")
    return note, fitted


def _fitted(
    block: str, excess: int, count: Callable[[str], int], *, shed: bool = False
) -> tuple[str, str]:
    """`block` less `excess` tokens where it can be (see `_fit_block`): its text without
    ledger and trail, and the block."""
    rest, kept = ledger.without_ledger(block)
    note, trail = artifacts.without_trail(rest)
    shortened = _shortened(note, count(note) - excess, count)
    excess -= count(note) - count(shortened)
    if excess > 0:
        # The rest from the trail and the ledger in proportion to their sizes: each keeps
        # what ranks first in it (the ids and the leading paths; the user's rules,
        # constraints and specifics), and each loses its least first (other paths, chatter).
        # Neither gives what only it carries: the trail keeps its ids, hashes, versions and
        # error codes, the ledger the user's rules, specifics and task.
        trail_cost, ledger_cost = artifacts.cost(trail, count), ledger.cost(kept, count)
        from_trail = math.ceil(excess * trail_cost / max(trail_cost + ledger_cost, 1))
        least = 0 if shed else artifacts.cost(artifacts.identifiers(trail), count)
        trail = artifacts.selected(trail, max(trail_cost - from_trail, least), count)
        floor = ledger.rules(kept) if shed else ledger.above_chatter(kept)
        least = ledger.cost(floor, count)
        kept = ledger.selected(kept, max(ledger_cost - (excess - from_trail), least), count)
    return shortened, ledger.with_ledger(artifacts.with_trail(shortened, trail), kept)


def _block_index(work: _Work, block: str | None) -> int | None:
    """Where `block` stands in the conversation (alone or merged into a message), if it does."""
    for index, message in enumerate(work.messages):
        standalone = work.note_of(message)
        if block in ([standalone] if standalone is not None else work.detach_notes(message)[1]):
            return index
    return None


def _shortened(note: str, room: int, count: Callable[[str], int]) -> str:
    """`note` (a marker or a summary, without its ledger and trail) within `room` tokens
    where it can be: its body's last lines go; its first paragraph (how many messages it
    stands for) and its closing line (the tools the model can call) stay."""
    header, _, body = note.partition("\n\n")
    if count(note) <= room or not body:
        return note
    closing = ""
    at = f"\n\n{body}".rfind(f"\n\n{TOOLS_REMINDER}")
    if at != -1:
        body, closing = body[: max(at - 2, 0)], body[at:]
    left = room - count(header) - count(closing)
    lines = _clipped(body, max(left, 0), count).rstrip().splitlines()
    # A heading whose lines all went goes too ("Files and paths:" over nothing).
    while lines and (lines[-1].startswith("#") or lines[-1].endswith(":")):
        lines.pop()
    return "\n\n".join(part for part in (header, "\n".join(lines), closing) if part)


def _trim_recent(work: _Work) -> None:
    """Cut the recent window's tool results (the running turn's, the one the user asks about)
    to head and tail, the oldest first, until the target is reached: the newest results are
    cut, never cleared or dropped. (A paste the window holds fits it: the window is bounded
    by the room the target leaves, and a paste is never the newest unit or the running
    turn's tool exchange, the two it holds whatever their size.)"""
    start = min(work.pins.recent, len(work.messages))
    working = work.working_at()
    results = [
        i for i in range(start, len(work.messages)) if i != working and _worth_cutting(work, i)
    ]
    if results:
        _cut_oldest_first(work, results, "trim_recent", work.target)


def _worth_cutting(work: _Work, index: int) -> bool:
    """Whether message `index` is a tool result a cut would make smaller by more than its
    note: one hardly bigger than a cut's note and least text stays whole."""
    message = work.messages[index]
    return is_tool_result(message) and work.counter.message(message) > NOTE_ALLOWANCE + 2 * _MIN_CUT


def _cut_oldest_first(work: _Work, indices: list[int], step: str, goal: int) -> None:
    """Cut messages `indices` to head and tail, the oldest first and each only as far as
    `goal` still needs: the newest result is the last to be cut. Short of the goal with all
    of them cut, the conversation lands as low as cutting takes it (landing just under the
    usable input would leave it over the trigger, to be compacted again on the next turn)."""
    count = work.counter.message
    total = work.total()
    messages = list(work.messages)
    for index in indices:
        tokens = count(messages[index])
        wanted = tokens - (total - goal)
        if total <= goal or tokens <= max(wanted, _MIN_CUT):
            continue
        cut = _cut_to(work, index, max(wanted, _MIN_CUT))
        saved = tokens - count(cut)
        # A cut barely under its note's size can come out no smaller: the message stays whole.
        messages[index] = cut if saved > 0 else messages[index]
        total -= max(saved, 0)
    work.update(messages, step)


def _cut_to(work: _Work, index: int, size: int) -> Message:
    """Message `index` cut to head and tail at about `size` tokens: a cut lands near its
    size, not on it (characters per token vary along a text), so one that overshoots is
    made again from the original, smaller by the overshoot."""
    original, cap, attempts = work.messages[index], size, 1
    name = work.tool_name(index)
    names = _names(work, original)
    rid = work.recall_of([original])
    count = work.counter.text
    cut = trim(original, max_tokens=cap, count=count, tool_name=name, names=names, recall=rid)
    over = work.counter.message(cut) - size
    while over > 0 and cap > _MIN_CUT and attempts < _CUT_ATTEMPTS:
        cap, attempts = max(cap - over, _MIN_CUT), attempts + 1
        cut = trim(original, max_tokens=cap, count=count, tool_name=name, names=names, recall=rid)
        over = work.counter.message(cut) - size
    return cut


def _names(work: _Work, message: Message) -> Sequence[str] | None:
    """The names a cut of `message` lists when it cuts them away: a tool result's are found
    once (`work.mentions`); any other message's, by the cut itself."""
    return work.mentions.names(message) if is_tool_result(message) else None


def _cap_recent(work: _Work) -> None:
    """Cut the text of the recent messages, only as far as fitting needs: the user's own
    newest words are never cut just to reach a target, and the working set's latest copy
    only when nothing else left fits the window."""
    goal = work.target if work.target_override is not None else work.allowances.limit
    working = work.working_at()
    for last_resort in (False, True):
        indices = [
            i
            for i in range(work.pins.recent, len(work.messages))
            if _cappable(work, i) and (last_resort or i != working)
        ]
        if indices and work.total() > goal:
            _cut_oldest_first(work, indices, "cap_recent", goal)


def _cappable(work: _Work, index: int) -> bool:
    message = work.messages[index]
    return (
        index != work.pins.running  # what the model answers now goes as the user sent it
        and not is_instruction(message)
        and isinstance(message.get("content"), str)
        and not is_trimmed(message)
        and not work.holds_note(message)
    )


# --- Eviction --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Eviction:
    """The oldest unpinned units to replace with one note, and the note they already had.

    The span starts after the leading instructions and the pinned task and never reaches
    into the recent window. An earlier note, standalone in the span or merged into a user
    message, is taken out and folded into the new one instead of piling up: its summary
    becomes the previous summary, its ledger the start of the new ledger, its artifact trail
    the end of the new trail.
    """

    work: _Work
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
    def find(cls, work: _Work, *, deep: bool, note_tokens: int) -> _Eviction | None:
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

    def marker(self) -> str:
        """The truncation marker that stands for the span."""
        return marker(self.condensed, self.previous, self.recall())

    def first(self, count: int) -> _Eviction | None:
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
        turn listed, then the span's, when the span is the turn's own rounds (none when it is
        older: what was done in an earlier turn is the summary's and the trail's)."""
        work = self.work
        running = work.pins.running
        if running is None or self.start <= running:
            return []
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
                work.dropped += self.evicted
                named = recall.ids_in(note)
                work.dropped_recall = named[0] if named else None


def _running_calls(work: _Work) -> tuple[str, ...]:
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


def _enough(work: _Work, messages: list[Message], sizes: list[int], note_tokens: int) -> int:
    """How many of the oldest candidate units to take to bring `work` to its target."""
    need = work.counter.messages(messages) + work.tools - work.target + note_tokens
    need += work.ledger_budget + work.trail_budget
    taken, freed = 0, 0
    while taken < len(sizes) and freed < need:
        freed += sizes[taken]
        taken += 1
    return max(taken, 1)


def _detached(
    work: _Work,
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
    work: _Work, messages: list[Message], candidates: Sequence[Unit], sizes: list[int]
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


# --- The summary's facts ---------------------------------------------------------------------


def _clipped(summary: str, allowance: int, count: Callable[[str], int]) -> str:
    """`summary` within `allowance` tokens: whole lines from the start (a summarizer that
    ignores `max_tokens` must not push the compaction above its target)."""
    if count(summary) <= allowance:
        return summary
    lines = summary.splitlines()
    used = itertools.accumulate(count(line) + 1 for line in lines)
    return "\n".join(line for line, upto in zip(lines, used, strict=True) if upto <= allowance)


def _without(summary: str, replaced: Sequence[str]) -> str:
    """`summary` without the lines that quote a statement the user has since replaced: an
    extractive summary repeats "Budget: $500" word for word, beside the ledger's "$700"."""
    if not replaced:
        return summary
    lines = summary.splitlines()
    return "\n".join(line for line in lines if not any(old in line for old in replaced))


def _with_lost_facts(
    summary: str, sources: list[Message], known: Sequence[str], work: _Work
) -> str:
    """`summary` with the span's facts that neither it nor the rest of the block (`known`:
    the ledger's statements, the trail's names) states appended verbatim, within the facts
    allowance (the best-ranked facts first)."""
    allowance, count = work.allowances.facts, work.counter.text
    stated = "\n".join([summary, *known])
    # Each message's facts are found once (and remembered across compactions); only the
    # bounding is done again for each smaller appendix tried.
    ranked = [work.mentions.facts(message) for message in sources]
    chars = allowance * 4
    while True:
        lost = missing_facts(ledger_of(ranked, max_chars=chars), stated)
        text = appendix(lost)
        if count(text) <= allowance or chars == 0:
            break
        chars //= 2
    body = summary.rstrip()
    return "\n\n".join(part for part in (body, text) if part)


# --- The emergency plan ----------------------------------------------------------------------


def plan_emergency(
    situation: Situation,
    counter: Counter,
    *,
    stated_limit: int | None = None,
    mentions: Mentions | None = None,
) -> Compacted | Unchanged:
    """Compact hard, with no LLM call, after the provider said the request overflowed.

    Keeps half the usual recent window, caps any single tool result or text message, clears
    old tool results and truncates, until the request is at most half the size of the
    rejected one, and fits the limit the error stated if it stated one. `Unchanged` when
    nothing could be removed: the service then returns the provider's error as it came.
    `mentions` as for `plan_compaction`.
    """
    policy = situation.policy.replace(keep_recent=situation.policy.keep_recent // 2)
    hard = replace(situation, policy=policy, turns_since_compaction=None, force=True)
    work = _Work(hard, counter, list(situation.messages), _mentions(mentions), summarizes=False)
    if not is_well_formed(work.units):
        return Unchanged("malformed", work.before)
    work.target_override = _emergency_target(work, stated_limit)
    # The block's allowances were sized for the usual target; the emergency lands far lower
    # (half the rejected request, or the stated limit), so its ledger gets the same share of
    # that target as of the usual one, or the ledger alone could push the retry over.
    scaled = int(work.target * situation.policy.ledger_share / situation.policy.compaction_target)
    work.allowances = replace(work.allowances, ledger=min(work.allowances.ledger, scaled))
    # The trail too, with its floor (at most an eighth of the target): it is the only carrier
    # of what the removed tool results said.
    share = int(work.target * ARTIFACTS_SHARE / situation.policy.compaction_target)
    trail = max(min(ARTIFACTS_FLOOR, work.target // 8), share)
    work.allowances = replace(work.allowances, artifacts=min(work.allowances.artifacts, trail))
    work.size_block()
    work.regroup()
    budget = situation.budget
    cap = min(int(budget.context_window * policy.tool_result_max_share), work.target // 2)
    # What the model answers now goes as the user sent it, even here: a request its running
    # ask alone overflows gets the provider's error, not a cut of the user's words.
    running = None if work.pins.running is None else work.messages[work.pins.running]

    def cappable(message: Message) -> bool:
        return message is not running and _emergency_cappable(message)

    _cap_messages(work, max(cap, 1), cappable, "emergency")
    _land(work)
    if not work.steps:
        return Unchanged("nothing_to_remove", work.before)
    return replace(work.result(), strategy="emergency")


def _emergency_target(work: _Work, limit: int | None) -> int:
    """Half the rejected request, or what fits the stated limit (a window in the provider's
    tokens, which the calibration converts), whichever is smaller."""
    target = work.before // 2
    if limit is not None:
        budget = work.situation.budget
        stated = Budget(limit, min(budget.output_reserve, limit - 1), budget.calibration)
        target = min(target, stated.tokens_at(1.0))
    return target


def _emergency_cappable(message: Message) -> bool:
    # Instructions are never cut; multimodal content is not flattened to text.
    return is_tool_result(message) or (
        not is_instruction(message) and isinstance(message.get("content"), str)
    )


_Layer = Callable[[_Work], Plan | None]

_LAYERS: dict[str, tuple[_Layer, ...]] = {
    "auto": (_shrink_turns_layer, _trim_layer, _clear_layer, _summarize_layer, _truncate_layer),
    "trim_tool_results": (_shrink_turns_layer, _trim_layer),
    "clear_tool_results": (_shrink_turns_layer, _clear_layer),
    "summarize": (_shrink_turns_layer, _summarize_layer),
    "truncate": (_shrink_turns_layer, _truncate_layer),
}
