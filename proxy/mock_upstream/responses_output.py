"""A `Reply` rendered as a Responses API response: its output items, usage and envelope.

The shapes follow the openai SDK's types (`openai/types/responses/`): `ResponseReasoningItem`,
`ResponseOutputMessage` with `output_text` parts, `ResponseFunctionToolCall`, `ResponseUsage`
and `Response`, so that `client.responses.create(...)` parses what the mock sends.

Ids are the mock's own, numbered per mock: `resp_mock_N`, `rs_mock_N`, `msg_mock_N`,
`fc_mock_N`. A call's `call_id` is the scripted `ToolCall.id` (`call_agent_N` for the agent).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.mock_upstream.script import JSON, Reply

ENCRYPTED_BYTES: Final = 240
"""Raw bytes of a reasoning item's ciphertext: about 330 characters once encoded."""


@dataclass(frozen=True, slots=True)
class ResponsesUsage:
    """What the provider bills for one response."""

    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int

    def json(self) -> JSON:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


def output_items(reply: Reply, new_id: Callable[[str], str], *, reasoning: bool) -> list[JSON]:
    """The output items for `reply`: a reasoning item first when `reasoning`, then the
    message (its content; always one for an endless stream), then a call per tool call."""
    items: list[JSON] = []
    if reasoning:
        items.append(reasoning_item(new_id("rs"), reply))
    if reply.content is not None or reply.endless:
        items.append(message_item(new_id("msg"), reply.content or ""))
    for call in reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


def reasoning_item(ident: str, reply: Reply) -> JSON:
    names = ", ".join(call.name for call in reply.tool_calls)
    thought = f"I should call {names} next." if names else "I can answer the user now."
    return {
        "type": "reasoning",
        "id": ident,
        "summary": [{"type": "summary_text", "text": f"**Planning the next step**\n\n{thought}"}],
        "encrypted_content": encrypted_content(ident),
    }


def encrypted_content(ident: str) -> str:
    """An opaque ciphertext for reasoning item `ident`, like OpenAI's Fernet-style tokens."""
    blocks = b"".join(
        hashlib.blake2b(f"{ident}:{index}".encode(), digest_size=60).digest()
        for index in range(ENCRYPTED_BYTES // 60)
    )
    return "gAAAAA" + base64.urlsafe_b64encode(blocks).decode("ascii")


def message_item(ident: str, text: str) -> JSON:
    return {
        "type": "message",
        "id": ident,
        "status": "completed",
        "role": "assistant",
        "content": [output_text(text)],
    }


def output_text(text: str) -> JSON:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_text(items: list[JSON]) -> str:
    """The summary texts of the reasoning items in `items`: what the model's reasoning
    tokens are counted from."""
    return "\n".join(
        part["text"] for item in items if item["type"] == "reasoning" for part in item["summary"]
    )


def response_object(
    body: Mapping[str, Any], ident: str, output: list[JSON], usage: ResponsesUsage | None
) -> JSON:
    """The `Response` envelope, completed; the request's settings are echoed as OpenAI does."""
    reasoning = body.get("reasoning")
    return {
        "id": ident,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": str(body.get("model", "mock-model")),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": reasoning
        if isinstance(reasoning, dict)
        else {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text", {"format": {"type": "text"}}),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage.json() if usage is not None else None,
        "user": None,
        "metadata": body.get("metadata", {}),
    }
