"""Passthrough stays below /v1/ however a path is spelled, and chat completions are chat
completions however their path is spelled. Over real sockets on both sides, raw bytes on the
wire: HTTP clients resolve dot segments themselves, so only a raw request shows what a hostile
client can send."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve

UPSTREAM_KEY = "sk-proxy-upstream-key"
CHAT = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]})


@dataclass
class Recorder:
    """The upstream's front door: every path that reached the upstream server, whatever it
    routes to (the mock itself records only what its routes match)."""

    app: ASGIApp
    paths: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["raw_path"].decode("latin-1"))
        await self.app(scope, receive, send)


@dataclass
class Raw:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def send_raw(base_url: str, method: str, target: str, body: str = "") -> Raw:
    """One HTTP/1.1 request with `target` on the wire exactly as given."""
    address = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
        f"Authorization: Bearer sk-client\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body.encode())}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + body.encode())
    await writer.drain()
    response = await asyncio.wait_for(reader.read(-1), 10)
    writer.close()
    await writer.wait_closed()
    return parse(response)


def parse(response: bytes) -> Raw:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = unchunk(body)
    return Raw(int(status_line.split()[1]), headers, body)


def unchunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2 :]


@pytest.fixture
async def recorder(upstream: MockUpstream) -> Recorder:
    return Recorder(upstream.app)


@pytest.fixture
async def recorded_upstream_url(recorder: Recorder) -> AsyncIterator[str]:
    async with serve(recorder) as base_url:
        yield f"{base_url}/v1"


@pytest.fixture
async def proxy_url(recorded_upstream_url: str) -> AsyncIterator[str]:
    settings = make_settings(
        recorded_upstream_url,
        upstream={"base_url": recorded_upstream_url, "api_key": UPSTREAM_KEY},
        server={"max_body_bytes": 4096},
        context={"context_window": 100_000},  # known: the proxy asks no /v1/models
    )
    async with serve(create_app(settings)) as base_url:
        yield base_url


async def test_uvicorn_hands_dot_segments_to_the_app_unresolved() -> None:
    # Why the proxy needs its own guard: the server does not resolve `..` (nor decode `%2e`).
    seen: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen.append(scope["raw_path"])
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    async with serve(app) as base_url:
        await send_raw(base_url, "GET", "/v1/../admin/keys")
        await send_raw(base_url, "GET", "/v1/%2e%2e/admin/keys")
    assert seen == [b"/v1/../admin/keys", b"/v1/%2e%2e/admin/keys"]


ESCAPES = [
    "/v1/../admin/keys",
    "/v1/%2e%2e/admin/keys",
    "/v1/%2E%2e/admin/keys",
    "/v1/.%2E/admin/keys",
    "/v1/files/../../admin/keys",
    "/v1/a%2F..%2F..%2Fadmin/keys",
    "/v1/..%5Cadmin/keys",
    "/v1/..;x/admin/keys",
    "/v1/../v2/models",
    "/v1/models/../../admin",
]


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
@pytest.mark.parametrize("target", ESCAPES)
async def test_paths_leaving_v1_are_404_and_never_reach_the_upstream(
    proxy_url: str, recorder: Recorder, target: str, method: str
) -> None:
    response = await send_raw(proxy_url, method, target, body="{}" if method == "POST" else "")
    assert response.status == 404
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "message" in error
    assert recorder.paths == []


async def test_a_path_resolving_to_the_base_url_is_the_proxys_own_root(
    proxy_url: str, recorder: Recorder
) -> None:
    """`/` answers Claude Code's probe of its base URL; spelled otherwise it is the same."""
    response = await send_raw(proxy_url, "HEAD", "/v1/models/../..")
    assert response.status == 200
    assert recorder.paths == []


async def test_paths_within_v1_still_pass_through_resolved(
    proxy_url: str, recorder: Recorder, upstream: MockUpstream
) -> None:
    response = await send_raw(proxy_url, "GET", "/v1/files/x/../../models")
    assert response.status == 200
    assert response.json()["data"][0]["id"] == "mock-model"
    assert recorder.paths == ["/v1/models"]
    assert upstream.last.header("authorization") == f"Bearer {UPSTREAM_KEY}"


async def test_escapes_inside_a_segment_still_pass_through_as_written(
    proxy_url: str, recorder: Recorder
) -> None:
    response = await send_raw(proxy_url, "GET", "/v1/files/a%2Fb%20c/content")
    assert response.status == 200
    assert recorder.paths == ["/v1/files/a%2Fb%20c/content"]


@pytest.mark.parametrize(
    "target",
    [
        "/v1/./chat/completions",
        "/v1/%2e/chat/completions",
        "/v1//chat/completions",
        "/v1/chat//completions",
        "/v1/chat/completions/",
        "/v1/models/../chat/completions",
    ],
)
async def test_chat_completions_spelled_otherwise_are_compacted_and_sessioned(
    proxy_url: str, recorder: Recorder, upstream: MockUpstream, target: str
) -> None:
    response = await send_raw(proxy_url, "POST", target, body=CHAT)
    assert response.status == 200
    assert response.headers["x-compaction-applied"] == "none"
    assert "x-session-id" in response.headers
    assert "x-context-pressure" in response.headers
    assert recorder.paths == ["/v1/chat/completions"]
    assert upstream.last.json()["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("target", ["/v1/./chat/completions", "/v1//chat/completions"])
async def test_chat_completions_spelled_otherwise_keep_the_body_limit(
    proxy_url: str, recorder: Recorder, target: str
) -> None:
    big = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "x" * 8000}]})
    response = await send_raw(proxy_url, "POST", target, body=big)
    assert response.status == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert recorder.paths == []


async def test_requests_counted_under_the_normalized_route(proxy_url: str) -> None:
    await send_raw(proxy_url, "POST", "/v1/./chat/completions", body=CHAT)
    await send_raw(proxy_url, "GET", "/v1/%2e%2e/admin/keys")
    metrics = (await send_raw(proxy_url, "GET", "/metrics")).body.decode()
    assert 'compaction_proxy_requests_total{route="chat_completions",status="200"} 1.0' in metrics
    assert 'compaction_proxy_requests_total{route="other",status="404"} 1.0' in metrics
