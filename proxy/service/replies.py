"""The values the service exchanges with the web layer: requests in, replies out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from proxy.adapters.upstream import UpstreamResponse
from proxy.core.headers import Headers, client_response_headers


@dataclass(frozen=True, slots=True)
class Incoming:
    """A client request as the service sees it; `path` is relative to `/v1/`."""

    method: str
    path: str
    query: str
    headers: Headers

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive)."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


@dataclass(frozen=True, slots=True)
class Reply:
    """What to send back: a whole body, or chunks to relay as they arrive.

    `close` must be called once the reply is sent or abandoned; it is synchronous so that it
    also runs in a task being cancelled because the client went away.
    """

    status: int
    headers: Headers
    body: bytes | AsyncIterator[bytes]
    close: Callable[[], None] = field(default=lambda: None)

    def with_headers(self, extra: Headers) -> Reply:
        return Reply(self.status, [*self.headers, *extra], self.body, self.close)


async def buffered(response: UpstreamResponse) -> Reply:
    """The upstream's whole response, read now."""
    try:
        body = await response.read()
    finally:
        response.close()
    return Reply(response.status, client_response_headers(response.headers), body)


def streamed(response: UpstreamResponse) -> Reply:
    """The upstream's response, to relay chunk by chunk as it arrives."""
    return Reply(
        response.status,
        client_response_headers(response.headers),
        response.iter_chunks(),
        response.close,
    )
