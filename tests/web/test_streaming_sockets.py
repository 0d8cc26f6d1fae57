"""Streaming over real loopback sockets: chunks arrive as they happen, and a client that
hangs up stops the upstream stream. (The in-process ASGI transport buffers, so these need
uvicorn on both sides.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.mock_upstream import MockUpstream, Reply
from proxy.settings import Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve

BODY = {"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True}


@pytest.fixture
async def proxy_url(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings)) as base_url:
        yield base_url


async def _events(response: httpx.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield line.removeprefix("data: ")


async def test_chunks_reach_client_before_upstream_finishes(
    proxy_url: str, upstream: MockUpstream
) -> None:
    hold = asyncio.Event()
    upstream.queue(Reply(content="first-pc second-pc", hold=hold))
    async with (
        httpx.AsyncClient(base_url=proxy_url) as http,
        http.stream("POST", "/v1/chat/completions", json=BODY) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
        seen = [await asyncio.wait_for(anext(events), 5) for _ in range(2)]
        # The upstream is still holding the rest of its answer, yet the client has the start.
        assert not hold.is_set()
        assert '"content": "first-pc"' in seen[1]
        hold.set()
        rest = [event async for event in events]
    assert rest[-1] == "[DONE]"
    assert any('"content": " second-"' in event for event in rest)


async def test_client_disconnect_closes_upstream_stream(
    proxy_url: str, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="tick", endless=True, chunk_delay_s=0.01))
    async with (
        httpx.AsyncClient(base_url=proxy_url) as http,
        http.stream("POST", "/v1/chat/completions", json=BODY) as response,
    ):
        events = _events(response)
        for _ in range(3):
            await asyncio.wait_for(anext(events), 5)
    # Leaving the block hung up mid-stream; the proxy must hang up on the upstream in turn.
    for _ in range(500):
        if upstream.streams_abandoned:
            break
        await asyncio.sleep(0.01)
    assert upstream.streams_abandoned == 1


async def test_upstream_failing_mid_stream_breaks_client_stream(
    upstream: MockUpstream, upstream_url: str
) -> None:
    settings = make_settings(upstream_url, upstream={"base_url": upstream_url, "timeout_s": 0.3})
    upstream.queue(Reply(content="tick", hold=asyncio.Event()))  # never released: silence
    async with (
        serve(create_app(settings)) as proxy,
        httpx.AsyncClient(base_url=proxy) as http,
        http.stream("POST", "/v1/chat/completions", json=BODY) as response,
    ):
        assert response.status_code == 200
        # A clean end here would pass a truncated answer off as complete.
        with pytest.raises(httpx.RemoteProtocolError):
            await response.aread()


async def test_client_giving_up_on_whole_response_cancels_upstream(
    proxy_url: str, upstream: MockUpstream
) -> None:
    upstream.latency_s = 5
    body = {**BODY, "stream": False}
    async with httpx.AsyncClient(base_url=proxy_url, timeout=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/v1/chat/completions", json=body)
    for _ in range(300):
        if upstream.requests_abandoned:
            break
        await asyncio.sleep(0.01)
    assert upstream.requests_abandoned == 1


async def test_non_streaming_responses_keep_alive(proxy_url: str, upstream: MockUpstream) -> None:
    body = {**BODY, "stream": False}
    async with httpx.AsyncClient(base_url=proxy_url) as http:
        replies = [await http.post("/v1/chat/completions", json=body) for _ in range(5)]
    assert {reply.status_code for reply in replies} == {200}
    chats = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 5
