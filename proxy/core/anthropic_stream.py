"""Relaying a Messages API stream event by event, reading its usage as it passes.

A Messages stream (`event:` lines, `message_start` ... `message_stop`) needs nothing added or
taken out: every event goes to the client as it came. Its usage is stated by two events,
`message_start` (the input counts) and `message_delta` (the final counts), which
`proxy.core.anthropic_usage.StreamUsage` gathers; only those two are parsed, found by a byte
search, so relaying costs no JSON parse per text delta.

Its opening needs no reading of its own: an overflow comes as an error status before any
event, and an `error` event opening the stream is read as a chat stream's first event is
(`proxy.core.sse.opening_error`: an object with an `error` key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.core.anthropic_usage import StreamUsage
from proxy.core.sse import event_data, take_events

_EVENT_END = re.compile(rb"\r?\n\r?\n")
_USAGE_EVENTS = (b'"message_start"', b'"message_delta"')


@dataclass(slots=True)
class MessagesTap:
    """Splits a Messages stream into whole events, unchanged, and keeps its usage."""

    _usage: StreamUsage = field(default_factory=StreamUsage)
    _pending: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of what arrived so far, to relay now."""
        self._pending += chunk
        if not any(kind in self._pending for kind in _USAGE_EVENTS):
            return take_events(self._pending)  # text deltas only: nothing to read
        start = 0
        for end in _EVENT_END.finditer(self._pending):
            event = bytes(self._pending[start : end.end()])
            start = end.end()
            if any(kind in event for kind in _USAGE_EVENTS):
                data = event_data(event)
                if data is not None:
                    self._usage.feed(data)
        out = bytes(self._pending[:start])
        del self._pending[:start]
        return out

    def flush(self) -> bytes:
        """Whatever is left when the stream ends (an unterminated last event)."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest

    @property
    def usage(self) -> dict[str, Any] | None:
        """The usage so far, with the prompt's size as `prompt_tokens` (input plus the
        cache's reads and writes); None before an event stated any."""
        return self._usage.usage
