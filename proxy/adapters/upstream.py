"""The upstream HTTP client: one pooled aiohttp session to the OpenAI-compatible server.

Why aiohttp and not httpx: the client runs once per proxied request, so its CPU cost is the
proxy's floor. Measured side by side (`bench/http_client.py`, results in `bench/README.md`),
aiohttp costs under a third of httpx over aiohttp's own transport and a fourteenth of plain
httpx, whose pool also collapses under concurrency (encode/httpx#3215).

What the proxy needs from it, and how each is met:

- Bytes untouched: `auto_decompress=False`, so a gzip body is relayed as gzip with its
  `content-encoding`; aiohttp's automatic headers (`User-Agent`, `Accept`,
  `Accept-Encoding`, `Content-Type`) are suppressed unless the client sent them itself.
- No state shared between clients: a dummy cookie jar, so a cookie one client's request
  earned is never sent with another's.
- An outbound HTTP(S) proxy from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`, like every HTTP client,
  but looked up once when the pool opens: aiohttp's own `trust_env` re-reads the environment
  and `~/.netrc` in a worker thread on every request, a third of the proxy's CPU when profiled.
- Streaming: the body is read in whatever chunks arrive (`iter_any`), never buffered.
- Closing from a cancelled task: `UpstreamResponse.close()` is synchronous, so it still runs
  when the client disconnects and the relay task is being cancelled.
- Failures as the error tree: connection failures become `UpstreamUnreachableError` (502),
  time-outs `UpstreamTimeoutError` (504); their messages show the URL with its password
  hidden.
- Credentials in the base URL (`https://user:pass@host/v1`, an upstream behind Basic auth):
  aiohttp refuses a request with both those and an `Authorization` header (a `ValueError`,
  so a 500), and one header carries one credential. They are taken out of the URL and sent
  as `Authorization: Basic`, in place of the client's: the operator set them for this
  upstream, as with `upstream.api_key` (which the settings refuse alongside them), and a
  client cannot know them.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

from proxy.core.headers import Headers
from proxy.core.urls import redact, split_credentials
from proxy.errors import UpstreamTimeoutError, UpstreamUnreachableError

Body = bytes | AsyncIterable[bytes] | None


async def whole(body: Body) -> bytes:
    """`body` read whole (an in-process upstream hands an app its request in one piece)."""
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    return b"".join([chunk async for chunk in body])


# Headers aiohttp would add on its own; a transparent proxy sends only what the client sent.
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One request to the upstream; `path` is relative to `upstream.base_url`."""

    method: str
    path: str
    query: str
    headers: Headers
    body: Body = None


class UpstreamResponse(Protocol):
    """An upstream response whose body has not been read yet. Always `close()` it."""

    status: int
    headers: Headers

    async def read(self) -> bytes:
        """The whole body, as sent."""

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body in the chunks it arrives in."""

    def close(self) -> None:
        """Release the response; a body not read to its end tells the upstream to stop."""


class Upstream(Protocol):
    """What the service needs of the upstream: send a request, get its response's head.

    `AiohttpUpstream` speaks HTTP to a server; `proxy.adapters.asgi_upstream.AsgiUpstream`
    calls an ASGI app in the same process (tests, and `inspect`'s stand-ins).
    """

    @property
    def shown_url(self) -> str:
        """Where it sends, as messages and logs show it (a password hidden)."""

    @property
    def is_open(self) -> bool:
        """Whether requests can be sent (between `open` and `aclose`)."""

    async def open(self) -> None:
        """Get ready to send; inside the event loop that will use it."""

    async def aclose(self) -> None:
        """Stop; responses still open may fail."""

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send `request` and return once the response headers have arrived."""


async def fetched(upstream: Upstream, request: UpstreamRequest) -> tuple[UpstreamResponse, bytes]:
    """Send `request` and read its whole body (the response closed either way): for the
    proxy's own small requests (`/models`, a summary), never a client's stream."""
    response = await upstream.send(request)
    try:
        return response, await response.read()
    finally:
        response.close()


class AiohttpResponse:
    """An `UpstreamResponse` of aiohttp's."""

    def __init__(self, response: aiohttp.ClientResponse, *, base_url: str) -> None:
        self._response = response
        self._base_url = base_url  # as errors show it: its password hidden
        self.status = response.status
        self.headers: Headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in response.raw_headers
        ]

    async def read(self) -> bytes:
        """The whole body, as sent (still encoded if the upstream compressed it)."""
        with _translate_errors(self._base_url):
            return await self._response.read()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body in the chunks it arrives in; for relaying streams as they happen."""
        with _translate_errors(self._base_url):
            async for chunk in self._response.content.iter_any():
                yield chunk

    def close(self) -> None:
        """Give the connection back to the pool, or drop it if the body was not read."""
        if self._response.content.at_eof():
            self._response.release()
        else:
            # Unread body: the connection cannot be reused; closing it also tells the upstream
            # to stop generating (it sees the disconnect), which is what a client that went
            # away wants.
            self._response.close()


class AiohttpUpstream:
    """A pooled client for the upstream server at `base_url` (e.g. `https://api.openai.com/v1`).

    `base_url` stays as given, credentials included (a summarizer on the same upstream is
    built from it); show `shown_url` instead.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        max_connections: int = 1000,
        keepalive_s: float = 4.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact(self.base_url)
        self._url, credentials = split_credentials(self.base_url)
        self._authorization = None if credentials is None else credentials.basic()
        # sock_read bounds the wait for each next piece of data, not the whole response:
        # a long stream that keeps producing is fine, a silent upstream is not.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def is_open(self) -> bool:
        return self._session is not None and not self._session.closed

    async def open(self) -> None:
        """Create the connection pool; must run inside the event loop that will use it."""
        # Idle connections are dropped before the upstream's own idle time-out (5 s for
        # uvicorn, Node, llama.cpp): a POST sent on a connection the server is closing
        # fails, and neither aiohttp nor we may resend a POST (it is not idempotent).
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=0,
            keepalive_timeout=self._keepalive_s,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            proxy=outbound_proxy(self._url),
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, request: UpstreamRequest) -> AiohttpResponse:
        """Send `request` and return once the response headers have arrived."""
        if self._session is None:
            raise RuntimeError("AiohttpUpstream.open() has not been called")
        url = f"{self._url}/{request.path}"
        if request.query:
            url = f"{url}?{request.query}"
        headers = CIMultiDict(request.headers)
        if self._authorization is not None:
            headers["Authorization"] = self._authorization  # replaces the client's
        with _translate_errors(self.shown_url):
            response = await self._session.request(
                request.method,
                url,
                headers=headers,
                data=request.body,
                skip_auto_headers=[name for name in _AUTO_HEADERS if name not in headers],
                allow_redirects=False,
            )
        return AiohttpResponse(response, base_url=self.shown_url)


def outbound_proxy(url: str) -> str | None:
    """The HTTP(S) proxy the environment asks for to reach `url`, or None."""
    parts = urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


@contextmanager
def _translate_errors(base_url: str) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # aiohttp's time-outs subclass asyncio's, now the builtin
        raise UpstreamTimeoutError(f"The upstream at {base_url} did not answer in time.") from exc
    except aiohttp.ClientError as exc:
        raise UpstreamUnreachableError(
            f"The upstream at {base_url} could not be reached: {redact(_reason(exc))}"
        ) from exc


def _reason(exc: aiohttp.ClientError) -> str:
    return str(exc) or type(exc).__name__
