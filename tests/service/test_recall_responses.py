"""Reversible compaction over the Responses API: the same recall as over chat completions,
with the items the API requires (a `function_call` and its `function_call_output`, the
reasoning item before it with its `encrypted_content`), whole and streamed.

The official SDK drives a stateless agent (`store: false`, reasoning included) through the
proxy in front of a strict mock playing a reasoning model that calls `context_recall` when a
placeholder names what the user's question needs (`MockUpstream(recaller=True)`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.service.agent_run import sdk_for
from tests.service.responses_run import INCLUDE, INSTRUCTIONS, TOOLS, responses_requests
from tests.service.test_recall import CONTEXT, SCRIPT, SECRET, WINDOW, file_text


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(
        window=WINDOW, strict=True, agent=SCRIPT, recaller=True, responses_reasoning=True
    )


@pytest.fixture
async def sdk(provider: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    # In process: the upstream's reads are the chunks the mock sent, the same on every run (a
    # socket's would be split as the kernel chose: tests/gates.py); tests/service/
    # test_recall.py runs the recall rounds over real sockets.
    settings = make_settings("http://unused.invalid/v1", context=CONTEXT)
    app = create_app(settings, upstream=AsgiUpstream(provider.app))
    async with LifespanManager(app), sdk_for(app, "sk-recall-responses") as client:
        yield client


async def _respond(
    sdk: openai.AsyncOpenAI, items: list[Any], stream: bool, seen: list[str]
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {
        "model": "mock-model",
        "instructions": INSTRUCTIONS,
        "input": items,
        "tools": TOOLS,
        "store": False,
        "include": INCLUDE,
    }
    if not stream:
        response = await sdk.responses.create(**params)
        seen.append(response.model_dump_json())  # its `tools` echo the request's
        return [i.model_dump(mode="json", exclude_none=True) for i in response.output]
    completed = None
    async for event in await sdk.responses.create(**params, stream=True):
        seen.append(event.model_dump_json())
        if event.type == "response.completed":
            completed = event.response
    assert completed is not None
    return [i.model_dump(mode="json", exclude_none=True) for i in completed.output]


async def _turn(
    sdk: openai.AsyncOpenAI, items: list[Any], text: str, stream: bool, seen: list[str]
) -> str:
    items.append({"role": "user", "content": text})
    while True:
        output = await _respond(sdk, items, stream, seen)
        items += output
        calls = [i for i in output if i.get("type") == "function_call"]
        if not calls:
            return "".join(
                part.get("text", "")
                for item in output
                if item.get("type") == "message"
                for part in item.get("content", [])
            )
        for call in calls:
            assert call["name"] == "read_file", f"the client was asked to run {call['name']}"
            path = json.loads(call["arguments"])["path"]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": file_text(path),
                }
            )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_value_only_a_cleared_result_held_is_recalled(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, stream: bool
) -> None:
    items: list[Any] = []
    seen: list[str] = []
    for step in range(1, 7):
        await _turn(sdk, items, f"Step {step}: read the next config part.", stream, seen)
    forwarded = json.dumps(responses_requests(provider)[-1].json()["input"])
    assert SECRET not in forwarded
    assert "context_recall(id=" in forwarded
    question = "What is the exact value of DEPLOY_TOKEN in config/part_0.env?"
    answer = await _turn(sdk, items, question, stream, seen)
    assert SECRET in answer
    assert provider.recall_calls >= 1
    assert provider.strict_rejections == 0
    assert provider.overflows == 0
    assert "context_recall" not in json.dumps(items)
    assert not any("context_recall" in event for event in seen)
    # The round after the recall carried the model's reasoning before the proxy's call.
    rounds = [
        r.json()["input"]
        for r in responses_requests(provider)
        if any(i.get("type") == "function_call_output" and "call_recall" in i.get("call_id", "")
               for i in r.json()["input"] if isinstance(i, dict))
    ]  # fmt: skip
    assert rounds
    last = rounds[-1]
    call = next(
        n
        for n, i in enumerate(last)
        if i.get("type") == "function_call" and i.get("name") == "context_recall"
    )
    assert last[call - 1]["type"] == "reasoning"
    assert last[call - 1].get("encrypted_content")
