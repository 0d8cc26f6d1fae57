"""Reading a stream as it is relayed: usage, the extra usage chunk, errors.

The proxy needs `usage.prompt_tokens` from every response to calibrate its estimates, so it
asks streams for usage (`stream_options.include_usage`) when the client did not. That adds
one chunk before `[DONE]` whose `choices` is empty; some clients index `choices[0]`
unconditionally, so when the client did not ask for it the chunk is taken out again.

`StreamTap` is fed the raw bytes as they arrive and hands back the bytes to send on: whole
events, unchanged, in order (only the one usage chunk may be dropped). An event is complete
at its blank line; a partial event waits for the rest. JSON is parsed only for the one event
that can be the usage chunk, so relaying costs a byte search per chunk, not a parse per event.

A Responses API stream (`event:` lines, no `[DONE]`) needs no usage requested: its final
`response.completed` event carries the response, usage included, and the tap keeps it. Its
opening events (`response.created`, `response.in_progress`) say nothing about the prompt: an
overflow comes after them, as `response.failed` or an `error` event (`opening_error`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core import jsoncodec

# Events end at a blank line; servers use \n\n, some \r\n\r\n.
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_NULL_USAGE = re.compile(rb'"usage"\s*:\s*null')
# A "usage" key not set to null: only an event holding one can be the usage chunk.
_USAGE_VALUE = re.compile(rb'"usage"(?!\s*:\s*null)')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')


@dataclass(slots=True)
class StreamTap:
    """Splits a stream into events, keeps the usage, drops the usage chunk if asked to."""

    strip_usage_chunk: bool
    usage: dict[str, Any] | None = None
    _pending: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of what arrived so far, to relay now."""
        self._pending += chunk
        if not _USAGE_VALUE.search(self._pending):
            # No event here can be the usage chunk (OpenAI's carry `"usage":null`): every
            # complete one goes on as it is, with no regex match, copy and test per event.
            return take_events(self._pending)
        out = bytearray()
        start = 0
        for end in _EVENT_END.finditer(self._pending):
            event = bytes(self._pending[start : end.end()])
            start = end.end()
            if not self._is_usage_chunk(event) or not self.strip_usage_chunk:
                out += event
        del self._pending[:start]
        return bytes(out)

    def flush(self) -> bytes:
        """Whatever is left when the stream ends (an unterminated last event)."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest

    def _is_usage_chunk(self, event: bytes) -> bool:
        if b'"usage"' not in event or _NULL_USAGE.search(event):
            return False
        data = event_data(event)
        if data is None:
            return False
        response = data.get("response")
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            self.usage = response["usage"]  # a Responses stream's last event: relayed
            return False
        if not isinstance(data.get("usage"), dict):
            return False
        self.usage = data["usage"]
        return _EMPTY_CHOICES.search(event) is not None


def take_events(pending: bytearray) -> bytes:
    """The complete events at the start of `pending`, taken out of it: everything up to
    its last blank line (two line breaks, either of them CRLF), found from the end by two
    searches in C rather than event by event."""
    lf, crlf = pending.rfind(b"\n\n"), pending.rfind(b"\n\r\n")
    if lf < 0 and crlf < 0:  # no event is complete yet
        return b""
    last = max(lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)
    events = bytes(pending[:last])
    del pending[:last]
    return events


def event_data(event: bytes) -> dict[str, Any] | None:
    """The JSON object of an event's `data:` lines, or None (a comment, `[DONE]`, not JSON)."""
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    try:
        value = jsoncodec.loads(b"\n".join(lines))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


# Responses API events that open every stream, before anything about the prompt is known.
_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_FAILED = frozenset({"error", "response.failed"})


def opening_error(buffer: bytes, *, responses: bool) -> bool | None:
    """Whether a stream opens with an error, once `buffer` holds enough to tell (else None).

    A chat stream tells by its first event: an `error` object instead of a chunk. A
    Responses stream tells by its first event after the opening ones: `error` or
    `response.failed`. Either way, nothing has been relayed yet, so an overflow can still
    be retried.
    """
    start = 0
    for end in _EVENT_END.finditer(buffer):
        data = event_data(buffer[start : end.end()])
        start = end.end()
        if not responses:
            return data is not None and "error" in data
        if data is None:
            continue  # a comment (a keep-alive): no news
        kind = data.get("type")
        if kind not in _OPENING:
            return kind in _FAILED or (kind is None and "error" in data)
    return None


def usage_requested_in(raw: bytes, body: Mapping[str, Any]) -> bytes | None:
    """`raw`, the JSON text of `body`, asking for the usage chunk: the option written in
    before its closing brace, so the client's bytes are sent and not `body` serialized
    again (0.1 ms for a long history). None when `body` has `stream_options` of its own
    (`with_usage_requested` merges into them) or `raw` is no JSON object text."""
    if "stream_options" in body:
        return None
    text = raw.rstrip(b" \t\r\n")
    if not text.endswith(b"}"):
        return None
    inner = text[:-1].rstrip(b" \t\r\n")
    separator = b"" if inner.endswith(b"{") else b","
    return inner + separator + b'"stream_options":{"include_usage":true}}'


def with_usage_requested(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`body` asking for the usage chunk, and whether the client had not asked for it."""
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    merged = (
        {**options, "include_usage": True} if isinstance(options, dict) else {"include_usage": True}
    )
    return {**body, "stream_options": merged}, True
