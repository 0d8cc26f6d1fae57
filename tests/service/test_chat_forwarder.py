"""The forwarder's rarer paths, driven in one process through `AsgiUpstream` (no socket):
an overflow compaction cannot fix, a retry the upstream drops, a body that is no JSON, a
stream that ends before its first event is complete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings

CHAT = "/v1/chat/completions"
OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def long_history(rounds: int = 8) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(rounds):
        messages += [
            {"role": "user", "content": f"question {n}: " + "word " * 300},
            {"role": "assistant", "content": f"answer {n}: " + "word " * 300},
        ]
    return [*messages, {"role": "user", "content": "and now?"}]


class Dropping:
    """The mock, except that chat completions after the first `keep` drop the connection."""

    def __init__(self, mock: MockUpstream, keep: int) -> None:
        self.mock, self.keep, self.calls = mock, keep, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == CHAT:
            self.calls += 1
            if self.calls > self.keep:
                raise ConnectionResetError("the upstream dropped the connection")
        await self.mock.app(scope, receive, send)


async def proxy_client(app_upstream: Any) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings("http://unused.invalid/v1", context={"context_window": 16_000})
    app = create_app(settings, upstream=AsgiUpstream(app_upstream))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            yield client


@pytest.fixture
def mock() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
async def client(mock: MockUpstream) -> AsyncIterator[httpx.AsyncClient]:
    async for found in proxy_client(mock.app):
        yield found


async def test_an_overflow_with_nothing_to_compact_is_passed_on_unretried(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    mock.queue(Reply(status=400, error=OVERFLOW))
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400
    assert response.json() == OVERFLOW
    assert response.headers["x-should-retry"] == "false"
    assert len(mock.requests) == 1  # no retry: the emergency plan had nothing to remove


async def test_a_retry_the_upstream_drops_is_a_502() -> None:
    mock = MockUpstream()
    mock.queue(Reply(status=400, error=OVERFLOW))
    dropping = Dropping(mock, keep=1)
    async for client in proxy_client(dropping):
        response = await client.post(CHAT, json={"model": "mock-model", "messages": long_history()})
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert dropping.calls == 2
    assert 'compaction_proxy_retries_total{outcome="failed"} 1.0' in metrics


async def test_a_success_whose_body_is_no_json_is_relayed_as_it_came() -> None:
    async def plain(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive())["type"] != "http.request":
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"not json at all"})

    async for client in proxy_client(plain):
        response = await client.post(CHAT, json={"model": "m", "messages": long_history(1)})
    assert (response.status_code, response.content) == (200, b"not json at all")


async def test_a_stream_that_ends_inside_its_first_event_is_relayed_as_it_came() -> None:
    async def cut(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive())["type"] != "http.request":
            pass
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'data: {"choi', "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async for client in proxy_client(cut):
        body = {"model": "m", "messages": long_history(1), "stream": True}
        response = await client.post(CHAT, json=body)
    assert (response.status_code, response.content) == (200, b'data: {"choi')
