"""The turn budget (`max_context_turns`): old turns shrink to their question and answer.

A turn starts at a user message and runs to the next one. With a budget of N, every turn
older than the last N keeps only its user message and its last plain assistant reply: the
tool chain that led there is removed whole (a tool call and its answers always go together).
A turn with no plain reply is kept as it is, since dropping its exchanges would leave two
user messages in a row. Instructions and pinned messages are always kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.messages import Message, is_instruction, role, tool_call_ids
from proxy.core.units import Pins


def shrink_old_turns(messages: Sequence[Message], budget: int, pinned: Pins) -> list[Message]:
    """`messages` with turns older than the last `budget` reduced to question and answer."""
    starts = [i for i, m in enumerate(messages) if role(m) == "user"]
    if len(starts) <= budget:
        return list(messages)
    old_turns = zip(starts, [*starts[1:], len(messages)], strict=True)
    keep = set(range(len(messages)))
    for start, stop in list(old_turns)[: len(starts) - budget]:
        keep -= _removable(messages, start, min(stop, pinned.recent), pinned)
    return [m for i, m in enumerate(messages) if i in keep]


def _removable(messages: Sequence[Message], start: int, stop: int, pinned: Pins) -> set[int]:
    """Indices of the turn [start, stop) to drop: all but its user message, last plain
    assistant reply, instructions and pinned messages; nothing if there is no such reply."""
    replies = [
        i for i in range(start, stop) if role(messages[i]) == "assistant" and _plain(messages[i])
    ]
    if not replies:
        return set()
    return {
        i
        for i in range(start + 1, stop)
        if i != replies[-1] and not is_instruction(messages[i]) and not pinned.is_pinned(i)
    }


def _plain(message: Message) -> bool:
    return not tool_call_ids(message) and "function_call" not in message
