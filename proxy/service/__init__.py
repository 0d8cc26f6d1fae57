"""The service: the one place where the core's decisions meet the I/O edges.

For each request it reads what the core needs, asks the core, performs what the core
decided (today: forward; as compaction lands: load the session, compact, store the
checkpoint, retry on overflow) and hands the web layer a `Reply` to send.

It knows nothing of FastAPI: requests come in as `Incoming` values and leave as `Reply`
values, so the whole path can be driven without an HTTP server.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass

from proxy.adapters.store import Store, StoreUnavailableError
from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import Upstream, UpstreamRequest, UpstreamResponse
from proxy.core.headers import Headers, client_response_headers, upstream_request_headers
from proxy.core.policy import ModelPolicies
from proxy.core.request import parse_chat_request


@dataclass(frozen=True, slots=True)
class Incoming:
    """A client request as the service sees it; `path` is relative to `/v1/`."""

    method: str
    path: str
    query: str
    headers: Headers


@dataclass(frozen=True, slots=True)
class Reply:
    """What to send back: a whole body, or chunks to relay as they arrive.

    `close` must be called once the reply is sent or abandoned; it is synchronous so that it
    also runs in a task being cancelled because the client went away.
    """

    status: int
    headers: Headers
    body: bytes | AsyncIterator[bytes]
    close: Callable[[], None]


class ProxyService:
    """Forwards OpenAI-compatible requests, compacting chat completions on the way."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        store: Store,
        policies: ModelPolicies,
        encoders: Encoders,
        upstream_api_key: str | None = None,
    ) -> None:
        self._upstream = upstream
        self._store = store
        self._policies = policies
        self._encoders = encoders
        self._api_key = upstream_api_key

    async def chat_completion(self, incoming: Incoming, raw: bytes) -> Reply:
        """Forward a chat completion; streams are relayed chunk by chunk, never buffered."""
        request = parse_chat_request(raw)
        # Nothing is changed yet, so the client's exact bytes go upstream: no re-serialisation
        # cost, and fields we do not know cannot be lost.
        response = await self._upstream.send(
            UpstreamRequest(
                method="POST",
                path=incoming.path,
                query=incoming.query,
                headers=upstream_request_headers(incoming.headers, api_key=self._api_key),
                body=raw,
            )
        )
        if request.stream:
            return _streamed(response)
        return await _buffered(response)

    async def passthrough(self, incoming: Incoming, body: AsyncIterable[bytes] | None) -> Reply:
        """Forward any other `/v1/*` request untouched, streaming both bodies."""
        response = await self._upstream.send(
            UpstreamRequest(
                method=incoming.method,
                path=incoming.path,
                query=incoming.query,
                headers=upstream_request_headers(
                    incoming.headers, api_key=self._api_key, keep_content_length=True
                ),
                body=body,
            )
        )
        return _streamed(response)

    async def readiness(self) -> dict[str, str]:
        """What is not usable, by part; empty when the proxy is ready to serve."""
        problems: dict[str, str] = {}
        if not self._upstream.is_open:
            problems["upstream"] = "the upstream client is closed"
        try:
            await self._store.ping()
        except StoreUnavailableError as exc:
            problems["store"] = str(exc)
        return problems


async def _buffered(response: UpstreamResponse) -> Reply:
    try:
        body = await response.read()
    finally:
        response.close()
    return Reply(response.status, client_response_headers(response.headers), body, _nothing)


def _streamed(response: UpstreamResponse) -> Reply:
    return Reply(
        response.status,
        client_response_headers(response.headers),
        response.iter_chunks(),
        response.close,
    )


def _nothing() -> None:
    return None
