"""What a test scripts and reads back: the replies it queues and the requests it gets."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    id: str = "call_1"


@dataclass(slots=True)
class Reply:
    """One scripted answer to a chat completion."""

    content: str | None = "Hello from the mock upstream."
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    error: JSON | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunk_delay_s: float = 0.0
    # Streams pause after their first content chunk until this event is set.
    hold: asyncio.Event | None = None
    # Streams keep producing a chunk every `chunk_delay_s` until the client goes away.
    endless: bool = False
    # On /v1/messages, a stream that fails after its first delta with this `error` event's
    # error (Anthropic's `{"type": "overloaded_error", "message": "Overloaded"}`, say).
    stream_error: JSON | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A request as the upstream received it."""

    method: str
    path: str
    raw_path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)
