"""Splicing a note (a summary, an omission marker) into a conversation in place of a span.

Strict chat templates (Gemma, Mistral, many Llama variants) reject two user or two assistant
messages in a row, and some want the first message after the instructions to be the user's.
Compaction must not create such a pair where the client's conversation had none. So the note
takes whichever role fits between its neighbours; when neither fits (a user message before
and an assistant message after, or a user message after the instructions), it is merged into
the neighbouring user message instead of standing alone.

Tool and function results count as neither side: a user or an assistant message may follow
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.messages import Message, is_instruction, role
from proxy.core.summary import opening_note

_SIDES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Spliced:
    """`messages[:start]` (maybe with its last message merged) + note + `messages[resume:]`."""

    messages: list[Message]
    resume: int
    """The input index from which the output is the input, unchanged, to the end."""


def splice(messages: Sequence[Message], start: int, stop: int, note: str) -> Spliced:
    """Replace `messages[start:stop]` with one note message, keeping roles alternating."""
    before, previous = _side_before(messages, start)
    after, following = _side_after(messages, stop)
    head, tail = list(messages[:start]), list(messages[stop:])
    for candidate in _candidates(before):
        if candidate not in (before, after):
            return Spliced([*head, {"role": candidate, "content": note}, *tail], stop)
    if before == "user":
        # The previous user message may sit before instructions; merge into it, in place.
        head[previous] = merge_text(head[previous], note, first=False)
        return Spliced([*head, *tail], stop)
    # Only instructions (or an assistant) before, a user message after: the note opens it.
    between = list(messages[stop:following])
    merged = merge_text(messages[following], opening_note(note), first=True)
    return Spliced([*head, *between, merged, *messages[following + 1 :]], following + 1)


def _side_before(messages: Sequence[Message], start: int) -> tuple[str | None, int]:
    """The alternation side before `start`, skipping instructions, and its index; None at
    the start of the conversation (nothing before but instructions)."""
    index = start - 1
    while index >= 0 and is_instruction(messages[index]):
        index -= 1
    if index < 0:
        return None, index
    return _side_of(messages[index]), index


def _side_after(messages: Sequence[Message], stop: int) -> tuple[str, int]:
    """The alternation side from `stop` on, skipping instructions, and its index."""
    index = stop
    while index < len(messages) and is_instruction(messages[index]):
        index += 1
    if index >= len(messages):
        return "end", index
    return _side_of(messages[index]), index


def _side_of(message: Message) -> str:
    name = role(message)
    return name if name in _SIDES else "other"


def _candidates(before: str | None) -> tuple[str, ...]:
    # Right after the instructions, templates expect the user to speak first.
    return ("user",) if before is None else _SIDES


def merge_text(message: Message, note: str, *, first: bool) -> Message:
    """A copy of `message` with `note` added as text before or after its content."""
    content = message.get("content")
    if isinstance(content, list):
        part = {"type": "text", "text": note}
        merged: object = [part, *content] if first else [*content, part]
    elif isinstance(content, str) and content:
        merged = f"{note}\n\n{content}" if first else f"{content}\n\n{note}"
    else:
        merged = note
    return {**message, "content": merged}
