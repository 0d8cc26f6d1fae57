"""Hooks performed on the request path: logs, injected messages, compaction at turn end."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.core.session import tenant_of
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve
from tests.service.agent_run import chat_requests
from tests.service.test_replicas import CONTEXT, HEADERS, long_chat


@asynccontextmanager
async def proxy_with_hooks(
    provider: MockUpstream, hooks: list[dict[str, Any]]
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with serve(provider.app) as base:
        settings = make_settings(
            f"{base}/v1",
            context=CONTEXT,
            models={"mock-model": {"context_window": 3000}},
            hooks=hooks,
        )
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
            yield http, app.state.service


async def post(http: httpx.AsyncClient, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "mock-model", "messages": messages}
    return await http.post("http://proxy/v1/chat/completions", json=body, headers=HEADERS)


async def test_injected_message_reaches_the_model() -> None:
    provider = MockUpstream()
    hook = {
        "on": "turn_start",
        "condition": {"type": "message_count", "threshold": 3},
        "action": {"type": "inject_message", "role": "system", "message": "Turn {turn}: be brief."},
    }
    async with proxy_with_hooks(provider, [hook]) as (http, _):
        await post(http, long_chat(0))
        await post(http, long_chat(2))
    first, second = (r.json()["messages"] for r in chat_requests(provider))
    assert first == long_chat(0)
    assert second[-1] == {"role": "system", "content": "Turn 2: be brief."}  # the same session


async def test_log_hook_at_turn_end(caplog: pytest.LogCaptureFixture) -> None:
    provider = MockUpstream()
    hook = {"on": "turn_end", "action": {"type": "log", "message": "{messages} messages"}}
    async with proxy_with_hooks(provider, [hook]) as (http, service):
        with caplog.at_level(logging.INFO, logger="proxy.compaction"):
            await post(http, long_chat(1))
            await service.aclose()
    assert "hook: 3 messages" in caplog.text


async def test_compaction_at_turn_end_prepares_the_next_turn() -> None:
    provider = MockUpstream()
    hook = {
        "on": "turn_end",
        "condition": {"type": "message_count", "threshold": 20},
        "action": {"type": "compact_context", "strategy": "truncate"},
    }
    async with proxy_with_hooks(provider, [hook]) as (http, service):
        first = await post(http, long_chat(16))
        await service.aclose()  # the turn-end compaction runs in the background
        extended = [*long_chat(16), {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "next"}]  # fmt: skip
        second = await post(http, extended)
    assert first.headers["x-compaction-applied"] == "none"
    assert second.headers["x-compaction-applied"] == "none"  # nothing left to do at start
    forwarded = chat_requests(provider)[-1].json()["messages"]
    assert len(forwarded) < len(extended)
    assert "earlier messages omitted" in str(forwarded)


async def test_history_records_the_summarizer_and_its_cost() -> None:
    provider = MockUpstream()
    async with proxy_with_hooks(provider, []) as (http, service):
        # The conversation grows past the preparation level, its summary is written in the
        # background, and the compaction at the trigger uses it.
        for turns in range(20, 31, 2):
            response = await post(http, long_chat(turns))
            await service.settle()
        state = await service.memory.store.load_session(
            tenant_of("Bearer sk-replicas"), response.headers["x-session-id"]
        )
    assert state is not None
    (record, *_) = state.history
    assert (record.strategy, record.trigger) == ("summarize", "pressure")
    assert record.summarizer_model == "mock-model"
    assert record.summarizer_tokens > 0
    assert record.tokens_after < record.tokens_before
