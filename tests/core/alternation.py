"""Checks on conversations that the property tests share."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.messages import Message, is_instruction, role
from proxy.core.summary import detach_note, note_of
from proxy.core.tool_results import is_tool_result


def same_role_pairs(messages: Sequence[Message]) -> int:
    """How many times a user or assistant message follows one of its own role (instructions
    in between are skipped: templates hoist or merge them)."""
    pairs, last = 0, None
    for message in messages:
        if is_instruction(message):
            continue
        side = role(message) if role(message) in ("user", "assistant") else "other"
        pairs += side == last and side != "other"
        last = side
    return pairs


def matches(original: Message, produced: Message) -> bool:
    """`produced` stands for `original`: the same, a result or a text cut or cleared, or a
    message a note was merged into."""
    if produced == original:
        return True
    if role(produced) != role(original):
        return False
    if is_tool_result(original):
        return produced.get("tool_call_id") == original.get("tool_call_id")
    if "cut from the middle of this message" in str(produced.get("content")):
        return True
    return detach_note(produced)[0] == original


def subsequence_plus_notes(inputs: Sequence[Message], outputs: Sequence[Message]) -> bool:
    """`outputs` is `inputs` with messages dropped or standing in for them, plus notes."""
    position = 0
    for produced in outputs:
        if note_of(produced) is not None:
            continue
        while position < len(inputs) and not matches(inputs[position], produced):
            position += 1
        if position == len(inputs):
            return False
        position += 1
    return True
