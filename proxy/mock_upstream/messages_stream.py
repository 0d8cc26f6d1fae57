"""A Messages API message as its stream of server-sent events.

Anthropic names each event twice, in an `event:` line and in the data's `type`; there is no
`[DONE]`. In order: `message_start` (the message with no content yet, its input usage and
`output_tokens` 1), then per content block `content_block_start` (the block empty),
its deltas and `content_block_stop`; `message_delta` (the stop reason, and the usage so far:
input, cache counts and all output) and `message_stop`. A `ping` comes after the first block
opens, as the API sends one. The deltas:

- text: `text_delta`s;
- thinking: `thinking_delta`s, then one `signature_delta` with the whole signature;
- tool_use: `input_json_delta`s whose `partial_json` pieces make the input's JSON.

An `error` event (`overloaded_error`, say) can end a stream that has started: with
`stream_error`, it comes after the first delta and nothing follows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

from proxy.mock_upstream.script import JSON

PIECE_CHARS: Final = 8
"""Characters per delta, as the chat stream cuts its content."""
ENDLESS_DELTA: Final = "."


def sse(event: JSON) -> bytes:
    """One event as Anthropic frames it: an `event:` line and a `data:` line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def events(
    message: JSON, *, endless: bool = False, stream_error: JSON | None = None
) -> Iterator[JSON]:
    """The stream's events for a whole `message`.

    With `endless`, the first text block never ends: it gets a delta after another, for as
    long as the consumer asks (a model that does not stop). With `stream_error`, the stream
    ends with that `error` event after its first delta.
    """
    usage = message["usage"]
    started = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    yield {"type": "message_start", "message": {**started, "usage": {**usage, "output_tokens": 1}}}
    if not message["content"]:
        yield {"type": "ping"}
    for index, block in enumerate(message["content"]):
        yield {"type": "content_block_start", "index": index, "content_block": _opened(block)}
        if index == 0:
            yield {"type": "ping"}
        for delta in _deltas(block, endless=endless):
            yield {"type": "content_block_delta", "index": index, "delta": delta}
            if stream_error is not None:
                yield {"type": "error", "error": stream_error}
                return
        yield {"type": "content_block_stop", "index": index}
    if stream_error is not None:  # no delta to fail after: the stream fails before its end
        yield {"type": "error", "error": stream_error}
        return
    stopped = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    totals = {name: usage[name] for name in _DELTA_USAGE}
    yield {"type": "message_delta", "delta": stopped, "usage": totals}
    yield {"type": "message_stop"}


_DELTA_USAGE: Final = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


def _opened(block: JSON) -> JSON:
    """A block as `content_block_start` shows it: nothing in it yet."""
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if block["type"] == "tool_use":
        return {**block, "input": {}}
    return block  # redacted thinking (and any other block) comes whole, as Anthropic sends it


def _deltas(block: JSON, *, endless: bool) -> Iterator[JSON]:
    if block["type"] == "text":
        for piece in _pieces(block["text"]):
            yield {"type": "text_delta", "text": piece}
        while endless:
            yield {"type": "text_delta", "text": ENDLESS_DELTA}
    elif block["type"] == "thinking":
        for piece in _pieces(block["thinking"]):
            yield {"type": "thinking_delta", "thinking": piece}
        yield {"type": "signature_delta", "signature": block["signature"]}
    elif block["type"] == "tool_use":
        for piece in _pieces(json.dumps(block["input"])):
            yield {"type": "input_json_delta", "partial_json": piece}


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]
