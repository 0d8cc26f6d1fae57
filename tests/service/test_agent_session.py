"""A long tool-using agent session through the proxy, against a window far smaller than it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest
from asgi_lifespan import LifespanManager

from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve
from tests.service.agent_run import (
    FACTS,
    SCRIPT,
    AgentRun,
    chat_requests,
    prefix_stable_share,
    sdk_for,
)

WINDOW = 6000
CONTEXT = {"output_reserved": 500, "keep_recent": 6, "summary_max_tokens": 400}


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(
        window=WINDOW, strict=True, roles_alternate=True, agent=SCRIPT, summary_quality="poor"
    )


@pytest.fixture
async def sdk(provider: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    async with serve(provider.app) as base_url:
        settings = make_settings(f"{base_url}/v1", context=CONTEXT)
        app = create_app(settings)
        async with LifespanManager(app), sdk_for(app, "sk-agent") as client:
            yield client


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_forty_calls_with_no_error_and_the_facts_kept(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, stream: bool
) -> None:
    run = AgentRun(sdk, stream, [{"role": "system", "content": "You are a coding agent."}])
    turn = 0
    while run.model_calls < 40:
        turn += 1
        planted = FACTS.get(turn, ("",))[0]
        await run.turn(f"Step {turn}: continue with the next module. {planted}".strip())
    sent = sum(len(json.dumps(m)) for m in run.messages)
    requests = chat_requests(provider)
    last = json.dumps(requests[-1].json()["messages"])
    # No client-visible error (the loop finished), nothing refused upstream.
    assert provider.overflows == 0
    assert provider.strict_rejections == 0
    assert max(provider.prompt_tokens) <= WINDOW
    # The conversation really outgrew the window, and compaction (with summaries) happened.
    assert len(json.dumps(run.messages)) > 3 * len(last)
    assert sent > 3 * len(last)
    assert provider.summary_calls >= 1
    # Every planted fact is still in what the model last saw, despite the poor summarizer.
    for _, fact in FACTS.values():
        assert fact in last, fact
    print(  # shown with -s: what the run looked like
        f"calls={run.model_calls} summaries={provider.summary_calls} "
        f"max_prompt={max(provider.prompt_tokens)} sent_chars={sent} last_chars={len(last)} "
        f"stable={prefix_stable_share(requests):.2f} cached={sum(provider.cached_tokens)}/"
        f"{sum(provider.prompt_tokens)}"
    )
    # The forwarded prefix stays stable between compactions: the provider's cache keeps hitting.
    assert prefix_stable_share(requests) >= 0.7
