"""POST /v1/chat/completions through the proxy app, against the recording mock upstream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import free_port

CHAT = "/v1/chat/completions"


def chat_body(**extra: object) -> dict[str, object]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_forwards_body_bytes_unchanged(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    raw = b'{"model": "m",  "messages": [{"role": "user", "content": "hi"}], "top_k": 3}'
    response = await client.post(CHAT, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert upstream.last.body == raw
    assert upstream.last.path == "/v1/chat/completions"


async def test_unknown_fields_survive(client: httpx.AsyncClient, upstream: MockUpstream) -> None:
    vendor = {"top_k": 40, "reasoning_effort": "high", "metadata": {"run": "r1"}}
    await client.post(CHAT, json=chat_body(**vendor))
    forwarded = upstream.last.json()
    assert {key: forwarded[key] for key in vendor} == vendor


async def test_response_relayed_with_provider_headers(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="exactly this", headers={"retry-after": "7"}))
    response = await client.post(CHAT, json=chat_body())
    assert response.json()["choices"][0]["message"]["content"] == "exactly this"
    assert response.headers["x-request-id"].startswith("req_mock_")
    assert response.headers["x-ratelimit-remaining-requests"] == "9999"
    assert response.headers["openai-processing-ms"] == "1"
    assert response.headers["retry-after"] == "7"
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)


async def test_upstream_error_relayed_unchanged(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    error = {"error": {"message": "bad temperature", "type": "invalid_request_error"}}
    upstream.queue(Reply(status=400, error=error))
    response = await client.post(CHAT, json=chat_body(temperature=9))
    assert response.status_code == 400
    assert response.json() == error


async def test_hop_by_hop_headers_not_forwarded(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    headers = {
        "connection": "keep-alive, x-private-hop",
        "x-private-hop": "1",
        "proxy-authorization": "Basic abc",
        "te": "trailers",
        "x-custom": "kept",
    }
    await client.post(CHAT, json=chat_body(), headers=headers)
    sent = {name.lower() for name, _ in upstream.last.headers}
    assert {"x-private-hop", "proxy-authorization", "te"}.isdisjoint(sent)
    assert upstream.last.header("x-custom") == "kept"
    assert upstream.last.header("host") != "proxy"


async def test_client_authorization_forwarded_without_upstream_key(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer sk-client"})
    assert upstream.last.header("authorization") == "Bearer sk-client"


async def test_upstream_key_replaces_client_authorization(
    upstream: MockUpstream, upstream_url: str
) -> None:
    settings = make_settings(upstream_url, upstream={"base_url": upstream_url, "api_key": "sk-up"})
    app = create_app(settings)
    async with LifespanManager(app), _client(app) as http:
        await http.post(CHAT, json=chat_body(), headers={"authorization": "Bearer sk-client"})
    assert [v for k, v in upstream.last.headers if k == "authorization"] == ["Bearer sk-up"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "could not parse the JSON body"),
        (b"[1, 2]", "must be a JSON object, not a JSON array"),
        (b'{"model": "m"}', "Missing required parameter: 'messages'"),
        (b'{"messages": "hi"}', "expected an array, but got a string"),
        (b'{"messages": ["hi"]}', "'messages[0]': expected an object"),
        (b"\xff\xfe", "could not parse the JSON body"),
    ],
)
async def test_bad_body_is_openai_shaped_400(
    client: httpx.AsyncClient, upstream: MockUpstream, raw: bytes, message: str
) -> None:
    response = await client.post(CHAT, content=raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    assert upstream.requests == []


async def test_body_over_limit_is_413(upstream: MockUpstream, upstream_url: str) -> None:
    app = create_app(make_settings(upstream_url, server={"max_body_bytes": 1000}))
    big = chat_body(messages=[{"role": "user", "content": "x" * 2000}])
    async with LifespanManager(app), _client(app) as http:
        declared = await http.post(CHAT, json=big)
        chunked = await http.post(CHAT, content=_chunks(json.dumps(big).encode()))
        small = await http.post(CHAT, json=chat_body())
    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    assert small.status_code == 200
    assert len(upstream.requests) == 1


async def test_unreachable_upstream_is_502() -> None:
    app = create_app(make_settings(f"http://127.0.0.1:{free_port()}/v1"))
    async with LifespanManager(app), _client(app) as http:
        response = await http.post(CHAT, json=chat_body())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"


async def test_slow_upstream_is_504(upstream: MockUpstream, upstream_url: str) -> None:
    upstream.latency_s = 2
    app = create_app(
        make_settings(upstream_url, upstream={"base_url": upstream_url, "timeout_s": 0.2})
    )
    async with LifespanManager(app), _client(app) as http:
        response = await http.post(CHAT, json=chat_body())
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


async def test_unknown_route_is_openai_shaped_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 256):
        yield data[start : start + 256]
