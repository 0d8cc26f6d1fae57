"""The aiohttp upstream client, against real loopback servers."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.adapters.upstream import AiohttpUpstream, UpstreamRequest, outbound_proxy
from proxy.errors import UpstreamTimeoutError, UpstreamUnreachableError
from proxy.mock_upstream import MockUpstream
from tests.servers import free_port, serve


def _get(path: str, headers: list[tuple[str, str]] | None = None) -> UpstreamRequest:
    return UpstreamRequest("GET", path, "", headers or [])


async def _gzip(request: Request) -> Response:
    return Response(gzip.compress(b'{"ok": true}'), headers={"content-encoding": "gzip"})


async def _cookie(request: Request) -> Response:
    return Response(request.headers.get("cookie", ""), headers={"set-cookie": "session=abc"})


async def _peer(request: Request) -> Response:
    """The client's port: a new one means a new connection."""
    assert request.client is not None
    return Response(str(request.client.port))


async def _stalls(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await asyncio.sleep(5)
        yield b"data: never\n\n"

    return StreamingResponse(body())


@pytest.fixture
async def server_url() -> AsyncIterator[str]:
    app = Starlette(
        routes=[
            Route("/v1/gzip", _gzip),
            Route("/v1/cookie", _cookie),
            Route("/v1/stalls", _stalls),
            Route("/v1/peer", _peer, methods=["POST"]),
        ]
    )
    async with serve(app) as base_url:
        yield f"{base_url}/v1"


@pytest.fixture
async def client(server_url: str) -> AsyncIterator[AiohttpUpstream]:
    upstream = AiohttpUpstream(server_url, timeout_s=0.3)
    await upstream.open()
    yield upstream
    await upstream.aclose()


async def test_compressed_body_relayed_as_sent(client: AiohttpUpstream) -> None:
    response = await client.send(_get("gzip", [("accept-encoding", "gzip")]))
    body = await response.read()
    response.close()
    assert ("content-encoding", "gzip") in response.headers
    assert gzip.decompress(body) == b'{"ok": true}'


async def test_cookies_never_carried_between_requests(client: AiohttpUpstream) -> None:
    for _ in range(2):
        response = await client.send(_get("cookie"))
        assert await response.read() == b""
        response.close()


async def test_no_headers_added_that_the_client_did_not_send(
    upstream_url: str, upstream: MockUpstream
) -> None:
    client = AiohttpUpstream(upstream_url, timeout_s=5)
    await client.open()
    try:
        response = await client.send(_get("anything", [("x-only", "this")]))
        await response.read()
        response.close()
    finally:
        await client.aclose()
    names = {name.lower() for name, _ in upstream.last.headers}
    assert names == {"host", "x-only"}


async def test_silence_mid_stream_is_timeout(client: AiohttpUpstream) -> None:
    response = await client.send(_get("stalls"))
    chunks = response.iter_chunks()
    assert await anext(chunks) == b"data: first\n\n"
    with pytest.raises(UpstreamTimeoutError):
        await anext(chunks)
    response.close()


async def test_refused_connection_is_unreachable() -> None:
    client = AiohttpUpstream(f"http://127.0.0.1:{free_port()}/v1", timeout_s=5)
    await client.open()
    try:
        with pytest.raises(UpstreamUnreachableError, match="could not be reached"):
            await client.send(_get("models"))
    finally:
        await client.aclose()


async def test_send_before_open_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="open"):
        await AiohttpUpstream("http://127.0.0.1:1/v1", timeout_s=1).send(_get("models"))


def test_outbound_proxy_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://corp-proxy:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example,localhost")
    assert outbound_proxy("https://api.openai.com/v1") == "http://corp-proxy:3128"
    assert outbound_proxy("https://internal.example/v1") is None
    assert outbound_proxy("http://api.openai.com/v1") is None  # no HTTP_PROXY set


def test_no_outbound_proxy_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "https_proxy",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert outbound_proxy("https://api.openai.com/v1") is None


async def test_an_idle_connection_is_not_reused_past_its_keepalive(server_url: str) -> None:
    # uvicorn, Node and llama.cpp close idle connections after 5 s; a POST sent on one at that
    # moment fails and is never resent. Dropping them sooner (here 0.3 s) avoids the race.
    upstream = AiohttpUpstream(server_url, timeout_s=2, keepalive_s=0.3)
    await upstream.open()

    async def port() -> bytes:
        response = await upstream.send(UpstreamRequest("POST", "peer", "", [], b"{}"))
        try:
            return await response.read()
        finally:
            response.close()

    try:
        first = await port()
        assert await port() == first  # reused while fresh
        await asyncio.sleep(0.6)
        assert await port() != first
    finally:
        await upstream.aclose()


async def test_the_query_string_goes_upstream_with_the_path(
    upstream_url: str, upstream: MockUpstream
) -> None:
    # Passthrough endpoints take their options in the query (`GET /v1/models?limit=2`).
    client = AiohttpUpstream(upstream_url, timeout_s=5)
    await client.open()
    try:
        response = await client.send(UpstreamRequest("GET", "models", "limit=2&order=asc", []))
        response.close()
    finally:
        await client.aclose()
    assert (upstream.last.path, upstream.last.query) == ("/v1/models", "limit=2&order=asc")


async def test_is_open_between_open_and_close_and_closing_twice_is_harmless() -> None:
    # Readiness reads `is_open`; shutdown closes every client, one that never opened (a
    # startup that failed halfway) or already closed included, without raising.
    client = AiohttpUpstream("http://127.0.0.1:9/v1", timeout_s=1)
    assert not client.is_open
    await client.aclose()
    await client.open()
    assert client.is_open
    await client.aclose()
    assert not client.is_open
    await client.aclose()
