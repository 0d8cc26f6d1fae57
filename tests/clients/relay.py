"""A recording relay between a real client and the proxy: what the client itself sent.

The mock records what the proxy forwarded; a test that compares it with what the client sent
(aider's files message, opencode's rounds) needs the client's side too, and a client run as
its own process has no event hook to read. So it is pointed at this relay, on loopback, which
passes every request on to the proxy byte for byte and every answer back (streams as they
come), keeping the request's body and the proxy's `x-compaction-*` headers. It numbers each
request it relays in a header of its own (`RELAYED`), which the proxy passes on as it passes
every end-to-end header: the mock's record of the forwarded request carries the same number.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from proxy.mock_upstream import Recorded
from tests.servers import serve_in_thread

RELAYED: Final = "x-test-relayed"
"""The relay's number of a request, sent on to the proxy (and so to the mock)."""
_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer", "host"}
)


@dataclass(frozen=True)
class Sent:
    """One request as the client sent it, and what the proxy said of it in its answer."""

    number: int
    path: str
    body: bytes
    status: int
    headers: dict[str, str]
    """The answer's headers (lower-case names)."""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def applied(self) -> str:
        """The proxy's `x-compaction-applied` ("missing": the proxy did not handle it)."""
        return self.headers.get("x-compaction-applied", "missing")

    @property
    def tokens_before(self) -> int:
        return int(self.headers.get("x-compaction-tokens-before", "-1"))

    @property
    def tokens_after(self) -> int:
        return int(self.headers.get("x-compaction-tokens-after", "-1"))

    @property
    def session(self) -> str:
        return self.headers.get("x-session-id", "missing")


@dataclass
class Relay:
    """Relays to `target` (the proxy's root) and records every request it relayed."""

    target: str
    sent: list[Sent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._relay, methods=["GET", "POST"])])

    def forwarded(self, sent: Sent, requests: list[Recorded]) -> Recorded | None:
        """The request the proxy forwarded for `sent`, among the mock's `requests`."""
        number = str(sent.number)
        return next((r for r in requests if r.header(RELAYED) == number), None)

    async def _relay(self, request: Request) -> StreamingResponse:
        with self._lock:
            number = next(self._numbers)
        body = await request.body()
        headers = [
            (name, value)
            for name, value in request.headers.items()
            if name.lower() not in _HOP_BY_HOP | {"content-length"}
        ]
        headers.append((RELAYED, str(number)))
        client = httpx.AsyncClient(timeout=120, trust_env=False)
        url = f"{self.target}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        upstream = await client.send(
            client.build_request(request.method, url, headers=headers, content=body),
            stream=True,
        )
        answer = {name.lower(): value for name, value in upstream.headers.items()}
        with self._lock:
            self.sent.append(Sent(number, request.url.path, body, upstream.status_code, answer))

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in upstream.aiter_raw():
                yield chunk

        async def close() -> None:
            await upstream.aclose()
            await client.aclose()

        relayed = {
            name: value
            for name, value in upstream.headers.items()
            if name.lower() not in _HOP_BY_HOP | {"content-length"}
        }
        return StreamingResponse(
            chunks(),
            status_code=upstream.status_code,
            headers=relayed,
            background=BackgroundTask(close),
        )


@contextmanager
def relaying(target: str) -> Iterator[tuple[Relay, str]]:
    """A `Relay` to `target`, served on loopback: yields it and its root URL."""
    relay = Relay(target)
    with serve_in_thread(relay.app()) as url:
        yield relay, url
