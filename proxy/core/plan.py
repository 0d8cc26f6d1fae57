"""The compaction plan: what a conversation becomes before it is forwarded.

`plan_compaction` looks at a request and returns a decision, never performing anything:

- `Unchanged`: forward as is (under the trigger, in cooldown, malformed, nothing to remove);
- `Compacted`: forward these messages instead;
- `NeedsSummary`: ask the summarizer with `request`, then call `complete(summary)` (or
  `fallback()` if the summarizer failed) to get the `Compacted` result.

Layers run cheapest first and stop as soon as the conversation is under the target
(`compaction_target`, below the trigger, so the new prefix lasts many turns):

1. trim a single tool result over `tool_result_max_share` of the window;
2. clear old tool results outside the recent window, oldest first;
3. summarize the oldest unpinned units (the summary is rolling: an earlier one in the span
   is folded in), checked against the span's fact ledger;
4. truncate the oldest unpinned units, leaving one "[N earlier messages omitted]" marker.

`context.strategy` picks one layer alone instead of all (`auto`). With
`max_context_turns`, turns older than the budget first shrink to their question and answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from proxy.core.budget import Budget
from proxy.core.ledger import extract_facts, with_missing_facts
from proxy.core.messages import Message, is_instruction, role, tool_call_name
from proxy.core.policy import ContextPolicy
from proxy.core.splice import splice
from proxy.core.summary import (
    detach_note,
    marker,
    note_of,
    offered_tools,
    summary_request,
    summary_text,
)
from proxy.core.tool_results import clear, is_cleared, is_tool_result, is_trimmed, trim
from proxy.core.turns import shrink_old_turns
from proxy.core.units import Pins, Unit, group_units, is_well_formed, pins

# What a marker or a summary message costs beyond its text (role, framing).
_NOTE_OVERHEAD = 16


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
    """Compact now whatever the pressure and cooldown (a manual `/compact`, a hook)."""


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
    """Whether the result fits the window (the plan did what it could if not)."""


@dataclass(frozen=True, slots=True)
class NeedsSummary:
    """The span to summarize and the request to send; finish with `complete` or `fallback`."""

    request: dict[str, Any]
    span: tuple[Message, ...]
    _eviction: _Eviction

    @property
    def previous(self) -> str | None:
        """The earlier summary the new one must fold in, if any."""
        return self._eviction.previous

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]:
        """The summarizer request for one part of the span (when it is summarized in parts,
        each part folds in the summary of the parts before it)."""
        situation = self._eviction.work.situation
        return summary_request(
            part,
            previous=previous,
            model=_model(situation.body),
            max_tokens=situation.policy.summary_max_tokens,
        )

    def complete(self, summary: str) -> Compacted:
        """The conversation with the span replaced by `summary` (plus what it lost)."""
        eviction = self._eviction
        # The earlier summary's facts count too: a rolling summary that drops one loses it
        # for good, since the turns it came from are gone.
        sources = list(self.span)
        if self.previous:
            sources.insert(0, {"role": "user", "content": self.previous})
        checked = with_missing_facts(summary, extract_facts(sources))
        tools = offered_tools(eviction.work.situation.body)
        note = summary_text(checked, condensed=len(self.span), tools=tools)
        return eviction.apply(note, "summarize")

    def fallback(self) -> Compacted:
        """The conversation truncated instead (the summarizer failed or timed out)."""
        eviction = self._eviction
        return eviction.apply(marker(len(self.span), eviction.previous), "truncate")


Plan = Unchanged | Compacted | NeedsSummary


def plan_compaction(situation: Situation, counter: Counter) -> Plan:
    """Decide what to forward for `situation`."""
    work = _Work(situation, counter, list(situation.messages))
    if not is_well_formed(work.units):
        # Malformed input is the client's to fix: forwarded as sent, never silently repaired.
        return Unchanged("malformed", work.before)
    reason = _reason_to_wait(situation, work.before)
    if reason is not None:
        return Unchanged(reason, work.before)
    for layer in _LAYERS[situation.policy.strategy]:
        outcome = layer(work)
        if outcome is not None:
            return outcome
    if work.changed:
        return work.result(work.last_layer)
    return Unchanged("nothing_to_remove", work.before)


def _reason_to_wait(situation: Situation, tokens: int) -> str | None:
    if situation.force:
        return None
    budget, policy = situation.budget, situation.policy
    fits = budget.fits(tokens)
    if not policy.auto_compact:
        return "auto_compact_off"
    if budget.pressure(tokens) < policy.compression_trigger:
        return "under_trigger"
    cooling = situation.turns_since_compaction is not None and (
        situation.turns_since_compaction < policy.cooldown_turns
    )
    # A request that cannot fit at all is compacted even in cooldown.
    return "cooldown" if cooling and fits else None


@dataclass(slots=True)
class _Work:
    """A conversation being compacted, layer after layer."""

    situation: Situation
    counter: Counter
    messages: list[Message]
    changed: bool = False
    last_layer: str = ""
    before: int = 0
    tools: int = 0
    units: tuple[Unit, ...] = ()
    pins: Pins = field(init=False)
    target_override: int | None = None
    """A fixed token target (the emergency plan's) instead of `compaction_target`'s."""

    def __post_init__(self) -> None:
        self.tools = self.counter.tools(self.situation.body)
        self.before = self.total()
        self._regroup()

    def _regroup(self) -> None:
        self.units = group_units(self.messages)
        policy = self.situation.policy
        self.pins = pins(
            self.messages,
            self.units,
            keep_recent=policy.keep_recent,
            pin_first_user=policy.pin_first_user,
        )

    def total(self) -> int:
        return self.counter.messages(self.messages) + self.tools

    @property
    def target(self) -> int:
        if self.target_override is not None:
            return self.target_override
        return self.situation.budget.tokens_at(self.situation.policy.compaction_target)

    def done(self) -> bool:
        return self.total() <= self.target

    def update(self, messages: list[Message], layer: str) -> None:
        if messages != self.messages:
            self.messages, self.changed, self.last_layer = messages, True, layer
            self._regroup()

    def result(self, strategy: str) -> Compacted:
        after = self.total()
        fits = self.situation.budget.fits(after)
        return Compacted(self.messages, strategy, self.before, after, fits)

    def tool_name(self, index: int) -> str | None:
        """The name of the tool whose result is message `index`."""
        call_id = self.messages[index].get("tool_call_id")
        for unit in self.units:
            if unit.start < index < unit.stop and isinstance(call_id, str):
                return tool_call_name(self.messages[unit.start], call_id)
        return None


def _trim_layer(work: _Work) -> Plan | None:
    policy, budget = work.situation.policy, work.situation.budget
    cap = int(budget.context_window * policy.tool_result_max_share)
    _cap_messages(work, cap, is_tool_result)
    return work.result("trim_tool_results") if work.changed and work.done() else None


def _cap_messages(work: _Work, cap: int, eligible: Callable[[Message], bool]) -> None:
    messages = list(work.messages)
    for index, message in enumerate(work.messages):
        if not eligible(message) or is_trimmed(message):
            continue
        tokens = work.counter.message(message)
        if tokens > cap:
            name = work.tool_name(index)
            trimmed = trim(message, max_tokens=cap, count=work.counter.text, tool_name=name)
            # A result barely over a small cap would grow by the note: keep it whole then.
            if work.counter.message(trimmed) < tokens:
                messages[index] = trimmed
    work.update(messages, "trim_tool_results")


def _clear_layer(work: _Work) -> Plan | None:
    # Every old result goes once one has to: the provider's prompt cache is lost from the
    # first cleared result on anyway, so clearing only what reaches the target would pay
    # that miss again a few turns later for the next few (Anthropic's context editing
    # `clear_at_least` answers the same trade-off).
    if work.total() <= work.target:
        return None
    messages = list(work.messages)
    for index in range(work.pins.recent):
        message = messages[index]
        if is_tool_result(message) and not is_cleared(message):
            tokens = work.counter.message(message)
            placeholder = clear(message, work.tool_name(index), tokens)
            if work.counter.message(placeholder) < tokens:  # a short result stays whole
                messages[index] = placeholder
    work.update(messages, "clear_tool_results")
    return work.result("clear_tool_results") if work.changed and work.done() else None


def _summarize_layer(work: _Work) -> Plan | None:
    # A summary condenses everything before the recent window, not just enough to reach
    # the target: the provider's prompt cache is lost from the span's start on either way,
    # so a deeper summary costs no more cache and puts the next one many turns further off
    # (in the benchmark's agent session, 2 summaries instead of 5, and a higher cache share).
    policy = work.situation.policy
    eviction = _Eviction.find(
        work, note_tokens=policy.summary_max_tokens + _NOTE_OVERHEAD, target=0
    )
    if eviction is None:
        return None
    request = summary_request(
        eviction.evicted,
        previous=eviction.previous,
        model=_model(work.situation.body),
        max_tokens=policy.summary_max_tokens,
    )
    return NeedsSummary(request, eviction.evicted, eviction)


def _truncate_layer(work: _Work) -> Plan | None:
    eviction = _Eviction.find(work, note_tokens=_NOTE_OVERHEAD)
    if eviction is None:
        return None
    return eviction.apply(marker(len(eviction.evicted), eviction.previous), "truncate")


def _shrink_turns_layer(work: _Work) -> Plan | None:
    budget = work.situation.policy.max_context_turns
    if budget:
        work.update(shrink_old_turns(work.messages, budget, work.pins), "max_context_turns")
        if work.changed and work.done():
            return work.result("max_context_turns")
    return None


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


@dataclass(frozen=True, slots=True)
class _Eviction:
    """The oldest unpinned units to replace with one note, and the note they already had.

    The span starts after the leading instructions and the pinned first user message and
    never reaches into the recent window; when even all of that is not enough, all of it
    goes. Instructions inside it are kept (after the note). An earlier note, standalone in
    the span or merged into the first user message, is taken out and folded into the new one
    instead of piling up.
    """

    work: _Work
    messages: list[Message]
    start: int
    stop: int
    previous: str | None

    @property
    def evicted(self) -> tuple[Message, ...]:
        span = self.messages[self.start : self.stop]
        return tuple(m for m in span if not is_instruction(m) and note_of(m) is None)

    @classmethod
    def find(cls, work: _Work, *, note_tokens: int, target: int | None = None) -> _Eviction | None:
        """The span to evict to bring `work` down to `target` (its own target when None)."""
        messages, previous = _detached(work.messages, work.pins.first_user)
        floor = work.pins.head
        if work.pins.first_user is not None:
            floor = max(floor, work.pins.first_user + 1)
        candidates = [u for u in work.units if u.start >= floor and u.stop <= work.pins.recent]
        if not candidates:
            return None
        goal = work.target if target is None else target
        need = work.counter.messages(messages) + work.tools - goal + note_tokens
        sizes = [
            sum(
                work.counter.message(messages[i])
                for i in unit.indices()
                if not is_instruction(messages[i])  # kept, so not freed
            )
            for unit in candidates
        ]
        taken, freed = 0, 0
        while taken < len(candidates) and freed < need:
            freed += sizes[taken]
            taken += 1
        taken = _standalone_end(messages, candidates, taken, deep=target is not None)
        freed = sum(sizes[:taken])
        if freed <= note_tokens:
            return None  # the note would cost as much as it saves
        stop = candidates[taken - 1].stop
        notes = [note_of(m) for m in messages[candidates[0].start : stop]]
        previous = next((n for n in reversed(notes) if n is not None), previous)
        eviction = cls(work, messages, candidates[0].start, stop, previous)
        # Only notes of earlier compactions to evict: nothing new to gain, and replacing a note
        # with a note would change the prefix for nothing.
        return eviction if eviction.evicted else None

    def apply(self, note: str, strategy: str) -> Compacted:
        span = self.messages[self.start : self.stop]
        kept = [m for m in span if is_instruction(m)]
        reduced = [*self.messages[: self.start], *kept, *self.messages[self.stop :]]
        self.work.messages = splice(reduced, self.start, self.start, note).messages
        return self.work.result(strategy)


def _standalone_end(
    messages: Sequence[Message], candidates: Sequence[Unit], taken: int, *, deep: bool
) -> int:
    """How many of the `taken` units to evict so that the span ends right before a user
    message, where possible: the note then stands alone between the task and that message
    instead of being merged into the task, which would change the pinned prefix too.

    One unit more does it for a span that only had to reach the target; a deep span (all it
    could take) gives units back instead, down to the last user message it covers.
    """
    if _is_user_at(messages, candidates[taken - 1].stop):
        return taken
    if taken < len(candidates) and _is_user_at(messages, candidates[taken].stop):
        return taken + 1
    if deep:
        for fewer in range(taken - 1, 0, -1):
            if _is_user_at(messages, candidates[fewer - 1].stop):
                return fewer
    return taken


def _is_user_at(messages: Sequence[Message], index: int) -> bool:
    return index < len(messages) and role(messages[index]) == "user"


def _detached(messages: list[Message], first_user: int | None) -> tuple[list[Message], str | None]:
    """`messages` with a note merged into the first user message taken out, and the note."""
    if first_user is None:
        return messages, None
    restored, note = detach_note(messages[first_user])
    if note is None:
        return messages, None
    return [*messages[:first_user], restored, *messages[first_user + 1 :]], note


def plan_emergency(
    situation: Situation, counter: Counter, *, stated_limit: int | None = None
) -> Compacted | Unchanged:
    """Compact hard, with no LLM call, after the provider said the request overflowed.

    Keeps half the usual recent window, caps any single tool result or text message, clears
    old tool results and truncates, until the request is at most half the size of the
    rejected one, and fits the limit the error stated if it stated one. `Unchanged` when
    nothing could be removed: the service then returns the provider's error as it came.
    """
    policy = situation.policy.replace(keep_recent=situation.policy.keep_recent // 2)
    hard = Situation(situation.messages, situation.body, policy, situation.budget, force=True)
    work = _Work(hard, counter, list(situation.messages))
    if not is_well_formed(work.units):
        return Unchanged("malformed", work.before)
    work.target_override = _emergency_target(work, stated_limit)
    budget = situation.budget
    cap = min(int(budget.context_window * policy.tool_result_max_share), work.target // 2)
    _cap_messages(work, max(cap, 1), _cappable)
    for layer in (_clear_layer, _truncate_layer):
        if work.done():
            break
        outcome = layer(work)
        if isinstance(outcome, Compacted):
            return replace(outcome, strategy="emergency")
    if not work.changed:
        return Unchanged("nothing_to_remove", work.before)
    return replace(work.result("emergency"), strategy="emergency")


def _emergency_target(work: _Work, limit: int | None) -> int:
    """Half the rejected request, or what fits the stated limit (a window in the provider's
    tokens, which the calibration converts), whichever is smaller."""
    target = work.before // 2
    if limit is not None:
        budget = work.situation.budget
        stated = Budget(limit, min(budget.output_reserve, limit - 1), budget.calibration)
        target = min(target, stated.tokens_at(1.0))
    return target


def _cappable(message: Message) -> bool:
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
