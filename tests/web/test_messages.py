"""POST /v1/messages through the proxy app, with the official `anthropic` SDK as the client:
what the route does besides compacting (bytes kept, headers, auth, errors in Anthropic's shape,
the untouched paths, count_tokens, the log line and the metrics)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings
from tests.mock_messages import (
    MODEL,
    READ_FILE,
    VERSION,
    assistant,
    request,
    tool_result,
    tool_use,
    user,
)

MESSAGES = "/v1/messages"
HEADERS = {"x-api-key": "sk-ant-client", "anthropic-version": VERSION}


@asynccontextmanager
async def sdk_on(app: FastAPI, **options: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The official async client talking to the proxy app in-process."""
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, timeout=60) as http,
        anthropic.AsyncAnthropic(
            base_url="http://proxy", http_client=http, max_retries=0, **options
        ) as client,
    ):
        yield client


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with sdk_on(app, api_key="sk-ant-client") as client:
        yield client


async def test_an_uncompacted_request_goes_byte_for_byte(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="Hello."))
    raw = (
        b'{"model": "claude-sonnet-4-6", "max_tokens": 64,  "system": [{"type": "text", '
        b'"text": "Be brief.", "cache_control": {"type": "ephemeral"}}], "top_k": 3, '
        b'"messages": [{"role": "user", "content": "hi"}]}'
    )
    response = await client.post(f"{MESSAGES}?beta=true", content=raw, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert upstream.last.body == raw
    assert upstream.last.path == MESSAGES
    assert upstream.last.query == "beta=true"
    assert response.json()["type"] == "message"
    assert response.json()["content"][0]["text"] == "Hello."
    assert response.headers["x-compaction-applied"] == "none"
    assert response.headers["x-session-id"]
    assert int(response.headers["x-compaction-tokens-before"]) > 0


async def test_the_sdk_reads_a_message_and_a_stream(
    sdk: anthropic.AsyncAnthropic, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="Whole answer."), Reply(content="Streamed answer."))
    raw = await sdk.messages.with_raw_response.create(**request(user("hi")))
    message = await raw.parse()
    assert message.content[0].type == "text"
    assert message.content[0].text == "Whole answer."
    assert raw.headers["x-compaction-applied"] == "none"
    body = request(user("hi"), assistant("Whole answer."), user("more"))
    async with sdk.messages.stream(**body) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Streamed answer."
    assert final.stop_reason == "end_turn"
    assert upstream.last.header("authorization") == "Bearer sk-ant-client"
    assert upstream.last.header("anthropic-version") is not None  # the SDK's own, forwarded
