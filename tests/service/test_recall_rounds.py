"""The recall rounds through the proxy app, answer by answer: the official SDK as the client,
the mock provider scripted (`Reply`) to call `context_recall` as a model would.

The conversation (`tests.service.recall_history`) is compacted on its first request (its old
tool results cleared, each placeholder naming an id), so each test reads the ids from what was
forwarded and scripts the model's next answers with them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.mock_upstream import MockUpstream, Reply, ToolCall
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve
from tests.service.agent_run import TOOLS
from tests.service.outage import OUTAGES, outage_of
from tests.service.recall_history import (
    CONTEXT,
    HIDDEN,
    WINDOW,
    compacted_ids,
    forwarded_ids,
    history,
    offered_tools,
    recall,
)


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(window=WINDOW, strict=True)


@pytest.fixture
def sections() -> dict[str, Any]:
    return {"context": CONTEXT}


@pytest.fixture
async def app(provider: MockUpstream, sections: dict[str, Any]) -> AsyncIterator[FastAPI]:
    # In process: the upstream's reads are the chunks the mock sent, the same on every run (a
    # socket's would be split as the kernel chose: tests/gates.py).
    settings = make_settings("http://unused.invalid/v1", **sections)
    application = create_app(settings, upstream=AsgiUpstream(provider.app))
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), timeout=30)
    async with openai.AsyncOpenAI(
        api_key="sk-rounds", base_url="http://proxy/v1", http_client=http, max_retries=0
    ) as client:
        yield client


async def test_only_the_final_answer_reaches_the_client_with_every_rounds_usage(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    before = len(provider.requests)
    provider.queue(
        Reply(content="Let me look. ", tool_calls=(recall(ids[0]),)),
        Reply(content=f"The secret word is {HIDDEN}."),
    )
    answer = await sdk.chat.completions.create(
        model="mock-model", messages=history("What is the secret word?"), tools=TOOLS
    )
    message = answer.choices[0].message
    assert message.content == f"Let me look. The secret word is {HIDDEN}."
    assert not message.tool_calls
    assert answer.choices[0].finish_reason == "stop"
    sent = provider.requests[before:]
    assert len(sent) == 2
    second = sent[1].json()["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "context_recall"
    assert second[-1]["role"] == "tool"
    assert HIDDEN in second[-1]["content"]
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == sum(provider.prompt_tokens[-2:])


async def test_rounds_are_bounded_and_the_last_request_offers_no_recall(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    before = len(provider.requests)
    provider.queue(
        Reply(content=None, tool_calls=(recall(ids[0], "r1"),)),
        Reply(content=None, tool_calls=(recall(ids[1], "r2"),)),
        Reply(content="Still unsure.", tool_calls=(recall(ids[2], "r3"),)),
        Reply(content="never asked"),
    )
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    assert answer.choices[0].message.content == "Still unsure."
    assert not answer.choices[0].message.tool_calls
    assert len(provider.requests) - before == 3  # the first answer and two recall rounds
    assert "context_recall" in offered_tools(provider, before)
    assert "context_recall" in offered_tools(provider, before + 1)
    assert "context_recall" not in offered_tools(provider, before + 2)


async def test_mixed_calls_return_the_clients_calls_only(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    before = len(provider.requests)
    theirs = ToolCall("read_file", json.dumps({"path": "etc/part_9.conf"}), id="call_theirs")
    provider.queue(Reply(content=None, tool_calls=(recall(ids[0]), theirs)))
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    calls = answer.choices[0].message.tool_calls or []
    assert [c.id for c in calls] == ["call_theirs"]
    assert answer.choices[0].finish_reason == "tool_calls"
    assert len(provider.requests) - before == 1


@pytest.mark.parametrize("rid", ["rc_aaaaaaaaaa", "not-an-id"])
async def test_an_unknown_id_gets_a_result_saying_so(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, rid: str
) -> None:
    await compacted_ids(sdk, provider)
    provider.queue(Reply(content=None, tool_calls=(recall(rid),)), Reply(content="ok"))
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    assert answer.choices[0].message.content == "ok"
    result = provider.last.json()["messages"][-1]
    assert result["role"] == "tool"
    assert "No content is stored under the id" in result["content"]
    assert HIDDEN not in json.dumps(provider.last.json())


async def test_another_conversations_or_tenants_id_is_not_resolved(
    app: FastAPI, provider: MockUpstream
) -> None:
    """The id is real, but of session A: session B (same tenant), and A's session under
    another key (another tenant), get no content for it."""
    async with openai.AsyncOpenAI(
        api_key="sk-a",
        base_url="http://proxy/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    ) as a:
        ids = await compacted_ids(a, provider)
        foreign = ids[0]
        provider.queue(Reply(content=None, tool_calls=(recall(foreign),)), Reply(content="B"))
        other = [*history("Something else entirely?")]
        other[1] = {"role": "user", "content": "A different task: read the files."}
        await a.chat.completions.create(model="mock-model", messages=other, tools=TOOLS)
        assert "No content is stored" in provider.last.json()["messages"][-1]["content"]
    async with openai.AsyncOpenAI(
        api_key="sk-b",
        base_url="http://proxy/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    ) as b:
        provider.queue(Reply(content=None, tool_calls=(recall(foreign),)), Reply(content="C"))
        await b.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
        result = provider.last.json()["messages"][-1]["content"]
        # Tenant B's own compaction of the same history names other ids: A's is unknown.
        assert foreign not in forwarded_ids(provider, -2)
        assert "No content is stored" in result
        assert HIDDEN not in result


async def test_an_id_from_an_earlier_request_is_resolved_from_the_store(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    asked = history()
    asked += [
        {"role": "assistant", "content": "Port 8080."},
        {"role": "user", "content": "And the secret word?"},
    ]
    provider.queue(Reply(content=None, tool_calls=(recall(ids[0]),)), Reply(content="found"))
    await sdk.chat.completions.create(model="mock-model", messages=asked, tools=TOOLS)
    assert HIDDEN in provider.last.json()["messages"][-1]["content"]


@pytest.mark.parametrize(
    "choice", ["none", {"type": "function", "function": {"name": "read_file"}}]
)
async def test_no_recall_is_offered_when_the_client_rules_tools_out(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, choice: Any
) -> None:
    await sdk.chat.completions.create(
        model="mock-model", messages=history(), tools=TOOLS, tool_choice=choice
    )
    body = provider.last.json()
    assert "context_recall" not in json.dumps(body)
    assert body["tool_choice"] == choice
    assert "call it again if needed" in json.dumps(body)


@pytest.mark.parametrize("sections", [{"context": {**CONTEXT, "recall": False}}])
async def test_recall_off_leaves_the_request_as_before(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    body = provider.last.json()
    assert "context_recall" not in json.dumps(body)
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file"]


async def test_a_stream_continues_as_one_response(
    app: FastAPI, sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(
        Reply(content="Checking. ", tool_calls=(recall(ids[0]),)),
        Reply(content=f"It is {HIDDEN}."),
    )
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    body = {"model": "mock-model", "messages": history(), "tools": TOOLS, "stream": True}
    async with http.stream("POST", "http://proxy/v1/chat/completions", json=body) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    events = [e for e in raw.split(b"\n\n") if e.strip()]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["choices"] for c in chunks)  # no usage chunk: the client asked for none
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0].get("finish_reason")
    ]
    assert finishes == ["stop"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == f"Checking. It is {HIDDEN}."
    assert b"context_recall" not in raw
    assert b"tool_calls" not in raw


async def test_a_stream_with_usage_reports_every_round(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(Reply(content=None, tool_calls=(recall(ids[0]),)), Reply(content="Done."))
    stream = await sdk.chat.completions.create(
        model="mock-model",
        messages=history(),
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1
    assert usage[0].prompt_tokens == sum(provider.prompt_tokens[-2:])
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Done."


async def test_a_client_leaving_mid_recall_closes_the_upstream_stream(
    app: FastAPI, sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    """On real sockets (a hang-up is what tells the proxy): the client leaves while the round
    after a recall streams; the proxy hangs up on the upstream in turn."""
    ids = await compacted_ids(sdk, provider)
    provider.queue(
        Reply(content="One moment. ", tool_calls=(recall(ids[0]),)),
        Reply(content="tick", endless=True, chunk_delay_s=0.01),
    )
    body = {"model": "mock-model", "messages": history(), "tools": TOOLS, "stream": True}
    async with serve(app) as proxy_url:
        async with (
            httpx2.AsyncClient(
                base_url=proxy_url, headers={"authorization": "Bearer sk-rounds"}
            ) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            seen = 0
            async for line in response.aiter_lines():
                # The second round's first content, then its endless dots.
                seen += bool(seen) or "tick" in line
                if seen >= 3:
                    break
        for _ in range(500):
            if provider.streams_abandoned:
                break
            await asyncio.sleep(0.01)
    assert provider.streams_abandoned == 1


@pytest.mark.parametrize("kind", OUTAGES)
async def test_with_the_store_down_a_recall_says_unavailable(
    kind: str, request: pytest.FixtureRequest, provider: MockUpstream
) -> None:
    async with outage_of(kind, request, timeout_s=0.5) as outage:
        settings = make_settings("http://unused.invalid/v1", context=CONTEXT, redis=outage.redis)
        upstream = AsgiUpstream(provider.app)
        application = create_app(settings, upstream=upstream, store=outage.store)
        async with LifespanManager(application):
            http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=application))
            async with openai.AsyncOpenAI(
                api_key="sk-down", base_url="http://proxy/v1", http_client=http, max_retries=0
            ) as client:
                await compacted_ids(client, provider)
                outage.stop()
                provider.queue(
                    Reply(content=None, tool_calls=(recall("rc_aaaaaaaaaa"),)),
                    Reply(content="answered anyway"),
                )
                answer = await client.chat.completions.create(
                    model="mock-model", messages=history(), tools=TOOLS
                )
    assert answer.choices[0].message.content == "answered anyway"
    assert "cannot be reached" in provider.last.json()["messages"][-1]["content"]


async def test_operators_see_each_recall(
    app: FastAPI,
    sdk: openai.AsyncOpenAI,
    provider: MockUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.access")
    ids = await compacted_ids(sdk, provider)
    provider.queue(
        Reply(content=None, tool_calls=(recall(ids[0], "r1"), recall("rc_aaaaaaaaaa", "r2"))),
        Reply(content="done"),
    )
    await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    await app.state.service.settle()
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://proxy")
    metrics = (await http.get("/metrics")).text
    assert 'compaction_proxy_recalls_total{outcome="found"} 1.0' in metrics
    assert 'compaction_proxy_recalls_total{outcome="unknown"} 1.0' in metrics
    line = [r for r in caplog.records if r.name == "proxy.access"][-1]
    assert (line.recalls, line.recall_rounds) == (2, 1)  # type: ignore[attr-defined]
    assert line.recall_ms >= 0  # type: ignore[attr-defined]
    auth = {"authorization": "Bearer sk-rounds"}
    sessions = (await http.get("/v1/compaction/sessions", headers=auth)).json()["data"]
    assert [s["recalls"] for s in sessions] == [2]
    detail = (await http.get(f"/v1/compaction/sessions/{sessions[0]['id']}", headers=auth)).json()
    assert [point["recalls"] for point in detail["timeline"]] == [0, 2]
