"""What the forwarded requests show: the compaction block, the running turn, a result cut.

The matrix reads every request the proxy forwarded (from the mock's recording) as the chat
messages the proxy's core reads (`MatrixClient.messages`: over the Responses API, the body's
chat view), and judges three things the statement checks cannot see:

- the compaction block: the notes the proxy wrote (a message opening with "[Earlier turns of
  this conversation were condensed" or "[N earlier messages omitted]", or such a note merged
  into a user message after a blank line), found by their shape as the proxy finds them. A
  value a later statement replaced must be gone from it; elsewhere (a message the proxy did
  not compact) it may legitimately remain;
- the running turn: each request ends with what the client sent last (its newest user
  message or tool result), which says which user turn was running and which of its tool
  rounds had been sent. The user message that started that turn must be forwarded in place
  (a user message with its text, its first line at least), and every one of those rounds
  must follow it, its result never cleared and dropped only once nothing older than the
  turn is forwarded (a running turn can outgrow the room its instructions and tools leave);
- a tool result too large to forward whole: forwarded cut, with the "showing N of M items"
  note the proxy writes, in every request after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from bench.measures import Stale, Tally
from proxy.core.messages import INSTRUCTION_ROLES, Message, role, text
from proxy.core.summary import detach_notes, note_of, notes_in
from proxy.core.tool_results import is_cleared

_SHOWING: Final = re.compile(r"showing ([\d,]+) of ([\d,]+) items")
_HEADING_CHARS: Final = 80
_MISSES_KEPT: Final = 5
"""The misses a tally describes (the first ones); the count covers them all."""


def block(messages: Sequence[Message]) -> str:
    """The compaction block of a forwarded request: every note the proxy wrote, in order."""
    return "\n\n".join(notes_in(messages))


def stale_in(block_text: str, keys: Sequence[str]) -> list[Stale]:
    """Each replaced value, with the line of the block that still holds it (None: gone)
    and the heading it sits under (the last line before it that is no bullet)."""
    return [_found(block_text.splitlines(), key) for key in keys]


def _found(lines: Sequence[str], key: str) -> Stale:
    heading = ""
    for line in lines:
        if key in line:
            return Stale(key, line, heading[:_HEADING_CHARS])
        if line.strip() and not line.startswith("- "):
            heading = line
    return Stale(key, None)


def user_text(message: Message) -> str:
    """A message's text without the notes the proxy merged into it."""
    return text(detach_notes(message)[0])


def locate(
    requests: Sequence[Sequence[Message]], texts: Sequence[str], calls: Sequence[Sequence[str]]
) -> list[tuple[int, int] | None]:
    """For each of `requests`, given each user turn's text and its tool calls' ids: (the turn
    it was sent in, the rounds of that turn it carried), None where its last message is no
    message of the client's."""
    rounds = {
        call: (turn, index) for turn, ids in enumerate(calls) for index, call in enumerate(ids)
    }
    firsts = {turn_text.partition("\n")[0]: turn for turn, turn_text in enumerate(texts)}
    return [_locate(messages[-1], rounds, firsts) if messages else None for messages in requests]


def _locate(
    last: Message, rounds: dict[str, tuple[int, int]], firsts: dict[str, int]
) -> tuple[int, int] | None:
    """(turn, rounds sent) of the request that ends with `last`, None if it is no message
    of the client's."""
    if role(last) == "tool":
        turn, index = rounds.get(str(last.get("tool_call_id")), (-1, -1))
        return (turn, index + 1) if turn >= 0 else None
    if role(last) == "user":
        turn = firsts.get(user_text(last).partition("\n")[0], -1)
        return (turn, 0) if turn >= 0 else None
    return None


def _user_at(messages: Sequence[Message], first_line: str) -> int:
    """Where the user message opening with `first_line` is, -1 if nowhere."""
    return next(
        (
            at
            for at, message in enumerate(messages)
            if role(message) == "user" and user_text(message).startswith(first_line)
        ),
        -1,
    )


def _older_before(messages: Sequence[Message], at: int) -> int:
    """How many of the client's messages older than the running turn (which starts at `at`)
    are forwarded: instructions and the proxy's notes apart."""
    return sum(
        role(message) not in INSTRUCTION_ROLES
        and note_of(message) is None
        and bool(user_text(message).strip() or role(message) != "user")
        for message in messages[: max(at, 0)]
    )


def _rounds_missing(
    messages: Sequence[Message], after: int, expected: Sequence[str], older: int, clears: bool
) -> str:
    """What is missing of the `expected` rounds after position `after` ("" if none): a round
    dropped while `older` messages from before the running turn are still forwarded (it
    could have gone instead), or a round cleared while the request would fit the usable
    input with the turn's results cut to their least (`clears`: it would not; a running
    turn's results are cut before any is a placeholder). A running turn bigger than the room
    left loses its oldest rounds once nothing older is left: that is no miss."""
    results = {str(m.get("tool_call_id")): m for m in messages[after + 1 :] if role(m) == "tool"}
    dropped = [call for call in expected if call not in results] if older else []
    cleared = [
        call for call in expected if call in results and is_cleared(results[call])
    ] if not clears else []  # fmt: skip
    parts = [f"{len(dropped)} dropped while {older} older messages stayed"] if dropped else []
    parts += [f"{len(cleared)} cleared"] if cleared else []
    return " and ".join(parts) + f" of {len(expected)} rounds" if parts else ""


def running_turn(
    requests: Sequence[Sequence[Message]],
    texts: Sequence[str],
    calls: Sequence[Sequence[str]],
    clears: Sequence[bool] = (),
) -> tuple[Tally, Tally]:
    """Over `requests`, given each user turn's text and its tool calls' ids: (the running
    turn's user message forwarded in place, every round sent after it held). `clears`: for
    each request, whether it would not fit the usable input with the running turn's older
    results cut to their least (where it would not, they may be placeholders)."""
    user, held = Counting(), Counting()
    for number, (messages, located) in enumerate(
        zip(requests, locate(requests, texts, calls), strict=True), start=1
    ):
        clearing = clears[number - 1] if number <= len(clears) else False
        if located is None:
            continue
        turn, sent = located
        at = _user_at(messages, texts[turn].partition("\n")[0])
        where = f"request {number} (turn {turn + 1}, {sent} rounds sent)"
        user.add("" if at >= 0 else f"{where}: its user message is not there")
        older = _older_before(messages, at)
        missing = _rounds_missing(messages, at, calls[turn][:sent], older, clearing)
        held.add(f"{where}: {missing}" if missing else "")
    return user.tally(), held.tally()


def result_cut(
    requests: Sequence[Sequence[Message]],
    call: str,
    items: int,
    count: Callable[[Message], int],
    *,
    last_item: str,
    first: int = 1,
) -> Tally:
    """Whether each of `requests` (numbered from `first`) forwards the result of `call` (a
    JSON array of `items`) cut with its "showing N of M items" note; each is described,
    with whether the cut kept the tail (`last_item`, the array's last item as JSON)."""
    counting = Counting(describe_all=True)
    for number, messages in enumerate(requests, start=first):
        result = next((m for m in messages if m.get("tool_call_id") == call), None)
        if result is None:
            counting.add(f"request {number}: dropped", held=False)
            continue
        if is_cleared(result):
            counting.add(f"request {number}: cleared", held=False)
            continue
        shown = _SHOWING.search(text(result))
        size = f"{count(result):,} tokens"
        if shown is None or int(shown[2].replace(",", "")) != items:
            counting.add(f"request {number}: forwarded with no item note ({size})", held=False)
            continue
        kept = "head and tail" if last_item in text(result) else "head only"
        detail = f"request {number}: showing {shown[1]} of {shown[2]} items, {kept} ({size})"
        counting.add(detail, held=True)
    return counting.tally()


class Counting:
    """A tally being made: requests judged, and the first misses (or every request)."""

    def __init__(self, *, describe_all: bool = False) -> None:
        self.held = 0
        self.judged = 0
        self.details: list[str] = []
        self.describe_all = describe_all

    def add(self, detail: str, held: bool | None = None) -> None:
        """One request judged: held unless `detail` says what is missing (or `held` says)."""
        ok = not detail if held is None else held
        self.judged += 1
        self.held += ok
        if (self.describe_all or not ok) and len(self.details) < _MISSES_KEPT:
            self.details.append(detail)

    def tally(self) -> Tally:
        return Tally(self.held, self.judged, tuple(self.details))
