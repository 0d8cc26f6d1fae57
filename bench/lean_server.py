"""A lean HTTP/1.1 server for the bench's raw mock app: httptools' parser on an asyncio
protocol, and just enough ASGI for that app (one `http.request` message, responses whole or
chunked).

The mock stands in for a provider on another machine, yet it runs on the bench machine's two
cores beside the proxy. Under uvicorn it spent 0.13 ms of CPU per request of the eight-agent
case, CPU the proxy's workers lack; uvicorn's flow control, timers and header checks are for
clients on the internet, not for the bench's own. Requests are served one at a time per
connection, as the bench's clients send them (no pipelining).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

import httptools

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]

_REASONS = {200: b"OK", 404: b"Not Found", 500: b"Internal Server Error"}


class _Connection(asyncio.Protocol):
    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._keep_alive = True
        self._head: bytes | None = None  # the response's status line and headers, until sent

    # asyncio's protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # uvloop's: not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    # httptools' callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        path = httptools.parse_url(self._url).path.decode("latin-1")
        scope = {
            "type": "http",
            "method": self._parser.get_method().decode("ascii"),
            "path": path,
            "headers": self._headers,
        }
        asyncio.get_running_loop().create_task(self._respond(scope, b"".join(self._body)))

    async def _respond(self, scope: MutableMapping[str, Any], body: bytes) -> None:
        chunked = False

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            nonlocal chunked
            transport = self._transport
            if transport is None:
                return
            if message["type"] == "http.response.start":
                status = message["status"]
                self._head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))
                self._head += b"".join(b"%s: %s\r\n" % pair for pair in message["headers"])
                return
            data, more = message.get("body", b""), message.get("more_body", False)
            if self._head is not None:  # the first body message: whole or chunked from here
                head, self._head = self._head, None
                chunked = more
                framing = (
                    b"transfer-encoding: chunked" if more else b"content-length: %d" % len(data)
                )
                transport.write(head + framing + b"\r\n\r\n" + (b"" if more else data))
                if not more:
                    self._done()
                    return
            if data:
                transport.write(b"%x\r\n%s\r\n" % (len(data), data))
            if not more and chunked:
                transport.write(b"0\r\n\r\n")
                self._done()

        self._head = None
        await self._app(scope, receive, send)

    def _done(self) -> None:
        if not self._keep_alive:
            self._close()

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def serve(app: ASGIApp, *, host: str, port: int, backlog: int) -> None:
    """Serve `app` on `host:port` until cancelled."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(app), host, port, backlog=backlog)
    async with server:
        await server.serve_forever()
