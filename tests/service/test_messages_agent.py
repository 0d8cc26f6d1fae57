"""Messages API agents through the proxy: the official `anthropic` SDK (async, streamed, and
sync over real sockets) against the strict mock, with a window far smaller than the session.

The mock checks what Anthropic checks: every `tool_use` answered by a `tool_result` in the
next user message, roles alternating and a user's first, at most four breakpoints, and each
thinking block's signature over its exact text (so a block the proxy altered is refused).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.tokenizer import load_encoders
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.mock_messages import MODEL
from tests.servers import serve, serve_in_thread
from tests.service.agent_run import FACTS, SCRIPT
from tests.service.messages_run import (
    MessagesRun,
    anthropic_sdk,
    messages_requests,
    thinking_blocks,
)

WINDOW = 9000
CONTEXT = {
    "context_window": WINDOW,
    "output_reserved": 500,
    "keep_recent": 6,
    "summary_max_tokens": 400,
}
KEY = "sk-ant-agent"


def strict_provider(**options: Any) -> MockUpstream:
    return MockUpstream(
        window=WINDOW,
        strict=True,
        agent=SCRIPT,
        summary_quality="poor",
        encoders=load_encoders((O200K_BASE,)),
        models=(MODEL,),
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
async def sdk(proxy_app: FastAPI) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic_sdk(proxy_app, KEY) as client:
        yield client


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_long_agent_run_compacts_with_no_error_and_nothing_over_the_window(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream, proxy_app: FastAPI, stream: bool
) -> None:
    run = MessagesRun(sdk, stream)
    turn = 0
    while run.model_calls < 40:
        turn += 1
        planted = FACTS.get(turn, ("",))[0]
        await run.turn(f"Step {turn}: continue with the next module. {planted}".strip())
    await proxy_app.state.service.settle()
    bodies = [r.json() for r in messages_requests(provider)]
    last = bodies[-1]
    # No client-visible error, nothing refused by the strict provider, nothing over the window.
    assert provider.overflows == 0
    assert provider.strict_rejections == 0
    assert max(provider.prompt_tokens) + 1500 <= WINDOW
    # The session outgrew the window, and the proxy compacted it (with summaries, asked of
    # the provider in the Messages API: it speaks nothing else).
    assert len(json.dumps(run.messages)) > 1.5 * len(json.dumps(last["messages"]))
    assert provider.summary_calls >= 1
    assert {r.path for r in provider.requests} <= {"/v1/messages", "/v1/models"}
    # The fixed head went as it came, and every thinking block forwarded is the client's
    # own, byte for byte (the strict provider verified each signature too).
    sent_thinking = thinking_blocks(run.messages)
    for body in bodies:
        assert body["system"][0]["text"] == "You are a coding agent. Follow the user's rules."
        assert [tool["name"] for tool in body["tools"]] == ["read_file"]
        for signature, block in thinking_blocks(body["messages"]).items():
            assert {k: v for k, v in block.items() if k != "cache_control"} == sent_thinking[
                signature
            ]
    # Every planted fact is still in what the model last saw, despite the poor summarizer.
    seen = json.dumps(last["messages"])
    for _, fact in FACTS.values():
        assert fact in seen, fact


async def test_calibration_reads_the_cache_counts_and_the_session_api_lists_it(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream, proxy_app: FastAPI
) -> None:
    run = MessagesRun(sdk, stream=False)
    for turn in range(1, 7):
        await run.turn(f"Step {turn}: continue with the next module.")
    await proxy_app.state.service.settle()
    assert any(answer.usage.cache_read_input_tokens for answer in run.answers)
    service = proxy_app.state.service
    transport = httpx.ASGITransport(app=proxy_app)
    headers = {"x-api-key": KEY}
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as api:
        listed = (await api.get("/v1/compaction/sessions", headers=headers)).json()
        [session] = listed["data"]
        messages = await api.get(
            f"/v1/compaction/sessions/{session['id']}/messages", headers=headers
        )
    assert session["turns"] == run.model_calls
    assert messages.status_code == 200, messages.text
    shown = messages.json()
    assert not any("_source" in m or "_system" in m for m in shown["data"])
    # Calibrated on the whole prompt (input, cache reads and writes): the approximate count
    # errs high, so the factor is below one, never the uncached input's tiny share.
    tenant = service.tenant_of([("x-api-key", KEY)])
    factor = await service.memory.calibration(tenant, MODEL)
    assert factor is not None
    assert 0.3 < factor < 1.0


def test_the_sync_sdk_over_real_sockets() -> None:
    provider = strict_provider()
    with serve_in_thread(provider.app) as mock_url:
        app = create_app(make_settings(f"{mock_url}/v1", context=CONTEXT))
        with (
            serve_in_thread(app) as proxy_url,
            anthropic.Anthropic(api_key=KEY, base_url=proxy_url, max_retries=0) as client,
        ):
            messages: list[Any] = []
            applied = []
            for turn in range(24):
                words = f"Step {turn}: go on. " + "word " * 300
                messages.append({"role": "user", "content": words})
                raw = client.messages.with_raw_response.create(
                    model=MODEL, max_tokens=500, messages=messages
                )
                applied.append(raw.headers["x-compaction-applied"])
                message = raw.parse()
                assert message.content[0].type == "text"
                messages.append(
                    {"role": "assistant", "content": [b.model_dump() for b in message.content]}
                )
    assert provider.overflows == provider.strict_rejections == 0
    assert max(provider.prompt_tokens) + 500 <= WINDOW
    assert any(name != "none" for name in applied)
