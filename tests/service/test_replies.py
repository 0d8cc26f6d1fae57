"""The values between the service and the web layer: `Incoming` in, `Reply` out, and the two
ways an upstream response becomes a reply (read whole, or relayed chunk by chunk).

Upstream responses are real ones: the mock provider called in process through `AsgiUpstream`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.upstream import UpstreamRequest
from proxy.errors import UpstreamUnreachableError
from proxy.mock_upstream import MockUpstream
from proxy.mock_upstream import Reply as Scripted
from proxy.service.replies import Incoming, Reply, buffered, streamed

CHAT = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
# Hop-by-hop: `connection`, and the header it names; the rest is the provider's, end to end.
PROVIDER_HEADERS = {"connection": "x-hop", "x-hop": "1", "x-ratelimit-remaining-requests": "9"}


def chat(**extra: Any) -> UpstreamRequest:
    headers = [("content-type", "application/json"), ("authorization", "Bearer sk-x")]
    return UpstreamRequest(
        "POST", "chat/completions", "", headers, json.dumps({**CHAT, **extra}).encode()
    )


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
async def upstream(provider: MockUpstream) -> AsyncIterator[AsgiUpstream]:
    client = AsgiUpstream(provider.app)
    await client.open()
    yield client
    await client.aclose()


def test_a_header_is_found_whatever_its_case_first_value_first() -> None:
    # HTTP header names are case-insensitive; a repeated header answers with its first value.
    headers = [("X-Session-Id", "s1"), ("x-session-id", "s2"), ("Authorization", "Bearer k")]
    incoming = Incoming("POST", "chat/completions", "", headers)
    assert incoming.header("x-session-id") == "s1"
    assert incoming.header("AUTHORIZATION") == "Bearer k"
    assert incoming.header("x-compaction") is None


async def test_headers_added_to_a_reply_keep_its_body_and_its_close() -> None:
    closed: list[bool] = []
    reply = Reply(200, [("content-type", "application/json")], b"{}", lambda: closed.append(True))
    added = reply.with_headers([("x-compaction-applied", "none")])
    assert added.headers == [("content-type", "application/json"), ("x-compaction-applied", "none")]
    assert (added.status, added.body) == (200, b"{}")
    added.close()
    assert closed == [True]
    assert reply.headers == [("content-type", "application/json")]  # the original unchanged


def test_a_reply_with_nothing_to_release_can_be_closed() -> None:
    Reply(204, [], b"").close()  # the default: a body already whole holds nothing


async def test_a_buffered_reply_is_the_whole_answer_with_end_to_end_headers(
    provider: MockUpstream, upstream: AsgiUpstream
) -> None:
    provider.queue(Scripted(content="all of it", headers=PROVIDER_HEADERS))
    reply = await buffered(await upstream.send(chat()))
    assert reply.status == 200
    assert isinstance(reply.body, bytes)
    assert json.loads(reply.body)["choices"][0]["message"]["content"] == "all of it"
    names = [name for name, _ in reply.headers]
    assert "x-ratelimit-remaining-requests" in names
    assert not {"connection", "x-hop", "content-length"} & set(names)


async def test_a_buffered_read_given_up_stops_the_upstream(
    provider: MockUpstream, upstream: AsgiUpstream
) -> None:
    # The client went away while the proxy was reading the answer: the response is closed
    # all the same, so the provider stops generating (and its connection is not left open).
    provider.queue(Scripted(content="more", endless=True, chunk_delay_s=0.01))
    reading = asyncio.create_task(buffered(await upstream.send(chat(stream=True))))
    await asyncio.sleep(0.05)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    await asyncio.sleep(0.02)
    assert provider.streams_abandoned == 1


async def test_an_upstream_failing_mid_body_fails_the_buffered_read() -> None:
    async def head_then_fail(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"partial', "more_body": True})
        raise ConnectionResetError("the provider dropped the connection")

    client = AsgiUpstream(head_then_fail)
    await client.open()
    response = await client.send(chat())
    with pytest.raises(UpstreamUnreachableError, match="dropped the connection"):
        await buffered(response)


async def test_a_streamed_reply_relays_chunks_and_its_close_stops_the_upstream(
    provider: MockUpstream, upstream: AsgiUpstream
) -> None:
    provider.queue(
        Scripted(content="more", endless=True, chunk_delay_s=0.01, headers=PROVIDER_HEADERS)
    )
    reply = streamed(await upstream.send(chat(stream=True)))
    assert reply.status == 200
    assert ("x-ratelimit-remaining-requests", "9") in reply.headers
    assert "x-hop" not in [name for name, _ in reply.headers]
    assert not isinstance(reply.body, bytes)
    chunks = []
    async for chunk in reply.body:
        chunks.append(chunk)
        if len(chunks) == 3:
            break
    assert all(chunk.startswith(b"data: ") for chunk in chunks)
    reply.close()  # the client went away mid-stream
    await asyncio.sleep(0.02)
    assert provider.streams_abandoned == 1
