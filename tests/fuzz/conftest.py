"""The proxy in front of an upstream that answers 200 to anything, with either store.

The fuzz suite asserts that the proxy itself never answers 5xx; an upstream that could
answer 5xx would blur what is whose, so this one never does. It answers a stream request
with SSE chunks and anything else with one chat completion, without judging the body.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_server import RedisServer
from tests.servers import serve

CHAT = "/v1/chat/completions"
HEADERS = {"authorization": "Bearer sk-fuzz", "content-type": "application/json"}
_COMPLETION = {
    "id": "chatcmpl-fuzz",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
_CHUNK = {
    "id": "chatcmpl-fuzz",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
}


async def always_ok(scope: Scope, receive: Receive, send: Send) -> None:
    """An upstream that answers every request 200: SSE when asked to stream, else JSON."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if _wants_stream(body):
        content_type = b"text/event-stream"
        answer = f"data: {json.dumps(_CHUNK)}\n\ndata: [DONE]\n\n".encode()
    else:
        content_type, answer = b"application/json", json.dumps(_COMPLETION).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": answer})


def _wants_stream(body: bytes) -> bool:
    # A cheap look, not a parse: the body may be nested past what `json` can read, and this
    # upstream is not what is under test.
    return b'"stream":true' in body.replace(b" ", b"")


@pytest.fixture(scope="session")
def encoders() -> Encoders:
    """The tiktoken encoders, loaded once for every proxy of the suite."""
    return load_encoders()


@pytest.fixture
async def ok_upstream_url() -> AsyncIterator[str]:
    async with serve(always_ok) as base_url:
        yield f"{base_url}/v1"


@pytest.fixture(params=["embedded", "redis"])
def store_section(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The `redis` settings section: the embedded store, or a private redis-server."""
    if request.param == "embedded":
        return {}
    server: RedisServer = request.getfixturevalue("redis_server")
    return {"redis": {"url": server.url}}


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """`app` with its lifespan running, and a client talking to it through ASGI."""
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            yield client


@pytest.fixture
async def fuzz_app(
    ok_upstream_url: str, store_section: dict[str, Any], encoders: Encoders
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The proxy (with the embedded store, then with Redis) and an ASGI client to it."""
    app = create_app(make_settings(ok_upstream_url, **store_section), encoders=encoders)
    async with running(app) as client:
        yield app, client
