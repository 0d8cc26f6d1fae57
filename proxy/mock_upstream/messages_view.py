"""A Messages API request as the chat request the mock's players read.

The agent, the recaller and the summarizer decide from chat messages (agent.py, recaller.py,
summarizer.py); the Responses endpoint hands them a chat view of its items, and this is the
Messages endpoint's. The mapping keeps what they read:

- `system` (a string or text blocks) is a system message first; a `system` entry inside
  `messages` (Claude Code's) is a system message in place;
- an assistant message is one assistant message: its text, and its `tool_use` blocks as
  `tool_calls` (the input as a JSON string, the id kept); thinking is not read;
- a user message's `tool_result` blocks are `tool` messages, in order; text beside them
  (Claude Code's `<system-reminder>`s) is read with the last result: a turn of tool results is
  not a new user turn, as the agent counts its rounds from the last user message. A user
  message without results is a user message;
- the tools by name (none when `tool_choice` is `none`), and `max_tokens`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from proxy.mock_upstream.messages_request import (
    block_type,
    blocks,
    messages,
    text_of,
    tools,
)
from proxy.mock_upstream.script import JSON


def chat_view(body: Mapping[str, Any]) -> JSON:
    chat: list[JSON] = []
    system = text_of(body.get("system"))
    if system:
        chat.append({"role": "system", "content": system})
    for message in messages(body):
        role, content = message.get("role"), message.get("content")
        if role == "assistant":
            chat.append(_assistant(content))
        elif role == "user":
            chat.extend(_user(content))
        else:
            chat.append({"role": role, "content": text_of(content)})
    return {
        "model": body.get("model"),
        "messages": chat,
        "tools": _chat_tools(body),
        "max_tokens": body.get("max_tokens"),
    }


def _assistant(content: object) -> JSON:
    message: JSON = {"role": "assistant", "content": text_of(content) or None}
    calls = [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))},
        }
        for block in blocks(content)
        if block_type(block) == "tool_use"
    ]
    if calls:
        message["tool_calls"] = calls
    return message


def _user(content: object) -> list[JSON]:
    said = text_of([block for block in blocks(content) if block_type(block) != "tool_result"])
    results = [
        {
            "role": "tool",
            "tool_call_id": block.get("tool_use_id"),
            "content": text_of(block.get("content")),
        }
        for block in blocks(content)
        if block_type(block) == "tool_result"
    ]
    if not results:
        return [{"role": "user", "content": said}]
    if said:
        results[-1]["content"] = "\n\n".join(filter(None, (results[-1]["content"], said)))
    return results


def _chat_tools(body: Mapping[str, Any]) -> list[JSON]:
    """The request's tools in chat's nested form; server tools by their type."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "none":
        return []
    return [
        {"type": "function", "function": {"name": tool.get("name", tool.get("type"))}}
        for tool in tools(body)
    ]
