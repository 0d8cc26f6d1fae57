"""Reversible compaction over the Messages API: the same recall as over chat completions,
with what the API requires (a `tool_use` block answered by a `tool_result` at the start of the
next user message, the turn's thinking blocks before the call, byte for byte), whole and
streamed.

The official `anthropic` SDK drives a tool-using agent with thinking on through the proxy in
front of a strict mock playing a model that calls `context_recall` when a placeholder names
what the user's question needs (`MockUpstream(recaller=True)`); the mock verifies every
thinking block's signature and refuses an unpaired `tool_use` or `tool_result`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from anthropic.types import Message
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.tokenizer import load_encoders
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import MockUpstream, Reply, ToolCall
from proxy.web import create_app
from tests.conftest import make_settings
from tests.mock_messages import EPHEMERAL, MODEL, READ_FILE, echoed, tool_result
from tests.servers import serve_in_thread
from tests.service.messages_run import (
    THINKING,
    anthropic_sdk,
    marked,
    messages_requests,
    thinking_blocks,
)
from tests.service.test_recall import CONTEXT, SCRIPT, SECRET, file_text

WINDOW = 7000
QUESTION = "What is the exact value of DEPLOY_TOKEN in config/part_0.env?"
SYSTEM = [{"type": "text", "text": "You are a deployment agent.", "cache_control": EPHEMERAL}]


def provider_for(**options: Any) -> MockUpstream:
    return MockUpstream(
        window=WINDOW,
        strict=True,
        agent=SCRIPT,
        recaller=True,
        encoders=load_encoders((O200K_BASE,)),
        models=(MODEL,),
        **options,
    )


@pytest.fixture
def provider() -> MockUpstream:
    return provider_for()


@pytest.fixture
def context() -> dict[str, Any]:
    return {**CONTEXT, "context_window": WINDOW}


@pytest.fixture
async def proxy_app(provider: MockUpstream, context: dict[str, Any]) -> AsyncIterator[FastAPI]:
    # In process: the upstream's reads are the chunks the mock sent, the same on every run (a
    # socket's would be split as the kernel chose: tests/gates.py); the real sockets have a
    # test of their own below.
    settings = make_settings("http://unused.invalid/v1", context=context)
    app = create_app(settings, upstream=AsgiUpstream(provider.app))
    async with LifespanManager(app):
        yield app


@pytest.fixture
async def sdk(proxy_app: FastAPI) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic_sdk(proxy_app, "sk-ant-recall") as client:
        yield client


class Client:
    """The client's side: the whole history every request, each answer sent back as it
    came, every event of every stream kept."""

    def __init__(self, sdk: anthropic.AsyncAnthropic, stream: bool, **fields: Any) -> None:
        self.sdk = sdk
        self.stream = stream
        self.fields = fields
        self.messages: list[dict[str, Any]] = []
        self.answers: list[Message] = []
        self.events: list[str] = []

    async def _create(self) -> Message:
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 1500,
            "system": SYSTEM,
            "tools": [READ_FILE],
            "thinking": THINKING,
            "messages": marked(self.messages),
            **self.fields,
        }
        if not self.stream:
            message: Message = await self.sdk.messages.create(**body)
            return message
        async with self.sdk.messages.stream(**body) as stream:
            async for event in stream:
                self.events.append(event.model_dump_json())
            return await stream.get_final_message()

    async def turn(self, words: str) -> str:
        self.messages.append({"role": "user", "content": words})
        while True:
            message = await self.answer()
            calls = [block for block in message.content if block.type == "tool_use"]
            if not calls:
                return "".join(b.text for b in message.content if b.type == "text")
            self.run(calls)

    async def answer(self) -> Message:
        """One request; its answer is kept and sent back with the next."""
        message = await self._create()
        self.answers.append(message)
        self.messages.append(echoed(message))
        return message

    def run(self, calls: list[Any]) -> None:
        """The client's tools run, their results in the next user message."""
        results = []
        for call in calls:
            assert call.name == "read_file", f"the client was asked to run {call.name}"
            path = str(call.input["path"])
            results.append(tool_result(call.id, file_text(path)))
        self.messages.append({"role": "user", "content": results})


def _recall_rounds(provider: MockUpstream) -> list[dict[str, Any]]:
    """The requests that carried a `context_recall` call and its result."""
    return [
        body
        for body in (r.json() for r in messages_requests(provider))
        if "call_recall" in json.dumps(body["messages"])
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_value_only_a_cleared_result_held_is_recalled(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream, stream: bool
) -> None:
    client = Client(sdk, stream)
    for step in range(1, 7):
        await client.turn(f"Step {step}: read the next config part.")
    last = messages_requests(provider)[-1].json()
    assert SECRET not in json.dumps(last["messages"])  # compaction removed it
    assert "context_recall(id=" in json.dumps(last["messages"])
    # Offered in the Messages API's own tool format, after the client's tool.
    assert [t["name"] for t in last["tools"]] == ["read_file", "context_recall"]
    assert set(last["tools"][1]) == {"name", "description", "input_schema"}
    # Once offered, offered on every request after, the same bytes: the prefix the provider
    # caches (tools first, then system) changed once, with the compaction that named an id.
    bodies = [r.body for r in messages_requests(provider)]
    first = next(n for n, raw in enumerate(bodies) if b'"name":"context_recall"' in raw)
    tools = {json.dumps(json.loads(raw)["tools"]) for raw in bodies[first:]}
    assert len(tools) == 1
    answered = len(client.answers)
    answer = await client.turn(QUESTION)
    assert SECRET in answer
    assert provider.recall_calls >= 1
    assert provider.strict_rejections == 0
    assert provider.overflows == 0
    # The client never saw the tool, in any form.
    assert "context_recall" not in json.dumps(client.messages)
    assert not any("context_recall" in event for event in client.events)
    # The round after the recall carried the turn as the model wrote it: its thinking first,
    # then the proxy's call, answered at the start of the next user message.
    rounds = _recall_rounds(provider)
    assert rounds
    *_, turn, results = rounds[-1]["messages"]
    assert turn["role"] == "assistant"
    assert turn["content"][0]["type"] == "thinking"
    used = [b for b in turn["content"] if b["type"] == "tool_use"]
    assert {b["name"] for b in used} == {"context_recall"}
    assert [b["tool_use_id"] for b in results["content"]] == [b["id"] for b in used]
    # One message for the question: opened by the first round's thinking, every round's
    # blocks after it, indexes consecutive (the SDK built it from the stream's events).
    final = client.answers[answered]
    assert final.content[0].type == "thinking"
    assert final.stop_reason == "end_turn"
    assert not any(b.type == "tool_use" for b in final.content)
    # Every round's usage added up: the recall round's prompt is the larger one.
    billed = provider.prompt_tokens[-1] + provider.prompt_tokens[-2]
    usage = final.usage
    prompt = (
        usage.input_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0)
    )
    assert prompt == billed
    # The thinking blocks the client sends back are the mock's, byte for byte, and so are
    # those the proxy sent in its rounds (the strict mock verified every signature).
    client_thinking = thinking_blocks(client.messages)
    for body in (r.json() for r in messages_requests(provider)):
        for signature, block in thinking_blocks(body["messages"]).items():
            if signature in client_thinking:
                clean = {k: v for k, v in block.items() if k != "cache_control"}
                assert clean == client_thinking[signature]


async def _compacted(client: Client, provider: MockUpstream) -> dict[str, Any]:
    """The agent run until compaction cleared the first result; the last request's body."""
    for step in range(1, 7):
        await client.turn(f"Step {step}: read the next config part.")
    last: dict[str, Any] = messages_requests(provider)[-1].json()
    assert SECRET not in json.dumps(last["messages"])
    return last


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_call_of_the_proxys_tool_beside_the_clients_goes_back_without_it(
    sdk: anthropic.AsyncAnthropic, proxy_app: FastAPI, provider: MockUpstream, stream: bool
) -> None:
    client = Client(sdk, stream)
    last = await _compacted(client, provider)
    # The summaries the compactions asked for are written first: the scripted answer below is
    # for the client's request, not for a summary request still on its way.
    await proxy_app.state.service.settle()
    [rid, *_] = re.findall(r"rc_[a-z2-7]{10}", json.dumps(last["messages"]))
    recall = ToolCall("context_recall", json.dumps({"id": rid}), id="toolu_recall")
    read = ToolCall("read_file", json.dumps({"path": "config/part_0.env"}), id="toolu_read")
    provider.queue(Reply(content=None, tool_calls=(recall, read)))
    client.messages.append({"role": "user", "content": "Read config/part_0.env again."})
    message = await client.answer()
    # The client's call, after the thinking that opened the answer; the proxy's taken out.
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[1].id == "toolu_read"  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    # The thinking stays byte for byte, whatever it says (its signature covers it, and the
    # turn must open with it when it comes back); nothing else names the proxy's tool.
    unsaid = [{k: v for k, v in m.items() if k != "content"} for m in client.messages]
    said = [b for m in client.messages if isinstance(m["content"], list) for b in m["content"]]
    assert "context_recall" not in json.dumps(unsaid)
    assert "context_recall" not in json.dumps([b for b in said if b["type"] != "thinking"])
    # The client's own loop goes on: the turn it sends back passes the strict checks.
    client.run([b for b in message.content if b.type == "tool_use"])
    await client.answer()
    assert provider.strict_rejections == 0


@pytest.mark.parametrize(
    ("context", "fields"),
    [
        ({**CONTEXT, "context_window": WINDOW, "recall": False}, {}),
        (
            {**CONTEXT, "context_window": WINDOW},
            {"tool_choice": {"type": "tool", "name": "read_file"}},
        ),
    ],
    ids=["recall off", "one tool forced"],
)
async def test_no_recall_is_offered_when_off_or_ruled_out(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream, fields: dict[str, Any]
) -> None:
    client = Client(sdk, stream=False)
    client.fields = fields
    if fields:
        # A forced tool and thinking do not go together: the agent runs without it until
        # compaction removed the secret, then asks with its tool forced.
        await _compacted(client, provider)
        client.messages.append({"role": "user", "content": QUESTION})
        client.fields = {**fields, "thinking": {"type": "disabled"}}
        await client.answer()
    else:
        await _compacted(client, provider)
        answer = await client.turn(QUESTION)
        assert "I do not have the value of DEPLOY_TOKEN" in answer
    body = messages_requests(provider)[-1].json()
    assert "context_recall" not in json.dumps(body)
    assert [t["name"] for t in body["tools"]] == ["read_file"]
    assert "call it again if needed" in json.dumps(body["messages"])
    assert provider.recall_calls == 0
    assert provider.strict_rejections == 0


def test_the_sync_sdk_streams_a_recall_over_real_sockets() -> None:
    provider = provider_for()
    context = {**CONTEXT, "context_window": WINDOW}
    with serve_in_thread(provider.app) as mock_url:
        app = create_app(make_settings(f"{mock_url}/v1", context=context))
        with (
            serve_in_thread(app) as proxy_url,
            anthropic.Anthropic(api_key="sk-ant-sync", base_url=proxy_url, max_retries=0) as sdk,
        ):
            messages: list[dict[str, Any]] = []
            said = ""
            steps = [f"Step {n}: read the next config part." for n in range(1, 7)]
            for words in [*steps, QUESTION]:
                messages.append({"role": "user", "content": words})
                while True:
                    body: dict[str, Any] = {
                        "model": MODEL,
                        "max_tokens": 1500,
                        "system": SYSTEM,
                        "tools": [READ_FILE],
                        "thinking": THINKING,
                        "messages": marked(messages),
                    }
                    with sdk.messages.stream(**body) as stream:
                        message = stream.get_final_message()
                    messages.append(echoed(message))
                    calls = [b for b in message.content if b.type == "tool_use"]
                    if not calls:
                        said = "".join(b.text for b in message.content if b.type == "text")
                        break
                    results = [tool_result(c.id, file_text(str(c.input["path"]))) for c in calls]
                    messages.append({"role": "user", "content": results})
    assert SECRET in said
    assert provider.recall_calls >= 1
    assert provider.strict_rejections == provider.overflows == 0
    assert "context_recall" not in json.dumps(messages)
