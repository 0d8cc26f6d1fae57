"""Log lines: one JSON object per line (the default), or text, for every logger in the process.

A log collector (Loki, CloudWatch, Elasticsearch) indexes JSON fields without parsing rules
of its own, and one object per line survives any line-based shipper. Each line has `time`
(UTC, ISO 8601), `level`, `logger` and `message`, plus every field the caller passed as
`extra=` (the request log's session, tokens, latency...) and `exception` when there is one.
The text format puts the same extra fields after the message as `key=value`.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

LogFormat = Literal["json", "text"]

# What every LogRecord carries; anything else on a record came in through `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# uvicorn adds an ANSI-coloured copy of its message to some records; the plain one suffices.
_IGNORED = frozenset({"color_message"})


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record was given with `extra=`."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and key not in _IGNORED
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **extra_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(entry, default=str).decode()
        except TypeError:
            # orjson refuses what it cannot represent exactly (integers over 64 bits, keys that
            # are not strings); the standard library writes those too.
            return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...`, for a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = extra_fields(record)
        if not fields:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the fields
        pairs = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        return f"{head} {pairs}{newline}{rest}"


def _text(value: object) -> str:
    if isinstance(value, str) and (not value or any(c.isspace() or c in '"=' for c in value)):
        return json.dumps(value, ensure_ascii=False)
    return "-" if value is None else str(value)


class RefusedHandshakeNoise(logging.Filter):
    """Drops uvicorn's false error after a WebSocket refused with a response of the app's.

    The proxy refuses every WebSocket with a 426 (`proxy.web.routes`) through ASGI's denial
    response. uvicorn's `websockets-sansio` protocol (what `ws="auto"` picks) sends it, then
    logs "ASGI callable returned without completing handshake." at ERROR on every refusal,
    as if the app had not answered (Kludex/uvicorn#3138, open); its own info line
    (`"WebSocket /v1/responses" 426`) says what happened. The proxy accepts no WebSocket,
    so in it that message is never a real one.
    """

    MESSAGE = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.MESSAGE


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Send every logger's records (uvicorn's too) to stderr in `log_format`, at `level`."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    uvicorn = logging.getLogger("uvicorn.error")
    if not any(isinstance(each, RefusedHandshakeNoise) for each in uvicorn.filters):
        uvicorn.addFilter(RefusedHandshakeNoise())
