"""Chat messages as the client sent them: plain JSON dicts, read through small accessors.

The core never converts messages into objects of its own: a message it keeps is the very
dict the client sent, unknown fields included, so forwarding it changes nothing. These
functions read the few fields compaction cares about, tolerating every shape the wire allows
(`content` as a string, as an array of parts, or null; legacy `function_call`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]
"""One chat message, exactly as the client sent it."""

INSTRUCTION_ROLES = frozenset({"system", "developer"})


def role(message: Mapping[str, Any]) -> str:
    """The message's role, or "" when it has none (malformed input is passed through)."""
    value = message.get("role")
    return value if isinstance(value, str) else ""


def text(message: Mapping[str, Any]) -> str:
    """The message's text: a string content, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def texts(message: Mapping[str, Any]) -> list[str]:
    """The texts `text` joins: a string content alone, or each text part's text, in order."""
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content if _is_text_part(part)]
    return []


def with_texts(message: Message, new: Sequence[str]) -> Message:
    """`message` with its `texts` replaced, in order, by `new`: a text part keeps its other
    fields, and every other part (an image, a file) stays where it was."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": new[0]}
    replaced = iter(new)
    parts = [
        {**part, "text": next(replaced)} if _is_text_part(part) else part for part in content or []
    ]
    return {**message, "content": parts}


def is_text_only(message: Mapping[str, Any]) -> bool:
    """Whether the message's content is text alone: a string, or text parts only (as the
    Messages and Responses APIs carry a user's words), which a cut may join into one text."""
    content = message.get("content")
    return isinstance(content, str) or (
        isinstance(content, list) and bool(content) and all(map(_is_text_part, content))
    )


def _is_text_part(part: object) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The assistant's `tool_calls` entries that are objects (others are ignored)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [call for call in calls if isinstance(call, dict)]


def tool_call_ids(message: Mapping[str, Any]) -> list[str]:
    """Ids of the tool calls an assistant message makes, in order."""
    return [call["id"] for call in tool_calls(message) if isinstance(call.get("id"), str)]


def tool_call_name(message: Mapping[str, Any], call_id: str) -> str | None:
    """The function name of the call `call_id` in an assistant message."""
    for call in tool_calls(message):
        function = call.get("function")
        if call.get("id") == call_id and isinstance(function, dict):
            name = function.get("name")
            return name if isinstance(name, str) else None
    return None


def answers(message: Mapping[str, Any]) -> str | None:
    """For a `tool` message, the id of the call it answers."""
    value = message.get("tool_call_id")
    return value if role(message) == "tool" and isinstance(value, str) else None


def has_function_call(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message makes a legacy `function_call`."""
    return role(message) == "assistant" and isinstance(message.get("function_call"), dict)


def is_instruction(message: Mapping[str, Any]) -> bool:
    """System and developer messages: instructions, never compacted away."""
    return role(message) in INSTRUCTION_ROLES


def leading_instructions(messages: Sequence[object]) -> int:
    """How many messages at the start are instructions: the head every request keeps as
    sent. A malformed message (not an object) ends it."""
    count = 0
    for message in messages:
        if not (isinstance(message, Mapping) and is_instruction(message)):
            break
        count += 1
    return count
