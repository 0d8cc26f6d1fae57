"""What a Messages API response says the prompt cost: the number calibration compares.

The proxy learns how far its count is from the provider's (`proxy.core.calibration`) from
every response's usage. On the Messages API `usage.input_tokens` is only the part of the
prompt read neither from nor into the prompt cache; the prompt's size is
`input_tokens + cache_creation_input_tokens + cache_read_input_tokens`. `calibration_usage`
adds that sum as `prompt_tokens`, the field the service reads first (a chat completion's),
and keeps every field the provider sent.

A stream states usage twice: `message_start` carries the message with its input counts (and
an `output_tokens` of one or so), `message_delta` the final counts, cumulative, which newer
servers give for the input too. `StreamUsage` is fed the parsed events as they pass (any
event: only those two are read) and holds the latest of each field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

PROMPT_PARTS: Final = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """The prompt's tokens by a Messages `usage`: the uncached input plus the cache's
    reads and writes; None without an `input_tokens` count."""
    counts = [_count(usage.get(name)) for name in PROMPT_PARTS]
    if counts[0] is None:
        return None
    return sum(count for count in counts if count is not None)


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def calibration_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """`usage` with the prompt's size as `prompt_tokens` (when it states one)."""
    total = prompt_tokens(usage)
    return dict(usage) if total is None else {**usage, "prompt_tokens": total}


def response_usage(response: object) -> dict[str, Any] | None:
    """The usage of a Messages response body (parsed JSON), for calibration; None when it
    has none (an error, or not a message)."""
    usage = response.get("usage") if isinstance(response, Mapping) else None
    return calibration_usage(usage) if isinstance(usage, Mapping) else None


@dataclass(slots=True)
class StreamUsage:
    """The usage a Messages stream states, gathered event by event."""

    _fields: dict[str, Any] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Read one event's data (`{"type": "message_start", ...}`); others change nothing."""
        kind = event.get("type")
        usage: object = None
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
        elif kind == "message_delta":
            usage = event.get("usage")
        if isinstance(usage, Mapping):
            # A delta's counts are totals so far, and a null one says nothing.
            self._fields.update({k: v for k, v in usage.items() if v is not None})

    @property
    def usage(self) -> dict[str, Any] | None:
        """The usage so far, for calibration; None before any event stated one."""
        return calibration_usage(self._fields) if self._fields else None


def stream_usage(events: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The usage of a whole stream's events (see `StreamUsage`)."""
    tap = StreamUsage()
    for event in events:
        tap.feed(event)
    return tap.usage
