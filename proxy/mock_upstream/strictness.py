"""The checks a strict provider makes on the message list before any model sees it.

Both raise `Rejected` with the provider's own words (see errors.py); a malformed message (not
an object, no role) is not their business and passes.

Tool pairing is OpenAI's rule: every `tool` message answers a call of the assistant message
that opens its block of tool messages, and that assistant message gets an answer for each of
its calls before any other message follows (or the list ends).

Alternation is the rule of strict chat templates. Mistral's (v0.3, the one that knows tools)
drops instructions, tool messages and assistant messages that make tool calls, then demands
user/assistant/user/...: so `user, assistant(calls), tool, assistant, user` passes, while two
user messages with only tool traffic or a system message between them do not. Unlike
Mistral's template, a conversation may start with an assistant message here: the mock checks
only what its option promises, consecutive same-role messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core.messages import has_function_call, role, tool_call_ids, tool_calls
from proxy.mock_upstream import errors


def check_tool_pairs(messages: Sequence[object]) -> None:
    """Raise `Rejected` as OpenAI does for an orphaned tool result or an unanswered call."""
    called: list[str] | None = None  # the calls the current block of tool messages answers
    pending: list[str] = []
    opened = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            continue
        if role(message) == "tool":
            answered = _answered(index, message, called)
            if answered in pending:
                pending.remove(answered)
            continue
        if pending:
            raise errors.unanswered_tool_calls(index, pending)
        calls = tool_call_ids(message) if role(message) == "assistant" else []
        called, pending, opened = (calls or None), list(calls), index
    if pending:
        # Nothing follows the calls: OpenAI still refuses; the assistant message is to blame.
        raise errors.unanswered_tool_calls(opened, pending)


def _answered(index: int, message: Mapping[str, Any], called: list[str] | None) -> str:
    """The call id a tool message answers, if the calls before it include it."""
    call_id = message.get("tool_call_id")
    # A missing field is a schema error, which OpenAI reports before any ordering problem.
    if not isinstance(call_id, str):
        raise errors.missing_tool_call_id(index)
    if called is None:
        raise errors.orphaned_tool_result(index)
    if call_id not in called:
        raise errors.unknown_tool_call_id(index, call_id)
    return call_id


def check_alternation(messages: Sequence[object]) -> None:
    """Raise `Rejected` when two user or two assistant turns meet (see the module docstring)."""
    previous: str | None = None
    for message in messages:
        speaker = _speaker(message)
        if speaker is None:
            continue
        if speaker == previous:
            raise errors.roles_not_alternating()
        previous = speaker


def _speaker(message: object) -> str | None:
    """ "user" or "assistant" for a turn the template alternates, else None (skipped)."""
    if not isinstance(message, Mapping):
        return None
    name = role(message)
    if name == "user":
        return name
    if name == "assistant" and not (tool_calls(message) or has_function_call(message)):
        return name
    return None
