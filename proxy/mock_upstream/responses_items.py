"""Reading a Responses API request's items, as the mock's provider does.

The mock reads `input` on its own, without `proxy.core.responses`: it stands for the
provider, so it must catch the proxy's translation mistakes rather than share them. Only
what the provider needs is read here: an item's type, its text, its call id, and the chat
view the agent decides from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.mock_upstream.script import JSON

CALLS: Final = frozenset({"function_call", "custom_tool_call"})
"""Items that call a client-side tool; each needs its output later in the input."""
OUTPUTS: Final = {"function_call_output": "function_call", "custom_tool_call_output": "custom"}
"""Items answering a call, with the kind of call their rejection names."""
TEXT_PARTS: Final = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content parts that are text, and the field holding it."""


def input_items(body: Mapping[str, Any]) -> list[JSON]:
    """The request's `input` as a list of items: a string is one user message."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        return []
    return [item for item in raw if isinstance(item, dict)]


def item_type(item: Mapping[str, Any]) -> str:
    """An item's type; a bare `{"role", "content"}` is an easy input message."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else ""


def call_id(item: Mapping[str, Any]) -> str | None:
    value = item.get("call_id")
    return value if isinstance(value, str) else None


def content_text(content: object) -> str:
    """The text of a message's content or a tool output: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        field = TEXT_PARTS.get(part.get("type", "")) if isinstance(part, dict) else None
        if field is not None and isinstance(part.get(field), str):
            texts.append(part[field])
    return "\n".join(texts)


def chat_view(body: Mapping[str, Any], items: Sequence[JSON]) -> JSON:
    """The request as the chat request the agent and the summarizer read: messages, tools
    by name, and the output allowed (`max_output_tokens`).

    Consecutive calls are one assistant message with `tool_calls`, as one round of a turn;
    any other item (a reasoning item opens the next response) ends the round.
    """
    messages: list[JSON] = []
    calls: list[JSON] | None = None
    for item in items:
        kind = item_type(item)
        if kind in CALLS:
            if calls is None:
                calls = []
                messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            calls.append({"id": call_id(item), "type": "function", "function": _function(item)})
            continue
        calls = None
        if kind == "message":
            messages.append(
                {"role": item.get("role"), "content": content_text(item.get("content"))}
            )
        elif kind in OUTPUTS:
            output = content_text(item.get("output"))
            messages.append({"role": "tool", "tool_call_id": call_id(item), "content": output})
    return {
        "model": body.get("model"),
        "messages": messages,
        "tools": _chat_tools(body),
        "max_output_tokens": body.get("max_output_tokens"),
    }


def _function(item: Mapping[str, Any]) -> JSON:
    arguments = item.get("arguments", item.get("input"))
    return {"name": item.get("name"), "arguments": arguments}


def _chat_tools(body: Mapping[str, Any]) -> list[JSON]:
    """The request's tools, renamed into chat's nested form; built-in tools by their type."""
    tools = body.get("tools")
    named = []
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict):
            name = tool.get("name", tool.get("type"))
            named.append({"type": "function", "function": {"name": name}})
    return named
