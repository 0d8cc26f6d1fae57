"""A Responses API response as its stream of server-sent events.

OpenAI names each event twice, in an `event:` line and in the data's `type`, numbers them
with `sequence_number` from 0, and ends the stream with `response.completed` (or
`response.failed`) carrying the whole response, usage included; there is no `[DONE]`.
Between `response.created`/`response.in_progress` and the end, each output item is opened
(`response.output_item.added`), filled with deltas and closed (`response.output_item.done`):

- reasoning: `response.reasoning_summary_part.added`, `..._text.delta`s, `..._text.done`,
  `..._part.done` per summary part;
- a message: `response.content_part.added`, `response.output_text.delta`s,
  `response.output_text.done`, `response.content_part.done`;
- a function call: `response.function_call_arguments.delta`s, then `.done`;
- a compaction item: one `response.compaction.compacting` (no content).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from proxy.mock_upstream.script import JSON

PIECE_CHARS: Final = 8
"""Characters per delta, as the chat stream cuts its content."""
ENDLESS_DELTA: Final = "."


def sse(event: JSON) -> bytes:
    """One event as OpenAI frames it: an `event:` line and a `data:` line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def snapshot(response: JSON, status: str) -> JSON:
    """The response as `response.created` and `response.in_progress` show it: no output yet."""
    return {**response, "status": status, "output": [], "usage": None}


def events(response: JSON, *, endless: bool = False) -> Iterator[JSON]:
    """The stream's events for a completed `response`, numbered.

    With `endless`, the first message never ends: it gets a delta after another, for as long
    as the consumer asks (a model that does not stop).
    """
    unnumbered = _events(response, endless=endless)
    for number, event in enumerate(unnumbered):
        yield {**event, "sequence_number": number}


def failed_events(response: JSON, error: JSON) -> Iterator[JSON]:
    """A stream that starts and fails: created, in progress, then `response.failed`."""
    failed = {**response, "status": "failed", "error": error, "output": [], "usage": None}
    opened = [
        {"type": "response.created", "response": snapshot(response, "in_progress")},
        {"type": "response.in_progress", "response": snapshot(response, "in_progress")},
        {"type": "response.failed", "response": failed},
    ]
    for number, event in enumerate(opened):
        yield {**event, "sequence_number": number}


def _events(response: JSON, *, endless: bool) -> Iterator[JSON]:
    yield {"type": "response.created", "response": snapshot(response, "in_progress")}
    yield {"type": "response.in_progress", "response": snapshot(response, "in_progress")}
    for index, item in enumerate(response["output"]):
        yield {"type": "response.output_item.added", "output_index": index, "item": _opened(item)}
        if item["type"] == "reasoning":
            yield from _summary(index, item)
        elif item["type"] == "message":
            yield from _message(index, item, endless=endless)
            endless = False
        elif item["type"] == "function_call":
            yield from _arguments(index, item)
        elif item["type"] == "compaction":
            # The summary is sampled meanwhile; the event carries none of it.
            yield {"type": "response.compaction.compacting", "item_id": item["id"], **_at(index)}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    yield {"type": "response.completed", "response": response}


def _at(index: int) -> JSON:
    return {"output_index": index}


def _opened(item: JSON) -> JSON:
    """An item as `response.output_item.added` shows it: in progress, nothing in it yet."""
    if item["type"] == "reasoning":
        return {**item, "summary": []}
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return item


def _summary(index: int, item: JSON) -> Iterator[JSON]:
    where = {"item_id": item["id"], "output_index": index}
    for number, part in enumerate(item["summary"]):
        at = {**where, "summary_index": number}
        empty = {"type": "summary_text", "text": ""}
        yield {"type": "response.reasoning_summary_part.added", **at, "part": empty}
        for delta in _pieces(part["text"]):
            yield {"type": "response.reasoning_summary_text.delta", **at, "delta": delta}
        yield {"type": "response.reasoning_summary_text.done", **at, "text": part["text"]}
        yield {"type": "response.reasoning_summary_part.done", **at, "part": part}


def _message(index: int, item: JSON, *, endless: bool) -> Iterator[JSON]:
    where: dict[str, Any] = {"item_id": item["id"], "output_index": index}
    for number, part in enumerate(item["content"]):
        at = {**where, "content_index": number}
        empty = {**part, "text": ""}
        yield {"type": "response.content_part.added", **at, "part": empty}
        for delta in _pieces(part["text"]):
            yield {"type": "response.output_text.delta", **at, "delta": delta, "logprobs": []}
        while endless:
            yield {
                "type": "response.output_text.delta",
                **at,
                "delta": ENDLESS_DELTA,
                "logprobs": [],
            }
        yield {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []}
        yield {"type": "response.content_part.done", **at, "part": part}


def _arguments(index: int, item: JSON) -> Iterator[JSON]:
    where = {"item_id": item["id"], "output_index": index}
    for delta in _pieces(item["arguments"]):
        yield {"type": "response.function_call_arguments.delta", **where, "delta": delta}
    yield {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]}


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]
