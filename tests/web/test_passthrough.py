"""Every /v1 path other than chat completions goes through untouched.

Each test runs twice: with the mock upstream on a real socket, and in process (its chunks as it
sent them, the same on every run: the run the coverage gates count, tests/gates.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app


@pytest.fixture(params=["socket", "in-process"])
async def app(
    request: pytest.FixtureRequest, upstream: MockUpstream, settings: Settings
) -> AsyncIterator[FastAPI]:
    if request.param == "socket":
        application = create_app(settings)
    else:
        application = create_app(settings, upstream=AsgiUpstream(upstream.app))
    async with LifespanManager(application):
        yield application


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
async def test_methods_paths_and_queries_pass_through(
    client: httpx.AsyncClient, upstream: MockUpstream, method: str
) -> None:
    response = await client.request(
        method, "/v1/files/file-abc%2Fx/content", params={"limit": "2", "after": "a b"}
    )
    assert response.status_code == 200
    assert upstream.last.method == method
    assert upstream.last.path == "/v1/files/file-abc/x/content"  # the mock's decoded view
    assert upstream.last.query == "limit=2&after=a+b"
    assert response.json()["method"] == method


async def test_raw_path_escapes_kept(client: httpx.AsyncClient, upstream: MockUpstream) -> None:
    await client.get("/v1/files/a%2Fb%20c")
    # The upstream must see the escapes as the client wrote them, not a decoded slash.
    assert upstream.last.raw_path == "/v1/files/a%2Fb%20c"


async def test_request_body_streams_through(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    payload = b"x" * 300_000

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 65536):
            yield payload[start : start + 65536]

    response = await client.post("/v1/files", content=body())
    assert response.status_code == 200
    assert upstream.last.body == payload


async def test_embeddings_body_and_headers_pass_through(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    raw = b'{"model": "text-embedding-3-small", "input": "hi", "dimensions": 8}'
    response = await client.post(
        "/v1/embeddings",
        content=raw,
        headers={"content-type": "application/json", "openai-organization": "org-1"},
    )
    assert upstream.last.body == raw
    assert upstream.last.header("openai-organization") == "org-1"
    assert upstream.last.header("content-length") == str(len(raw))
    assert response.headers["x-request-id"].startswith("req_echo_")


async def test_models_listed_from_upstream(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models")
    assert response.json()["data"][0]["id"] == "mock-model"


async def test_get_on_chat_completions_passes_through(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    # Stored completions are listed with GET on the same path: not ours to handle.
    response = await client.get("/v1/chat/completions", params={"limit": "1"})
    assert response.status_code == 200
    assert (upstream.last.method, upstream.last.query) == ("GET", "limit=1")


async def test_every_passthrough_gets_an_access_line_and_a_route(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Operators see every request: a passthrough's line names its method, path, status
    and times, and the request counter its route (a fixed set of names)."""
    caplog.set_level(logging.INFO, logger="proxy.access")
    headers = {"authorization": "Bearer sk-passing"}
    await client.post("/v1/messages/batches?beta=true", json={"model": "m"}, headers=headers)
    await client.get("/v1/files/file-1/content", headers=headers)
    lines = [r for r in caplog.records if r.name == "proxy.access"]
    assert [r.getMessage() for r in lines] == ["passthrough", "passthrough"]
    first, second = (vars(record) for record in lines)  # the line's fields
    assert (first["method"], first["path"], first["status"]) == (
        "POST",
        "/v1/messages/batches",
        200,
    )
    assert (second["method"], second["path"]) == ("GET", "/v1/files/file-1/content")
    assert first["tenant"]
    assert first["upstream_ms"] >= 0
    assert first["latency_ms"] >= first["upstream_ms"]
    metrics = (await client.get("/metrics")).text
    assert 'compaction_proxy_requests_total{route="messages",status="200"} 1.0' in metrics
    assert 'compaction_proxy_requests_total{route="passthrough",status="200"} 1.0' in metrics
