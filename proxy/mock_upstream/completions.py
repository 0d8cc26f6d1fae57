"""A `Reply` rendered as an OpenAI chat completion: one JSON object, or stream chunks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.mock_upstream.script import JSON, Reply


@dataclass(frozen=True, slots=True)
class Usage:
    """What the provider bills: the same numbers whole and in a stream's usage chunk."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def json(self) -> JSON:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


class Completion:
    """The chat completion a `Reply` stands for, whole or as stream chunks."""

    def __init__(self, request: JSON, reply: Reply, completion_id: str, usage: Usage) -> None:
        self.request = request
        self.reply = reply
        self.id = completion_id
        self.usage = usage
        self.created = int(time.time())
        self.model = str(request.get("model", "mock-model"))

    def _base(self, obj: str) -> JSON:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _finish_reason(self) -> str:
        return "tool_calls" if self.reply.tool_calls else "stop"

    def whole(self) -> JSON:
        message: JSON = {"role": "assistant", "content": self.reply.content}
        if self.reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": _function(c.name, c.arguments)}
                for c in self.reply.tool_calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason()}
        return {**self._base("chat.completion"), "choices": [choice], "usage": self.usage.json()}

    def delta(self, delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**self._base("chat.completion.chunk"), "choices": [choice]}

    def _call_delta(self, call: JSON) -> JSON:
        return self.delta({"tool_calls": [call]})

    def chunks(self) -> Iterator[JSON]:
        yield self.delta({"role": "assistant", "content": ""})
        for word in _pieces(self.reply.content or ""):
            yield self.delta({"content": word})
        for index, call in enumerate(self.reply.tool_calls):
            head = {"index": index, "id": call.id, "type": "function"}
            yield self._call_delta({**head, "function": _function(call.name, "")})
            for piece in _pieces(call.arguments):
                yield self._call_delta({"index": index, "function": {"arguments": piece}})
        yield self.delta({}, self._finish_reason())
        # As OpenAI: usage only when asked for, in a last chunk with no choices.
        if (self.request.get("stream_options") or {}).get("include_usage"):
            usage = self.usage.json()
            yield {**self._base("chat.completion.chunk"), "choices": [], "usage": usage}


def _function(name: str, arguments: str) -> JSON:
    return {"name": name, "arguments": arguments}


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
