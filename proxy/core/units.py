"""Units: the pieces a conversation may be cut between, and the pieces that are pinned.

Compaction never cuts single messages out of a conversation. It works on units:

- an instruction: one system or developer message;
- a user message;
- a plain assistant message;
- a tool exchange: an assistant message with `tool_calls` plus every `tool` message that
  answers it (parallel calls are one unit: dropping some answers and not others makes
  OpenAI reject the request, "messages with role 'tool' must be a response to a preceding
  message with 'tool_calls'");
- a function exchange: a legacy assistant `function_call` plus the `function` message after it;
- a stray: anything else (a tool result nobody asked for, a message with no known role).

A conversation is *well-formed* when it has no stray tool result and no unanswered call. The
core compacts only well-formed conversations: malformed input is the client's to fix and
the upstream's to judge, so it is forwarded as it came, never silently repaired.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from proxy.core.messages import (
    Message,
    answers,
    has_function_call,
    is_instruction,
    leading_instructions,
    role,
)
from proxy.core.messages import tool_call_ids as call_ids_of
from proxy.core.summary import note_of


class UnitKind(enum.Enum):
    INSTRUCTION = "instruction"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL_EXCHANGE = "tool_exchange"
    FUNCTION_EXCHANGE = "function_exchange"
    STRAY = "stray"


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages `start` to `stop` (exclusive) of a conversation, cut as one."""

    start: int
    stop: int
    kind: UnitKind
    complete: bool = True
    """False for a tool exchange with a call no tool message answers."""

    def __len__(self) -> int:
        return self.stop - self.start

    def indices(self) -> range:
        return range(self.start, self.stop)


def group_units(messages: Sequence[Message]) -> tuple[Unit, ...]:
    """Split a conversation into consecutive units covering every message once, in order."""
    units: list[Unit] = []
    index = 0
    while index < len(messages):
        unit = _unit_at(messages, index)
        units.append(unit)
        index = unit.stop
    return tuple(units)


def _unit_at(messages: Sequence[Message], start: int) -> Unit:
    message = messages[start]
    kind = _single_kind(message)
    if kind is not UnitKind.ASSISTANT:
        return Unit(start, start + 1, kind)
    calls = call_ids_of(message)
    if calls:
        return _tool_exchange(messages, start, calls)
    if has_function_call(message) and _is_function_result(messages, start + 1):
        return Unit(start, start + 2, UnitKind.FUNCTION_EXCHANGE)
    return Unit(start, start + 1, UnitKind.ASSISTANT)


def _single_kind(message: Message) -> UnitKind:
    if is_instruction(message):
        return UnitKind.INSTRUCTION
    return {"user": UnitKind.USER, "assistant": UnitKind.ASSISTANT}.get(
        role(message), UnitKind.STRAY
    )


def _tool_exchange(messages: Sequence[Message], start: int, calls: list[str]) -> Unit:
    # The answers follow the call, in any order; they end at the first message that is not
    # a tool result for one of this message's calls.
    pending = set(calls)
    stop = start + 1
    while stop < len(messages) and answers(messages[stop]) in pending:
        pending.discard(answers(messages[stop]))
        stop += 1
    return Unit(start, stop, UnitKind.TOOL_EXCHANGE, complete=not pending)


def _is_function_result(messages: Sequence[Message], index: int) -> bool:
    return index < len(messages) and role(messages[index]) == "function"


def is_well_formed(units: Sequence[Unit]) -> bool:
    """No stray message and no unanswered tool call: safe to compact."""
    return all(unit.complete and unit.kind is not UnitKind.STRAY for unit in units)


@dataclass(frozen=True, slots=True)
class Pins:
    """Which messages compaction must keep, as indices into the conversation."""

    head: int
    """Leading instructions: messages [0, head) are kept first, unchanged."""
    first_user: int | None
    """The first user message, kept when pinned (it usually states the task)."""
    recent: int
    """Messages [recent, end) are the recent window, kept whole."""
    instructions: frozenset[int]
    """Every instruction message, wherever it stands (mid-conversation reminders too)."""
    running: int | None = None
    """Where the running turn starts: the last user message (what the model answers now)."""
    asked: int | None = None
    """Where the tool exchange right before the last user message starts, if there is one:
    the result that message is about."""

    def protecting(self, *, running: bool) -> Pins:
        """These pins with the recent window widened to hold the result the user asks about
        ("which is biggest?": cut to fit, never cleared or dropped) and, with `running`, the
        whole running turn when something older can go instead (a cut inside it would drop
        the question being answered, or its first tool rounds, which an agent runs again)."""
        recent = self.recent
        if running and self.running is not None and self.head <= self.running < recent:
            recent = self.running
        if self.asked is not None:
            recent = min(recent, self.asked)
        return replace(self, recent=recent)

    def is_pinned(self, index: int) -> bool:
        return (
            index < self.head
            or index >= self.recent
            or index == self.first_user
            or index in self.instructions
        )


def pins(
    messages: Sequence[Message],
    units: Sequence[Unit],
    *,
    keep_recent: int,
    pin_first_user: bool,
    bound: tuple[int, Callable[[Message], int]] | None = None,
    is_note: Callable[[Message], bool] | None = None,
) -> Pins:
    """The pinned messages: leading instructions, first user message, the recent window.

    The recent window is the last `keep_recent` messages rounded out to whole units, so a
    tool exchange straddling the boundary is kept entirely. With a `bound` (a number of
    tokens, and the count of one message) it is also bounded in tokens: the cut moves forward
    over whole units until the window fits, but never past the newest unit, always kept.
    `is_note` says which messages are notes the proxy wrote (by default, by their shape).
    """
    if is_note is None:
        is_note = _shaped_like_a_note
    head = leading_instructions(messages)
    # A note the proxy wrote is no task, even when it stands where the task was.
    first_user = next(
        (
            i
            for i in range(head, len(messages))
            if role(messages[i]) == "user" and not is_note(messages[i])
        ),
        None,
    )
    running, asked = _running_turn(messages, units, head, is_note)
    recent = _recent_start(units, len(messages), keep_recent)
    if bound is not None and recent < len(messages):
        recent = _bounded_start(messages, units, recent, *bound)
    return Pins(
        head=head,
        first_user=first_user if pin_first_user else None,
        recent=recent,
        instructions=frozenset(i for i, m in enumerate(messages) if is_instruction(m)),
        running=running,
        asked=asked,
    )


def _shaped_like_a_note(message: Message) -> bool:
    return note_of(message) is not None


def _running_turn(
    messages: Sequence[Message],
    units: Sequence[Unit],
    head: int,
    is_note: Callable[[Message], bool],
) -> tuple[int | None, int | None]:
    """Where the running turn starts (the last user message; a note the proxy wrote is
    none), and where the tool exchange right before it starts, if there is one: the result
    that message is about."""
    last = next(
        (
            i
            for i in range(len(messages) - 1, head - 1, -1)
            if role(messages[i]) == "user" and not is_note(messages[i])
        ),
        None,
    )
    if last is None:
        return None, None
    before = next((u for u in units if u.stop == last), None)
    exchanges = (UnitKind.TOOL_EXCHANGE, UnitKind.FUNCTION_EXCHANGE)
    return last, before.start if before is not None and before.kind in exchanges else None


def _recent_start(units: Sequence[Unit], total: int, keep_recent: int) -> int:
    boundary = max(0, total - keep_recent)
    for unit in units:
        if unit.start <= boundary < unit.stop:
            return unit.start
    return total


def _bounded_start(
    messages: Sequence[Message],
    units: Sequence[Unit],
    start: int,
    budget: int,
    count: Callable[[Message], int],
) -> int:
    """The start of the longest run of whole units from the end, at or after `start`,
    that fits `budget` tokens; the newest unit's start when even that one does not."""
    recent = units[-1].start
    used = sum(count(messages[i]) for i in units[-1].indices())
    for unit in reversed(units[:-1]):
        if unit.start < start:
            break
        used += sum(count(messages[i]) for i in unit.indices())
        if used > budget:
            break
        recent = unit.start
    return recent
