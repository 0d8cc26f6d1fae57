"""`/context`, `/compact` and `/context clear` through the OpenAI SDK: answered by the proxy,
never sent upstream, whole or streamed; off unless `chat_commands: true`."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.settings import Settings
from proxy.web import create_app
from tests.conftest import make_settings

MODEL = "mock-model"
CONTEXT = {"context_window": 8000, "output_reserved": 500, "keep_recent": 2}
TEXT = "the deploy of the billing service is blocked by a failing migration " * 50


@pytest.fixture
def settings(upstream_url: str) -> Settings:
    return make_settings(upstream_url, context=CONTEXT, chat_commands=True)


def sdk(app: FastAPI) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    return openai.AsyncOpenAI(api_key="sk-user", base_url="http://proxy/v1", http_client=http)


async def conversation(app: FastAPI, client: openai.AsyncOpenAI, turns: int) -> list[Any]:
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"step {turn}: {TEXT}"})
        completion = await client.chat.completions.create(model=MODEL, messages=messages)
        messages.append({"role": "assistant", "content": completion.choices[0].message.content})
    service: ProxyService = app.state.service
    await service.settle()
    return messages


def chats(upstream: MockUpstream) -> int:
    return sum(1 for r in upstream.requests if r.path == "/v1/chat/completions")


async def say(client: openai.AsyncOpenAI, history: list[Any], command: str) -> str:
    messages = [*history, {"role": "user", "content": command}]
    completion = await client.chat.completions.create(model=MODEL, messages=messages)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.role == "assistant"
    return completion.choices[0].message.content or ""


async def test_context_reports_the_conversation_without_calling_upstream(
    app: FastAPI, upstream: MockUpstream
) -> None:
    async with sdk(app) as client:
        history = await conversation(app, client, 3)
        answer = await say(client, history, "  /context ")
    assert chats(upstream) == 3
    assert "**Context**" in answer
    assert "of 7,500 prompt tokens" in answer
    assert "| system and developer |" in answer
    assert "3 turns, 0 compactions" in answer


async def test_context_streams_like_a_model(app: FastAPI, upstream: MockUpstream) -> None:
    async with sdk(app) as client:
        history = await conversation(app, client, 1)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[*history, {"role": "user", "content": "/context"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "**Context**" in text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chats(upstream) == 1


async def test_compact_then_clear(app: FastAPI, upstream: MockUpstream) -> None:
    async with sdk(app) as client:
        history = await conversation(app, client, 4)
        answer = await say(client, history, "/compact")
        assert answer.startswith("Compacted (")
        # The next request of the conversation forwards the compacted history.
        history.append({"role": "user", "content": "go on"})
        await client.chat.completions.create(model=MODEL, messages=history)
        compacted = upstream.last.json()["messages"]
        assert len(compacted) < len(history)
        assert "/compact" not in str(compacted)
        cleared = await say(client, history[:-1], "/context clear")
        assert cleared.startswith("Cleared 1 compaction:")
        await client.chat.completions.create(model=MODEL, messages=history)
        assert upstream.last.json()["messages"] == history
        assert (await say(client, history[:-1], "/context clear")).startswith("Nothing to clear")


async def test_commands_need_a_conversation(app: FastAPI, upstream: MockUpstream) -> None:
    async with sdk(app) as client:
        assert (await say(client, [], "/compact")).startswith("Nothing to compact yet")
        assert "0 turns" in await say(client, [], "/context")
    assert chats(upstream) == 0


async def test_commands_are_forwarded_when_off(upstream_url: str, upstream: MockUpstream) -> None:
    app = create_app(make_settings(upstream_url, context=CONTEXT))
    async with LifespanManager(app), sdk(app) as client:
        answer = await say(client, [], "/context")
    assert answer == "Hello from the mock upstream."
    assert upstream.last.json()["messages"] == [{"role": "user", "content": "/context"}]
