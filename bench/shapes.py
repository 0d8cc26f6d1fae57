"""What issue 38's client shapes must find in every forwarded request, judged request by request.

Each judge reads the forwarded requests as the chat messages the proxy's core reads (as
`bench.forwarded` does) with, for each, the user turn it was sent in and the rounds of that
turn it carried (`forwarded.locate`):

- `running_verbatim`: the running turn's user message whole, in a user message (the notes
  the proxy merged into it apart), never cut, folded or turned into a ledger bullet;
- `working_set`: the running turn's working set (aider's files message) whole in every
  request that can hold it, and its form (whole, cut, in the block, gone) the same from one
  request to the next: no flip;
- `ledger_order`: the planted statements the ledger lists, in the order they were first said;
- `paste_free`: no line of a user's paste among the ledger's entries (a paste is data; the
  ledger is for what the user said);
- `newest_whole`: the tool result a request ends with (the one the model just asked for)
  forwarded whole, unless the request would be above its target with it whole;
- `calls_named`: every round of the running turn a request no longer carries (folded into
  the block) named in the block, its tool and its arguments, so that the agent knows it ran;
- `earlier_said`: every sentence the user said before the running turn somewhere in the
  request (the ledger, or a message forwarded as it came).

The ledger is the compaction block's section under `LEDGER_HEADING`, read by the core's own
`read_ledger`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from bench.forwarded import Counting, block, user_text
from bench.measures import Tally
from proxy.core.messages import Message, role, text, tool_calls
from proxy.core.statements import read_ledger
from proxy.core.summary import notes_in

Located = tuple[int, int] | None
"""(the user turn a request was sent in, the rounds of it the request carried)."""
_SHOWN: Final = 60
"""Characters of a missing sentence or call a detail quotes."""


def _quote(value: str) -> str:
    return value if len(value) <= _SHOWN else value[: _SHOWN - 3] + "..."


def _where(number: int, located: tuple[int, int]) -> str:
    turn, sent = located
    return f"request {number} (turn {turn + 1}, {sent} rounds sent)"


def running_verbatim(
    requests: Sequence[Sequence[Message]], located: Sequence[Located], texts: Sequence[str]
) -> Tally:
    """Requests carrying the running turn's user message whole in a user message."""
    counting = Counting()
    for number, (messages, at) in enumerate(zip(requests, located, strict=True), start=1):
        if at is None:
            continue
        said = texts[at[0]]
        whole = any(role(m) == "user" and said in user_text(m) for m in messages)
        counting.add("" if whole else f"{_where(number, at)}: the user message is not whole")
    return counting.tally()


def _form(messages: Sequence[Message], working: str) -> str:
    """How a request carries `working`: whole, cut (a user message opening as it does, not
    whole), in the block (its first line in a note of the proxy's), or gone."""
    first = working.partition("\n")[0]
    bodies = [user_text(m) for m in messages if role(m) == "user"]
    if any(working in body for body in bodies):
        return "whole"
    if any(first in body for body in bodies):
        return "cut"
    return "in the block" if any(first in note for note in notes_in(messages)) else "gone"


def working_set(
    requests: Sequence[Sequence[Message]],
    located: Sequence[Located],
    sets: Sequence[str],
    fits: Sequence[bool],
) -> tuple[Tally, Tally]:
    """(requests that could hold their turn's working set, `fits`, carrying it whole;
    consecutive requests carrying their working sets in the same form)."""
    whole, same = Counting(), Counting()
    previous: str | None = None
    for number, (messages, at) in enumerate(zip(requests, located, strict=True), start=1):
        if at is None or not sets[at[0]]:
            continue
        form = _form(messages, sets[at[0]])
        if fits[at[0]]:
            whole.add("" if form == "whole" else f"{_where(number, at)}: {form}")
        if previous is not None:
            flipped = f"{_where(number, at)}: {previous} then {form}" if form != previous else ""
            same.add(flipped)
        previous = form
    return whole.tally(), same.tally()


def ledger_order(requests: Sequence[Sequence[Message]], keys: Sequence[str]) -> Tally:
    """Requests whose ledger lists the planted statements (by `keys`, in the order said)
    that it holds in that order; only requests whose ledger holds two or more are judged."""
    counting = Counting()
    for number, messages in enumerate(requests, start=1):
        entries = [entry.text for entry in read_ledger(block(messages))]
        found = [
            next(index for index, key in enumerate(keys) if key in entry)
            for entry in entries
            if any(key in entry for key in keys)
        ]
        if len(found) < 2:
            continue
        ordered = all(a < b for a, b in itertools.pairwise(found))
        listed = ", ".join(str(index + 1) for index in found)
        counting.add("" if ordered else f"request {number}: statements {listed}")
    return counting.tally()


def paste_free(requests: Sequence[Sequence[Message]], pastes: Sequence[str]) -> Tally:
    """Requests with a compaction block whose ledger holds no entry of a paste's (a line of
    it, or a part of one: the ledger copies sentences, and a log line is one)."""
    pasted = "\n".join(pastes)
    counting = Counting()
    for number, messages in enumerate(requests, start=1):
        note = block(messages)
        if not note:
            continue
        lines = [e.text for e in read_ledger(note) if e.text.strip() and e.text in pasted]
        example = f', e.g. "{_quote(lines[0])}"' if lines else ""
        counting.add(f"request {number}: {len(lines)} paste lines{example}" if lines else "")
    return counting.tally()


def newest_whole(
    requests: Sequence[Sequence[Message]],
    outputs: Mapping[str, str],
    pressure: Callable[[int, int], float],
    target: Callable[[int], float],
    count: Callable[[str], int],
) -> Tally:
    """Requests ending with a tool result the client sent that forward it whole; one that
    cut it is a miss unless the request would have been above its target (`target(index)`)
    with the result whole (`pressure(index, tokens)`: its pressure with `tokens` more)."""
    counting = Counting()
    for index, messages in enumerate(requests):
        last = messages[-1] if messages else None
        call = str(last.get("tool_call_id")) if last is not None and role(last) == "tool" else ""
        if last is None or call not in outputs:
            continue
        sent, shown = outputs[call], text(last)
        if shown == sent:
            counting.add("")
            continue
        at = pressure(index, count(sent) - count(shown))
        if at <= target(index):
            counting.add(
                f"request {index + 1}: {len(shown):,} of its {len(sent):,} characters, "
                f"{at:.3f} with it whole"
            )
    return counting.tally()


def _named(note: str, name: str, arguments: str) -> bool:
    """Whether `note` names a call: its tool and every argument value it was given (a
    `description`, which says what the call is for, apart)."""
    try:
        given = json.loads(arguments)
    except json.JSONDecodeError:
        given = {}
    values = [v for k, v in given.items() if isinstance(v, str) and k != "description"]
    return name in note and all(value in note for value in values)


def calls_named(
    requests: Sequence[Sequence[Message]],
    located: Sequence[Located],
    calls: Sequence[Sequence[str]],
    call_args: Mapping[str, tuple[str, str]],
    condensed_at: Mapping[str, int] | None = None,
) -> Tally:
    """Requests whose block names every round of the running turn the request carried no
    more (its call gone from the messages); a round the client's own compaction took out
    (`condensed_at`: the index of the first request without it) is the client's to name."""
    counting = Counting()
    gone = condensed_at or {}
    for number, (messages, at) in enumerate(zip(requests, located, strict=True), start=1):
        if at is None:
            continue
        turn, sent = at
        present = {str(call.get("id")) for m in messages for call in tool_calls(m)}
        folded = [
            call
            for call in calls[turn][:sent]
            if call not in present and gone.get(call, number) >= number
        ]
        note = block(messages)
        missing = [call for call in folded if not _named(note, *call_args[call])]
        detail = ""
        if missing:
            name, arguments = call_args[missing[0]]
            detail = (
                f"{_where(number, at)}: {len(missing)} of {len(folded)} folded rounds not "
                f"named, e.g. {name} {_quote(arguments)}"
            )
        counting.add(detail)
    return counting.tally()


def earlier_said(
    requests: Sequence[Sequence[Message]],
    located: Sequence[Located],
    sentences: Sequence[Sequence[str]],
) -> Tally:
    """Requests carrying, somewhere in their messages, every sentence of `sentences` (each
    user turn's) said before the running turn."""
    counting = Counting()
    for number, (messages, at) in enumerate(zip(requests, located, strict=True), start=1):
        if at is None:
            continue
        said = [sentence for earlier in sentences[: at[0]] for sentence in earlier]
        if not said:
            continue
        everything = "\n".join(text(message) for message in messages)
        missing = [sentence for sentence in said if sentence not in everything]
        example = f', e.g. "{_quote(missing[0])}"' if missing else ""
        counting.add(
            f"{_where(number, at)}: {len(missing)} of {len(said)} missing{example}"
            if missing
            else ""
        )
    return counting.tally()
