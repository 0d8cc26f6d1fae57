"""A `Reply` rendered as a Messages API message: its content blocks, usage and envelope.

The shapes follow the `anthropic` SDK's types (`anthropic/types/`: `Message`, `TextBlock`,
`ToolUseBlock`, `ThinkingBlock`, `Usage`), so `client.messages.create(...)` parses what the
mock sends. The content is, in order: a thinking block when the request lets the model think,
the reply's text, then a `tool_use` block per call (the scripted `ToolCall.id` as its id, the
arguments parsed as its input). Message ids are the mock's own: `msg_mock_N`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.mock_upstream.messages_thinking import thinking_block
from proxy.mock_upstream.script import JSON, Reply


@dataclass(frozen=True, slots=True)
class MessagesUsage:
    """What the provider bills: the prompt split by the cache, and the output."""

    input_tokens: int
    """The prompt after the last cache write: `prompt - cache_read - cache_creation`."""
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    output_tokens: int

    @property
    def prompt(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def json(self) -> JSON:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_creation_input_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": self.output_tokens,
            "service_tier": "standard",
        }


def content_blocks(reply: Reply, *, thinking: bool) -> list[JSON]:
    """The message's content for `reply` (a text block always for an endless stream)."""
    content: list[JSON] = [thinking_block(reply)] if thinking else []
    if reply.content is not None or reply.endless:
        content.append({"type": "text", "text": reply.content or ""})
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}
        )
    return content


def _input(arguments: str) -> Any:
    """A call's input: its arguments parsed (a script's arguments are JSON), else as text."""
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return {"arguments": arguments}


def message_object(
    body: Mapping[str, Any], ident: str, content: list[JSON], usage: MessagesUsage
) -> JSON:
    calls = any(block["type"] == "tool_use" for block in content)
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "mock-model")),
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage.json(),
    }
