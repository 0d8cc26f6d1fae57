"""The in-process upstream: the proxy's whole request path against an ASGI app, no socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.upstream import UpstreamRequest
from proxy.errors import UpstreamUnreachableError
from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings

CHAT = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}


def post(path: str, body: object) -> UpstreamRequest:
    headers = [("content-type", "application/json"), ("authorization", "Bearer sk-x")]
    return UpstreamRequest("POST", path, "", headers, json.dumps(body).encode())


@pytest.fixture
async def mock() -> AsyncIterator[tuple[MockUpstream, AsgiUpstream]]:
    provider = MockUpstream()
    upstream = AsgiUpstream(provider.app)
    await upstream.open()
    yield provider, upstream
    await upstream.aclose()


async def test_a_whole_answer_with_its_status_and_headers(
    mock: tuple[MockUpstream, AsgiUpstream],
) -> None:
    provider, upstream = mock
    provider.queue(Reply(content="exactly this"))
    response = await upstream.send(post("chat/completions", CHAT))
    body = json.loads(await response.read())
    response.close()
    assert response.status == 200
    assert dict(response.headers)["x-request-id"].startswith("req_mock_")
    assert body["choices"][0]["message"]["content"] == "exactly this"
    assert provider.last.path == "/v1/chat/completions"
    assert provider.last.header("authorization") == "Bearer sk-x"


async def test_a_stream_arrives_in_chunks_and_closing_it_stops_the_app(
    mock: tuple[MockUpstream, AsgiUpstream],
) -> None:
    provider, upstream = mock
    provider.queue(Reply(content="endless", endless=True, chunk_delay_s=0.01))
    response = await upstream.send(post("chat/completions", {**CHAT, "stream": True}))
    chunks = []
    async for chunk in response.iter_chunks():
        chunks.append(chunk)
        if len(chunks) == 3:
            break
    response.close()
    await asyncio.sleep(0.05)
    assert all(chunk.startswith(b"data: ") for chunk in chunks)
    assert provider.streams_abandoned == 1


async def test_an_app_that_fails_is_an_unreachable_upstream() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    upstream = AsgiUpstream(broken)
    await upstream.open()
    with pytest.raises(UpstreamUnreachableError, match="boom"):
        await upstream.send(post("chat/completions", CHAT))
    with pytest.raises(RuntimeError):
        await AsgiUpstream(broken).send(post("chat/completions", CHAT))


async def test_the_proxy_runs_on_it_without_a_socket() -> None:
    # A Responses stream that fails after its opening events is retried: the whole path,
    # summaries included, in one process.
    provider = MockUpstream(window=3000, default=Reply(content="Done."))
    provider.responses_overflow_in_stream = True
    settings = make_settings("http://unused.invalid/v1", context={"context_window": 16_000})
    app = create_app(settings, upstream=AsgiUpstream(provider.app))
    transport = httpx2.ASGITransport(app=app)
    items: list[Any] = [
        {"role": "user", "content": f"part {n}: " + "word " * 400} for n in range(12)
    ]
    async with (
        LifespanManager(app),
        httpx2.AsyncClient(transport=transport) as http,
        openai.AsyncOpenAI(
            api_key="sk-x", base_url="http://proxy/v1", http_client=http, max_retries=0
        ) as sdk,
    ):
        kinds = [
            event.type
            async for event in await sdk.responses.create(
                model="mock-model", input=items, stream=True
            )
        ]
    assert kinds[-1] == "response.completed"
    assert provider.overflows == 1


async def opened(app: Any) -> AsgiUpstream:
    upstream = AsgiUpstream(app)
    assert not upstream.is_open
    await upstream.open()
    assert upstream.is_open
    return upstream


async def test_an_app_that_answers_with_no_head_is_an_unreachable_upstream() -> None:
    # A server that closes the connection before any status line, or sends body bytes
    # before one: for the proxy, a 502, whatever the broken app did.
    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()

    async def headless(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    for app in (silent, headless):
        upstream = await opened(app)
        with pytest.raises(UpstreamUnreachableError, match="sent no response"):
            await upstream.send(post("chat/completions", CHAT))


async def test_a_body_the_app_ends_by_returning_is_whole_and_other_messages_are_skipped() -> None:
    # An app may return without a final `more_body: False` (the body ends with it, as a
    # connection closing ends an HTTP/1.0 body), and may send messages that carry no body
    # (trailers): neither must hang the reader or reach the client as bytes.
    async def unfinished(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"part one, ", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await send({"type": "http.response.trailers", "headers": [], "more_trailers": False})
        await send({"type": "http.response.body", "body": b"part two", "more_body": True})

    upstream = await opened(unfinished)
    response = await upstream.send(post("chat/completions", CHAT))
    async with asyncio.timeout(5):  # a reader waiting for more would hang here
        chunks = [chunk async for chunk in response.iter_chunks()]
    assert chunks == [b"part one, ", b"part two"]
    response.close()


async def test_an_app_waiting_on_receive_waits_until_the_client_goes_away_then_stops() -> None:
    # After the one request body, `receive` has nothing more to give until the client goes
    # away: it blocks (no made-up message), and closing the response stops the app.
    seen: list[str] = []

    async def listening(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        try:
            seen.append((await receive())["type"])
        finally:
            seen.append("stopped")

    upstream = await opened(listening)
    response = await upstream.send(post("chat/completions", {**CHAT, "stream": True}))
    assert await anext(response.iter_chunks()) == b"data: 1\n\n"
    await asyncio.sleep(0.01)
    assert seen == []  # still waiting on `receive`
    response.close()
    await asyncio.sleep(0.01)
    assert seen == ["stopped"]


@pytest.mark.parametrize("body", ["none", "stream"])
async def test_a_request_body_arrives_whole_with_its_length(body: str) -> None:
    # A GET has no body (the reachability probe's `models`); a passthrough upload is relayed
    # as the client streams it. Either way the app gets one body and a true content-length.
    received: list[tuple[bytes, list[str]]] = []

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        lengths = [value.decode() for name, value in scope["headers"] if name == b"content-length"]
        received.append((message["body"], lengths))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def parts() -> AsyncIterator[bytes]:
        yield b"part one, "
        yield b"part two"

    upstream = await opened(echo)
    headers = [("content-length", "999")]  # the client's, for a body no longer as it was
    if body == "none":
        request = UpstreamRequest("GET", "models", "", headers)
    else:
        request = UpstreamRequest("POST", "files", "", headers, parts())
    response = await upstream.send(request)
    assert await response.read() == b""
    response.close()
    expected = (b"", ["0"]) if body == "none" else (b"part one, part two", ["18"])
    assert received == [expected]
