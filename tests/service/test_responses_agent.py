"""Responses API agents through the proxy: the official SDK's `client.responses.create`
(async, sync, streamed) against the strict mock, with a window far smaller than the session.

The mock checks what a real provider checks: every `function_call_output` has its call and
every call its output, every item the model produced after a reasoning item comes with that
reasoning item, and `encrypted_content` comes back exactly as it was sent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.core.recall import TOOL
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve, serve_in_thread
from tests.service.agent_run import FACTS, SCRIPT, sdk_for
from tests.service.responses_run import (
    INCLUDE,
    INSTRUCTIONS,
    TOOLS,
    ResponsesRun,
    reasoning_items,
    responses_requests,
)

WINDOW = 6000
CONTEXT = {"output_reserved": 500, "keep_recent": 6, "summary_max_tokens": 400}
KEY = "sk-responses-agent"


def strict_provider(**options: Any) -> MockUpstream:
    return MockUpstream(
        window=WINDOW,
        strict=True,
        agent=SCRIPT,
        summary_quality="poor",
        responses_reasoning=True,
        **options,
    )


@pytest.fixture
def provider() -> MockUpstream:
    return strict_provider()


@pytest.fixture
async def proxy_app(provider: MockUpstream) -> AsyncIterator[FastAPI]:
    async with serve(provider.app) as base_url:
        app = create_app(make_settings(f"{base_url}/v1", context=CONTEXT))
        async with LifespanManager(app):
            yield app


@pytest.fixture
async def sdk(proxy_app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_for(proxy_app, KEY) as client:
        yield client


def as_sent(requests: list[Any]) -> list[dict[str, Any]]:
    return [request.json() for request in requests]


def stable_share(bodies: list[dict[str, Any]]) -> float:
    """Share of consecutive requests whose input starts with the one before's input (what
    keeps the provider's prompt cache warm)."""
    pairs = list(itertools.pairwise(body["input"] for body in bodies))
    stable = sum(after[: len(before)] == before for before, after in pairs)
    return float(stable / len(pairs))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_forty_calls_with_no_error_the_pairs_and_reasoning_intact_and_the_facts_kept(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, proxy_app: FastAPI, stream: bool
) -> None:
    run = ResponsesRun(sdk, stream)
    turn = 0
    while run.model_calls < 40:
        turn += 1
        planted = FACTS.get(turn, ("",))[0]
        await run.turn(f"Step {turn}: continue with the next module. {planted}".strip())
    await proxy_app.state.service.settle()
    bodies = as_sent(responses_requests(provider))
    last = bodies[-1]
    # No client-visible error (the loop finished), nothing refused, nothing over the window.
    assert provider.overflows == 0
    assert provider.strict_rejections == 0
    assert max(provider.prompt_tokens) <= WINDOW
    # The session really outgrew the window, and the proxy compacted it (with summaries).
    assert len(json.dumps(run.items)) > 3 * len(json.dumps(last["input"]))
    assert any(applied != "none" for applied in run.applied)
    assert provider.summary_calls >= 1
    # The fixed head went as it came: instructions, tools and the request's other fields
    # (once something was removed, the proxy's `context_recall` after the client's tools).
    for body in bodies:
        assert body["instructions"] == INSTRUCTIONS
        assert (body["tools"][: len(TOOLS)], body["include"], body["store"]) == (
            TOOLS,
            INCLUDE,
            False,
        )
        assert [tool["name"] for tool in body["tools"][len(TOOLS) :]] in ([], [TOOL])
    # Every reasoning item forwarded is the client's own, byte for byte, and the recent
    # ones are kept.
    sent_reasoning = reasoning_items(run.items)
    for body in bodies:
        for item_id, item in reasoning_items(body["input"]).items():
            assert item == sent_reasoning[item_id]
    assert reasoning_items(last["input"])
    # Every planted fact is still in what the model last saw, despite the poor summarizer.
    seen = json.dumps(last["input"])
    for _, fact in FACTS.values():
        assert fact in seen, fact
    # The forwarded prefix stays stable between compactions: the provider's cache keeps hitting.
    assert stable_share(bodies) >= 0.7
    print(  # shown with -s: what the run looked like
        f"calls={run.model_calls} summaries={provider.summary_calls} "
        f"max_prompt={max(provider.prompt_tokens)} cached={sum(provider.cached_tokens)}/"
        f"{sum(provider.prompt_tokens)} stable={stable_share(bodies):.2f}"
    )


async def test_the_session_is_listed_with_its_compactions(
    sdk: openai.AsyncOpenAI, proxy_app: FastAPI
) -> None:
    run = ResponsesRun(sdk, stream=False)
    for turn in range(1, 9):
        await run.turn(f"Step {turn}: continue with the next module.")
    await proxy_app.state.service.settle()
    transport = httpx.ASGITransport(app=proxy_app)
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as api:
        listed = (await api.get("/v1/compaction/sessions", headers=headers)).json()
        [session] = listed["data"]
        messages = await api.get(
            f"/v1/compaction/sessions/{session['id']}/messages", headers=headers
        )
    assert session["turns"] == run.model_calls
    assert session["compactions"] >= 1
    assert session["tokens_saved"] > 0
    assert messages.status_code == 200, messages.text


def test_the_sync_sdk_over_real_sockets() -> None:
    provider = strict_provider()
    with serve_in_thread(provider.app) as mock_url:
        app = create_app(make_settings(f"{mock_url}/v1", context=CONTEXT))
        with (
            serve_in_thread(app) as proxy_url,
            openai.OpenAI(api_key=KEY, base_url=f"{proxy_url}/v1", max_retries=0) as client,
        ):
            items: list[Any] = []
            applied = []
            for turn in range(14):
                items.append({"role": "user", "content": f"Step {turn}: go on. " + "word " * 300})
                raw = client.responses.with_raw_response.create(
                    model="mock-model", input=items, instructions=INSTRUCTIONS
                )
                applied.append(raw.headers["x-compaction-applied"])
                assert raw.headers["x-session-id"]
                response = raw.parse()
                assert response.output_text
                items += [
                    item.model_dump(mode="json", exclude_none=True) for item in response.output
                ]
    assert provider.overflows == provider.strict_rejections == 0
    assert max(provider.prompt_tokens) <= WINDOW
    assert any(name != "none" for name in applied)


async def test_previous_response_id_requests_are_forwarded_untouched(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    first = await sdk.responses.create(model="mock-model", input="Remember the code 7741.")
    raw = await sdk.responses.with_raw_response.create(
        model="mock-model", input="What was the code?", previous_response_id=first.id
    )
    assert raw.headers["x-compaction-applied"] == "server_state"
    assert "x-session-id" not in raw.headers
    sent = raw.http_request.content
    assert provider.last.body == sent  # the client's own bytes
    assert raw.parse().output_text
