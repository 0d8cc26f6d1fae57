"""Checks on conversations that the property tests share."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.messages import Message, is_instruction, role


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
