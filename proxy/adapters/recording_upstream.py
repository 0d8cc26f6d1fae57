"""An upstream that keeps the request the service forwards instead of sending it: `inspect`'s.

Why it exists: `compaction-proxy inspect` must show what `serve` would forward for a request
by running `serve`'s own code, not a copy of its decisions. The provider is the one part it
replaces. The service is built as `serve` builds it, with this as its `Upstream`:

- the client's request, as the service forwards it (compacted or not), is recorded and
  answered here with a minimal valid response (no usage, so no calibration is learned), so
  nothing reaches the provider;
- what `serve` asks the upstream before forwarding is let through to the real one:
  `GET models`, for the window of a model nothing else describes, bounded by a time-out
  (a failure is the service's usual "no window reported");
- anything else (a summary, when no summary brain of its own is configured and the
  upstream would write it) is refused as an unreachable upstream, so the service falls
  back as it does when its summarizer fails. A summary brain with its own URL has a client
  of its own and is not routed here.

The client's request is told apart from the service's own calls by a header the caller
puts on it (`RECORD_HEADER`): the service passes the client's headers on with the request
it forwards, and only with it. The header is left out of what is recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from proxy.adapters.upstream import Upstream, UpstreamRequest, fetched, whole
from proxy.core.headers import Headers
from proxy.errors import UpstreamTimeoutError, UpstreamUnreachableError

RECORD_HEADER = "x-compaction-record"
"""Marks the client's request: the one request to record and answer here."""

REFUSED = (
    "inspect sends it nothing but GET models; give --summary-url (or summary_brain.base_url) "
    "to summarize"
)
"""Why a request other than the client's and `GET models` is refused."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A request as the service would have sent it; `path` is relative to the base URL."""

    method: str
    path: str
    query: str
    headers: Headers
    body: bytes

    def json(self) -> Any:
        """The body, parsed."""
        return json.loads(self.body)


class Answer:
    """An `UpstreamResponse` made here: a status, headers and a whole body."""

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers: Headers = headers
        self._body = body

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The rest of the body, in one chunk: read once, as from a socket."""
        body, self._body = self._body, b""
        if body:
            yield body

    def close(self) -> None:
        """Nothing to release."""


class RecordingUpstream:
    """An `Upstream` that records the client's request and answers it itself; `GET models`
    goes to `lookups` (the real upstream), within `lookup_timeout_s`."""

    def __init__(self, lookups: Upstream, *, lookup_timeout_s: float = 10.0) -> None:
        self._lookups = lookups
        self._timeout_s = lookup_timeout_s
        self._open = False
        self.recorded: list[Recorded] = []
        """The client's requests as the service forwarded them, oldest first."""
        self.lookups: list[str] = []
        """What came of each `GET models` let through: its status, or why it failed."""

    @property
    def shown_url(self) -> str:
        return self._lookups.shown_url

    @property
    def is_open(self) -> bool:
        return self._open

    async def open(self) -> None:
        await self._lookups.open()
        self._open = True

    async def aclose(self) -> None:
        self._open = False
        await self._lookups.aclose()

    async def send(self, request: UpstreamRequest) -> Answer:
        """Record and answer the client's request, look up `GET models` upstream, refuse
        the rest (`UpstreamUnreachableError`)."""
        if not self._open:
            raise RuntimeError("RecordingUpstream.open() has not been called")
        if any(name.lower() == RECORD_HEADER for name, _ in request.headers):
            return await self._record(request)
        if request.method == "GET" and request.path == "models":
            return await self._look_up(request)
        raise UpstreamUnreachableError(
            f"The upstream at {self.shown_url} was not asked: {REFUSED}."
        )

    async def _record(self, request: UpstreamRequest) -> Answer:
        body = await whole(request.body)
        headers = [(k, v) for k, v in request.headers if k.lower() != RECORD_HEADER]
        self.recorded.append(Recorded(request.method, request.path, request.query, headers, body))
        return answer_for(request.path, body)

    async def _look_up(self, request: UpstreamRequest) -> Answer:
        where = f"{self.shown_url}/models"
        try:
            async with asyncio.timeout(self._timeout_s):
                response, body = await fetched(self._lookups, request)
        except TimeoutError as exc:
            self.lookups.append(f"{where} did not answer in {self._timeout_s:g} s")
            raise UpstreamTimeoutError(f"The upstream at {self.shown_url} did not answer.") from exc
        except (UpstreamUnreachableError, UpstreamTimeoutError) as exc:
            self.lookups.append(f"{where}: {exc.message}")
            raise
        self.lookups.append(f"{where} answered {response.status}")
        return Answer(response.status, response.headers, body)


def answer_for(path: str, body: bytes) -> Answer:
    """A minimal valid answer to the chat completion, Responses API or Messages API request
    `body` sent to `path`: an empty assistant message, streamed when the request asks for a
    stream."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        request = {}
    request = request if isinstance(request, dict) else {}
    model, stream = request.get("model"), request.get("stream") is True
    if path.rstrip("/").endswith("messages"):
        return _message(model, stream=stream)
    responses = path.rstrip("/").endswith("responses")
    if responses:
        done: dict[str, Any] = {
            "id": "resp_inspect",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": model,
            "output": [],
        }
        if not stream:
            return _json(done)
        return _events(
            [
                {"type": "response.created", "response": {**done, "status": "in_progress"}},
                {"type": "response.completed", "response": done},
            ]
        )
    choice = {"index": 0, "finish_reason": "stop"}
    completion = {"id": "chatcmpl-inspect", "created": 0, "model": model}
    if not stream:
        message = {"role": "assistant", "content": ""}
        return _json({**completion, "object": "chat.completion",
                      "choices": [{**choice, "message": message}]})  # fmt: skip
    chunk = {**completion, "object": "chat.completion.chunk",
             "choices": [{**choice, "delta": {"role": "assistant", "content": ""}}]}  # fmt: skip
    return Answer(200, [("content-type", "text/event-stream")], _data(chunk) + b"data: [DONE]\n\n")


def _message(model: object, *, stream: bool) -> Answer:
    """An empty Messages API message (no usage: nothing to calibrate by), or its events."""
    message = {"id": "msg_inspect", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": "end_turn", "stop_sequence": None}  # fmt: skip
    if not stream:
        return _json(message)
    stopped = {"stop_reason": "end_turn", "stop_sequence": None}
    return _events(
        [
            {"type": "message_start", "message": {**message, "stop_reason": None}},
            {"type": "message_delta", "delta": stopped},
            {"type": "message_stop"},
        ]
    )


def _json(payload: dict[str, Any]) -> Answer:
    return Answer(200, [("content-type", "application/json")], json.dumps(payload).encode())


def _events(events: list[dict[str, Any]]) -> Answer:
    body = b"".join(f"event: {event['type']}\n".encode() + _data(event) for event in events)
    return Answer(200, [("content-type", "text/event-stream")], body)


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
