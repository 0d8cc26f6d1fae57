"""An automatic compaction's item in the model's answer, where the provider puts it.

When a request asks the provider to compact on its own (`context_management`) and the proxy
does it in the provider's place, the model's answer comes from an upstream that knows
nothing of it: the proxy opens the response's `output` with its `compaction` item, as OpenAI
does (it compacts first, then samples), so the client that appends the output to its
history finds the item before the model's items.

- A whole response (`with_item`): `output` is `[item, *output]`.
- A stream (`ItemFirst`, fed the bytes as they come): the item's own
  `response.output_item.added` and `response.output_item.done` events go right after the
  opening events (`response.created`, `response.in_progress`), before the first of the
  model's; every later event's `output_index` and `sequence_number` move on by one item and
  two events, and the final response (`response.completed`, `.incomplete`, `.failed`) lists
  the item first in its `output`. The opening events are relayed as they came.

An event that is not a Responses event (a comment, a keep-alive, JSON without a `type`) goes
through as it is; a body that is no response (an error) is left alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core import jsoncodec
from proxy.core.compaction_replies import sse
from proxy.core.sse import event_data

_EVENT_END: Final = re.compile(rb"\r?\n\r?\n")
_OPENING: Final = frozenset({"response.created", "response.in_progress", "response.queued"})
_ADDED: Final = 2
"""Events the item adds to a stream: its `output_item.added` and `output_item.done`."""


def with_item(raw: bytes, item: Mapping[str, Any]) -> bytes:
    """A whole response's body with `item` first in its `output` (unchanged when it is no
    response)."""
    try:
        response = jsoncodec.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return raw
    return jsoncodec.dumps(_response_with(response, item))


def _response_with(response: dict[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    return {**response, "output": [dict(item), *response["output"]]}


@dataclass(slots=True)
class ItemFirst:
    """Rewrites a Responses stream, fed as it arrives, to open its output with `item`."""

    item: Mapping[str, Any]
    placed: bool = False
    """Whether the item's events went out (all later events are moved on)."""
    _pending: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of what arrived so far, rewritten, to relay now."""
        self._pending += chunk
        out = bytearray()
        start = 0
        for end in _EVENT_END.finditer(self._pending):
            out += self._event(bytes(self._pending[start : end.end()]))
            start = end.end()
        del self._pending[:start]
        return bytes(out)

    def flush(self) -> bytes:
        """What is left when the stream ends: an unterminated last event, as it came."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest

    def _event(self, event: bytes) -> bytes:
        data = event_data(event)
        kind = None if data is None else data.get("type")
        if data is None or not isinstance(kind, str) or (not self.placed and kind in _OPENING):
            return event
        head = b""
        if not self.placed:
            self.placed = True
            head = self._item_events(data.get("sequence_number"))
        return head + sse(self._moved(data))

    def _item_events(self, number: object) -> bytes:
        """The item's two events, numbered from `number` (the event they come before)."""
        first = number if type(number) is int else 0
        item = dict(self.item)
        events = [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
        return b"".join(
            sse({**event, "sequence_number": first + i}) for i, event in enumerate(events)
        )

    def _moved(self, data: dict[str, Any]) -> dict[str, Any]:
        """An event after the item's: one item and two events on."""
        moved = dict(data)
        if type(moved.get("sequence_number")) is int:
            moved["sequence_number"] += _ADDED
        if type(moved.get("output_index")) is int:
            moved["output_index"] += 1
        response = moved.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            moved["response"] = _response_with(response, self.item)
        return moved
