"""An upstream in the same process: requests go to an ASGI app by a call, not a socket.

`AsgiUpstream` is the `Upstream` the service is built with when the provider is an ASGI app
beside it: the mock provider in tests (the whole request path driven without uvicorn or a
port), or a stand-in for the provider when the proxy is embedded. It keeps what the HTTP
client keeps: the body streams chunk by chunk as the app sends it, and `close()` before the
end is a disconnect, so the app stops generating (its task is cancelled, as a server cancels
the handler of a client that went away).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message

from proxy.adapters.upstream import UpstreamRequest, whole
from proxy.core.headers import Headers
from proxy.errors import UpstreamUnreachableError

_END: Any = object()
"""Put on a response's queue when the app returned."""


class AsgiUpstream:
    """An `Upstream` that calls `app` directly; paths are under `base_path` (`/v1`)."""

    def __init__(self, app: ASGIApp, *, base_path: str = "/v1") -> None:
        self._app = app
        self._base_path = base_path.rstrip("/")
        self.shown_url = f"asgi://in-process{self._base_path}"
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    async def open(self) -> None:
        self._open = True

    async def aclose(self) -> None:
        self._open = False

    async def send(self, request: UpstreamRequest) -> AsgiResponse:
        """Start the app on `request`; return once it has sent its response's head."""
        if not self._open:
            raise RuntimeError("AsgiUpstream.open() has not been called")
        body = await whole(request.body)
        raw_path = f"{self._base_path}/{request.path}"
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": "http",
            "path": unquote(raw_path),
            "raw_path": raw_path.encode("latin-1"),
            "root_path": "",
            "query_string": request.query.encode("latin-1"),
            "headers": _scope_headers(request.headers, len(body)),
            "server": ("in-process", 80),
            "client": ("127.0.0.1", 0),
        }
        response = AsgiResponse()
        response.start(self._app, scope, body)
        await response.head()
        return response


class AsgiResponse:
    """An `UpstreamResponse` of an app running in this process. Always `close()` it."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: Headers = []
        self._messages: asyncio.Queue[Any] = asyncio.Queue()
        self._gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ended = False

    def start(self, app: ASGIApp, scope: dict[str, Any], body: bytes) -> None:
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            await self._messages.put(message)

        async def run() -> None:
            try:
                await app(scope, receive, send)
            except Exception as exc:  # the app failed: for the proxy, an unreachable upstream
                await self._messages.put(exc)
            finally:
                await self._messages.put(_END)

        self._task = asyncio.create_task(run())

    async def head(self) -> None:
        message = await self._next()
        if message is _END or message.get("type") != "http.response.start":
            raise UpstreamUnreachableError("The in-process upstream sent no response.")
        self.status = int(message["status"])
        self.headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in message.get("headers", [])
        ]

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body in the chunks the app sends."""
        while not self._ended:
            message = await self._next()
            if message is _END:
                self._ended = True
                return
            if message.get("type") != "http.response.body":
                continue
            chunk = message.get("body", b"")
            self._ended = not message.get("more_body", False)
            if chunk:
                yield chunk

    def close(self) -> None:
        """Stop the app if its body was not read to the end (a client that went away)."""
        self._gone.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _next(self) -> Any:
        message = await self._messages.get()
        if isinstance(message, Exception):
            raise UpstreamUnreachableError(
                f"The in-process upstream failed: {type(message).__name__}: {message}"
            ) from message
        return message


def _scope_headers(headers: Headers, length: int) -> list[tuple[bytes, bytes]]:
    found = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
        if name.lower() != "content-length"
    ]
    return [*found, (b"content-length", str(length).encode())]
