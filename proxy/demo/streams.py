"""A streamed chat completion added up into the assistant message it carries, as a client
that resends its history must (the demo's agents, the benchmark's, the tests')."""

from __future__ import annotations

from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk


class StreamedMessage:
    """Fed a stream's chunks in order; `message()` is the assistant message they make."""

    def __init__(self) -> None:
        self.content = ""
        self.usage: CompletionUsage | None = None
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, chunk: ChatCompletionChunk) -> None:
        self.usage = chunk.usage or self.usage
        if not chunk.choices:
            return
        delta = chunk.choices[0].delta
        self.content += delta.content or ""
        # A tool call arrives in pieces, keyed by its index: the id and name once, the
        # arguments spread over many chunks.
        for part in delta.tool_calls or []:
            entry = self._calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = part.id or entry["id"]
            if part.function:
                entry["name"] += part.function.name or ""
                entry["arguments"] += part.function.arguments or ""

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self._calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in self._calls.values()
            ]  # fmt: skip
        return message
