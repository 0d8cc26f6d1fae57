"""Reversible compaction end to end: a value only a cleared tool result held is recalled.

The official SDK drives a tool-using agent (the mock's `AgentScript`) through the proxy in
front of a window far smaller than the conversation; the first file read holds a value no
later message repeats. Compaction clears that result; the user's late question needs it; the
mock, playing a model that calls `context_recall` when a placeholder names what it needs,
gets it back from the proxy. The client sees one answer and never the tool.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.demo.streams import StreamedMessage
from proxy.mock_upstream import AgentScript, MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve_in_thread
from tests.service.agent_run import TOOLS, chat_requests, sdk_for

WINDOW = 6000
CONTEXT = {"output_reserved": 500, "keep_recent": 6, "summary_max_tokens": 400}
SECRET = "marmalade-sky"  # no id, path or number: no trail keeps it
SCRIPT = AgentScript(
    calls=tuple(("read_file", json.dumps({"path": f"config/part_{i}.env"})) for i in range(12)),
    rounds_per_turn=2,
)


def file_text(path: str) -> str:
    lines = [f"# {path}"]
    if path == "config/part_0.env":
        lines.append(f"DEPLOY_TOKEN={SECRET}")
    lines += [f"SETTING_{n}=value-{n} # a setting of {path}" for n in range(45)]
    return "\n".join(lines)


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(
        window=WINDOW, strict=True, roles_alternate=True, agent=SCRIPT, recaller=True
    )


@pytest.fixture
async def sdk(provider: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    # In process: the upstream's reads are the chunks the mock sent, the same on every run (a
    # socket's would be split as the kernel chose: tests/gates.py); the real sockets have a
    # test of their own below.
    settings = make_settings("http://unused.invalid/v1", context=CONTEXT)
    app = create_app(settings, upstream=AsgiUpstream(provider.app))
    async with LifespanManager(app), sdk_for(app, "sk-recall") as client:
        yield client


async def _complete(sdk: openai.AsyncOpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"model": "mock-model", "messages": messages, "tools": TOOLS}
    if not stream:
        completion = await sdk.chat.completions.create(**params)
        message: dict[str, Any] = completion.choices[0].message.model_dump(exclude_none=True)
        return message
    streamed = StreamedMessage()
    async for chunk in await sdk.chat.completions.create(**params, stream=True):
        assert chunk.choices, "a usage chunk reached a client that did not ask for it"
        streamed.add(chunk)
    return streamed.message()


async def _turn(sdk: openai.AsyncOpenAI, messages: list[Any], text: str, stream: bool) -> str:
    messages.append({"role": "user", "content": text})
    while True:
        message = await _complete(sdk, messages, stream)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return str(message.get("content") or "")
        for call in calls:
            name = call["function"]["name"]
            assert name == "read_file", f"the client was asked to run {name}"
            path = json.loads(call["function"]["arguments"])["path"]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": file_text(path)}
            )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_value_only_a_cleared_result_held_is_recalled(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, stream: bool
) -> None:
    messages: list[Any] = [{"role": "system", "content": "You are a deployment agent."}]
    for step in range(1, 7):
        await _turn(sdk, messages, f"Step {step}: read the next config part.", stream)
    forwarded = json.dumps(chat_requests(provider)[-1].json()["messages"])
    assert SECRET not in forwarded  # compaction removed it from what the model sees
    assert "context_recall(id=" in forwarded
    answer = await _turn(
        sdk, messages, "What is the exact value of DEPLOY_TOKEN in config/part_0.env?", stream
    )
    assert SECRET in answer
    assert provider.recall_calls >= 1
    assert provider.strict_rejections == 0
    assert provider.overflows == 0
    assert not any("context_recall" in json.dumps(m.get("tool_calls", [])) for m in messages)


def _sync_turn(sdk: openai.OpenAI, messages: list[Any], text: str, stream: bool) -> str:
    messages.append({"role": "user", "content": text})
    while True:
        params: dict[str, Any] = {"model": "mock-model", "messages": messages, "tools": TOOLS}
        if stream:
            streamed = StreamedMessage()
            for chunk in sdk.chat.completions.create(**params, stream=True):
                streamed.add(chunk)
            message = streamed.message()
        else:
            completion = sdk.chat.completions.create(**params)
            message = completion.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return str(message.get("content") or "")
        for call in calls:
            assert call["function"]["name"] == "read_file"
            path = json.loads(call["function"]["arguments"])["path"]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": file_text(path)}
            )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_sync_sdk_over_real_sockets(stream: bool) -> None:
    provider = MockUpstream(
        window=WINDOW, strict=True, roles_alternate=True, agent=SCRIPT, recaller=True
    )
    with serve_in_thread(provider.app) as mock_url:
        app = create_app(make_settings(f"{mock_url}/v1", context=CONTEXT))
        with (
            serve_in_thread(app) as proxy_url,
            openai.OpenAI(api_key="sk-sync", base_url=f"{proxy_url}/v1", max_retries=0) as sdk,
        ):
            messages: list[Any] = [{"role": "system", "content": "You are a deployment agent."}]
            for step in range(1, 7):
                _sync_turn(sdk, messages, f"Step {step}: read the next config part.", stream)
            question = "What is the exact value of DEPLOY_TOKEN in config/part_0.env?"
            answer = _sync_turn(sdk, messages, question, stream)
    assert SECRET in answer
    assert provider.recall_calls >= 1
    assert provider.strict_rejections == 0
    assert provider.overflows == 0
