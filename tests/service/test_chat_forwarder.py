"""The forwarder's rarer paths, driven in one process through `AsgiUpstream` (no socket):
an overflow compaction cannot fix, a retry the upstream drops, a body that is no JSON, a
stream that ends before its first event is complete."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.mock_upstream import MockUpstream, Reply
from proxy.service import ProxyService
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


async def service_of(client: httpx.AsyncClient) -> ProxyService:
    app = cast(Any, client._transport).app
    return cast(ProxyService, app.state.service)


async def test_an_error_that_is_no_overflow_is_passed_on_at_once(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    """A rate limit is the client's to retry (its SDK knows how): passed on as it came."""
    limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
    mock.queue(Reply(status=429, error=limited, headers={"retry-after": "2"}))
    response = await client.post(CHAT, json={"model": "mock-model", "messages": long_history()})
    assert response.status_code == 429
    assert response.json() == limited
    assert response.headers["retry-after"] == "2"
    assert "x-should-retry" not in response.headers
    assert len(mock.requests) == 1


async def test_an_overflow_teaches_the_window_and_the_compacted_retry_is_answered(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    """The provider's window is smaller than configured: its overflow's numbers are about
    what was sent, so the window is learned; the emergency plan fits it, and the retry is
    answered. The next request is compacted for the learned window before it is sent."""
    mock.window = 3_000
    body = {"model": "mock-model", "messages": long_history()}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200
    assert mock.overflows == 1
    chats = [r for r in mock.requests if r.path == CHAT and r not in mock.summary_requests]
    assert len(chats) == 2
    assert len(chats[1].body) < len(chats[0].body)
    metrics = (await client.get("/metrics")).text
    assert 'compaction_proxy_retries_total{outcome="succeeded"} 1.0' in metrics
    assert 'compaction_proxy_overflow_errors_total{kind="overflow_prompt"} 1.0' in metrics
    again = await client.post(CHAT, json=body)
    assert again.status_code == 200
    assert mock.overflows == 1  # learned: not sent over the provider's window again


async def test_an_overflow_refused_twice_is_passed_on_and_not_to_be_retried(
    client: httpx.AsyncClient, mock: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """The stated prompt (9000) is far from what was sent: its limit is not learned (another
    request's numbers, or another tokenizer's), but the overflow is still retried once."""
    mock.queue(Reply(status=400, error=OVERFLOW), Reply(status=400, error=OVERFLOW))
    response = await client.post(CHAT, json={"model": "mock-model", "messages": long_history()})
    assert response.status_code == 400
    assert response.headers["x-should-retry"] == "false"  # the SDK's retry would meet it too
    assert "not learned" in caplog.text
    metrics = (await client.get("/metrics")).text
    assert 'compaction_proxy_retries_total{outcome="failed"} 1.0' in metrics


async def test_a_retry_refused_for_another_reason_is_passed_on_as_it_came(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    busy = {"error": {"message": "The server is overloaded", "type": "server_error"}}
    mock.queue(Reply(status=400, error=OVERFLOW), Reply(status=503, error=busy))
    response = await client.post(CHAT, json={"model": "mock-model", "messages": long_history()})
    assert response.status_code == 503
    assert "x-should-retry" not in response.headers  # the client may well retry this one


async def test_an_overflow_of_the_output_alone_is_not_retried(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    """`max_tokens` alone fills the window: no shorter history fits, the retry is not spent."""
    mock.window = 3_000
    body = {"model": "mock-model", "messages": long_history(1), "max_tokens": 5_000}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400
    assert response.headers["x-should-retry"] == "false"
    assert mock.overflows == 1


async def test_an_overflow_without_numbers_is_retried_without_a_lesson(
    client: httpx.AsyncClient, mock: MockUpstream
) -> None:
    vague = {"error": {"message": "context length exceeded", "code": "context_length_exceeded"}}
    mock.queue(Reply(status=400, error=vague))
    response = await client.post(CHAT, json={"model": "mock-model", "messages": long_history()})
    assert response.status_code == 200
    service = await service_of(client)
    tenant = service.tenant_of([("authorization", "Bearer sk-test")])
    assert await service.memory.learned_window(tenant, "mock-model") is None


async def test_a_stream_is_relayed_whole_and_its_usage_calibrates(mock: MockUpstream) -> None:
    """The proxy asked for the usage chunk (the client did not): it reads it for the
    calibration and strips it; every other chunk reaches the client as sent."""
    mock.token_factor = 1.25
    async for client in proxy_client(mock.app):
        body = {"model": "mock-model", "messages": long_history(2), "stream": True}
        response = await client.post(CHAT, json=body, headers={"authorization": "Bearer k"})
        service = await service_of(client)
        await service.settle()
        tenant = service.tenant_of([("authorization", "Bearer k")])
        calibration = await service.memory.calibration(tenant, "mock-model")
        # Another answer with the same drift: within 0.002, not written again.
        await client.post(CHAT, json=body, headers={"authorization": "Bearer k"})
        await service.settle()
        assert await service.memory.calibration(tenant, "mock-model") == calibration
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) > 3  # the content, chunk by chunk
    assert '"usage"' not in response.text
    assert calibration is not None
    assert calibration == pytest.approx(1.25, abs=0.05)


async def first_event_overflow(scope: Scope, receive: Receive, send: Send) -> None:
    """A provider that reports an overflow in a 200 stream's first event (older llama.cpp,
    OpenRouter), and streams an answer to a request that fits."""
    body = b""
    while (message := await receive())["type"] == "http.request":
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if len(body) > 10_000:
        error = {"error": {"message": OVERFLOW["error"]["message"], "code": 400}}
        event = b"data: " + json.dumps(error).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
    else:
        chunk = {"choices": [{"index": 0, "delta": {"content": "fits"}}]}
        for part in (b"data: " + json.dumps(chunk).encode() + b"\n\n", b"data: [DONE]\n\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def test_an_overflow_in_a_stream_first_event_is_retried_before_anything_is_relayed() -> None:
    async for client in proxy_client(first_event_overflow):
        body = {"model": "m", "messages": long_history(), "stream": True}
        response = await client.post(CHAT, json=body)
    assert response.status_code == 200
    assert '"fits"' in response.text
    assert "maximum context length" not in response.text


def usage_of_kind(usage: Any) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive())["type"] != "http.request":
            pass
        payload = json.dumps({"choices": [], "usage": usage} if usage != "list" else [1]).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


@pytest.mark.parametrize("usage", [None, "list", {"total_tokens": 12}])
async def test_a_response_without_a_prompt_count_is_relayed_and_calibrates_nothing(
    usage: Any,
) -> None:
    """No usage, a body that is no object, a usage without `prompt_tokens`: relayed as it
    came, the calibration left as it was."""
    async for client in proxy_client(usage_of_kind(usage)):
        response = await client.post(CHAT, json={"model": "m", "messages": long_history(1)})
        service = await service_of(client)
        await service.settle()
        tenant = service.tenant_of([])
        assert await service.memory.calibration(tenant, "m") is None
        (_, _, state), *_ = await service.memory.store.list_sessions(tenant)
    assert response.status_code == 200
    # A usage object is kept for the operator all the same; anything else is no usage.
    assert state.last_usage == (usage if isinstance(usage, dict) else None)
