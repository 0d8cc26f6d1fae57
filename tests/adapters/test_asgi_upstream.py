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
