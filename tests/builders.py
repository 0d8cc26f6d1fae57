"""Small message builders, so tests read as conversations rather than walls of dicts."""

from __future__ import annotations

import json
from typing import Any

from proxy.core.messages import Message


def system(content: str = "You are a helpful agent.") -> Message:
    return {"role": "system", "content": content}


def developer(content: str = "Follow the house style.") -> Message:
    return {"role": "developer", "content": content}


def user(content: str = "hi") -> Message:
    return {"role": "user", "content": content}


def assistant(content: str = "ok") -> Message:
    return {"role": "assistant", "content": content}


def assistant_calls(*call_ids: str, name: str = "search", arguments: Any = None) -> Message:
    """An assistant message calling `name` once per id (parallel calls when several)."""
    args = json.dumps(arguments if arguments is not None else {"q": "x"})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id in call_ids
        ],
    }


def tool_result(call_id: str, content: str = "result") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def function_call(name: str = "lookup", arguments: str = "{}") -> Message:
    """A legacy assistant `function_call`."""
    return {
        "role": "assistant",
        "content": None,
        "function_call": {"name": name, "arguments": arguments},
    }


def function_result(name: str = "lookup", content: str = "result") -> Message:
    """The legacy `function` message answering a `function_call`."""
    return {"role": "function", "name": name, "content": content}


def image_user(text: str = "what is this?", url: str = "https://example.com/a.png") -> Message:
    """A multimodal user message: a text part and an image part."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }
