"""A stream added up into what it carries, as a client that resends its history must (the
demo's agents, the benchmark's, the tests'): a chat completion's assistant message
(`StreamedMessage`), a Responses API response's output items (`StreamedResponse`)."""

from __future__ import annotations

from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemDoneEvent,
    ResponseStreamEvent,
    ResponseUsage,
)


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


class StreamedResponse:
    """Fed a Responses API stream's events in order: `output()` is the output items they
    carry, `usage` the completed response's, `failure` what went wrong if it did not complete.

    The items are taken from `response.output_item.done`, as Codex does: each arrives whole
    there (a reasoning item with its `encrypted_content`), so the deltas need no adding up.
    """

    def __init__(self) -> None:
        self.usage: ResponseUsage | None = None
        self.completed = False
        self.failure: str | None = None
        self._items: dict[int, dict[str, Any]] = {}

    def add(self, event: ResponseStreamEvent) -> None:
        if isinstance(event, ResponseOutputItemDoneEvent):
            self._items[event.output_index] = event.item.model_dump(exclude_none=True)
        elif isinstance(event, ResponseCompletedEvent):
            self.completed = True
            self.usage = event.response.usage
            # The final response carries the items too, for a provider that sent no
            # `output_item.done` events.
            for index, item in enumerate(event.response.output):
                self._items.setdefault(index, item.model_dump(exclude_none=True))
        elif isinstance(event, ResponseFailedEvent):
            error = event.response.error
            self.failure = "response.failed" + (f": {error.code}: {error.message}" if error else "")
        elif isinstance(event, ResponseIncompleteEvent):
            details = event.response.incomplete_details
            self.failure = f"response.incomplete: {details.reason if details else None}"
        elif isinstance(event, ResponseErrorEvent):
            self.failure = f"error: {event.code}: {event.message}"

    def output(self) -> list[dict[str, Any]]:
        return [self._items[index] for index in sorted(self._items)]
