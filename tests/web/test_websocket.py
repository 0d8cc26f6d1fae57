"""WebSockets are refused with a 426 before they open, over real sockets: Codex's built-in
provider tries one on `/v1/responses` first, and falls back to HTTPS at once on a 426 only
(on the server's default 403 it retries for about six seconds)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.types import Message
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as sync_connect

from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app
from tests.servers import proxy_process, serve, serve_in_thread

# What Codex 0.171 sends on its handshake, besides the WebSocket's own headers.
CODEX_HEADERS = {
    "authorization": "Bearer sk-dummy",
    "openai-beta": "responses_websockets=2026-02-06",
    "session-id": "01a21a05-e6be-7dd1-ba01-741298adaa82",
    "thread-id": "01a21a05-e6be-7dd1-ba01-741298adaa82",
}


@pytest.fixture
async def ws_url(settings: Settings) -> AsyncIterator[str]:
    """The proxy served as `compaction-proxy serve` serves it: WebSockets reach the app."""
    async with serve(create_app(settings), ws="auto") as base_url:
        yield base_url.replace("http://", "ws://")


async def refusal(url: str) -> InvalidStatus:
    """How the handshake to `url` was refused, as Codex's client sees it."""
    try:
        async with connect(url, additional_headers=CODEX_HEADERS, open_timeout=5):
            pass
    except InvalidStatus as refused:
        return refused
    raise AssertionError("the WebSocket opened")


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/realtime", "/v1/chat/completions"])
async def test_a_websocket_below_v1_is_refused_with_426_and_an_openai_error(
    ws_url: str, upstream: MockUpstream, path: str
) -> None:
    response = (await refusal(ws_url + path)).response
    assert response.status_code == 426
    error = json.loads(response.body or b"")["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "websocket_not_supported"
    assert "POST /v1/responses" in error["message"]
    assert upstream.requests == []  # nothing is forwarded


async def test_refused_handshakes_are_counted_by_route_and_status(ws_url: str) -> None:
    await refusal(ws_url + "/v1/responses")
    await refusal(ws_url + "/")  # no route of ours: the server's own 403
    async with httpx.AsyncClient(base_url=ws_url.replace("ws://", "http://")) as http:
        metrics = (await http.get("/metrics")).text
    assert 'compaction_proxy_requests_total{route="responses",status="426"} 1.0' in metrics
    assert 'compaction_proxy_requests_total{route="other",status="403"} 1.0' in metrics


async def test_a_server_without_websockets_hands_the_handshake_over_and_gets_the_426(
    settings: Settings, upstream: MockUpstream
) -> None:
    # uvicorn without a WebSocket library (or with `ws="none"`, as the demo serves) passes a
    # handshake on as a plain GET carrying `Upgrade: websocket`: refused the same, not
    # forwarded to the upstream as a GET.
    handshake = {"connection": "Upgrade", "upgrade": "websocket", "sec-websocket-version": "13"}
    async with (
        serve(create_app(settings)) as base_url,
        httpx.AsyncClient(base_url=base_url) as http,
    ):
        response = await http.get("/v1/responses", headers={**CODEX_HEADERS, **handshake})
    assert response.status_code == 426
    assert response.json()["error"]["code"] == "websocket_not_supported"
    assert upstream.requests == []


async def test_without_the_denial_extension_the_websocket_is_closed_unopened(
    settings: Settings,
) -> None:
    # A server that cannot send a handshake response of the app's (no ASGI "websocket.http.
    # response" extension) answers a close before accept with its own 403.
    app = create_app(settings)
    scope = {
        "type": "websocket",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "query_string": b"",
        "headers": [],
        "extensions": {},
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert [message["type"] for message in sent] == ["websocket.close"]
    assert 'route="responses",status="403"' in app.state.metrics.exposition()[0].decode()


def test_the_served_proxy_refuses_with_one_info_line_and_no_error() -> None:
    # `compaction-proxy serve` as its own process, uvicorn choosing its WebSocket protocol as
    # deployed: the refusal is logged once, as what it is (uvicorn's false "returned without
    # completing handshake" error is dropped: RefusedHandshakeNoise).
    upstream = MockUpstream()
    with serve_in_thread(upstream.app) as upstream_base, tempfile.TemporaryFile() as stderr:
        args = ["--upstream", f"{upstream_base}/v1", "--log-level", "info"]
        with proxy_process(args, stderr=stderr) as base, pytest.raises(InvalidStatus) as refused:
            sync_connect(base.replace("http://", "ws://") + "/v1/responses").close()
        assert refused.value.response.status_code == 426
        stderr.seek(0)
        lines = [json.loads(line) for line in stderr.read().decode().splitlines()]
    assert [line for line in lines if line["level"] == "error"] == []
    refusals = [line for line in lines if '"WebSocket /v1/responses" 426' in line["message"]]
    assert [line["logger"] for line in refusals] == ["uvicorn.error"]
