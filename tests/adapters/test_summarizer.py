"""The summary brain's client, against the strict mock provider on a real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from proxy.adapters.summarizer import Summarizer
from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import AiohttpUpstream
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.tokens import ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream
from tests.builders import assistant, system, user
from tests.servers import serve

WINDOW = 2048
COUNTER = TokenCounter(ApproximateEncoder())


@pytest.fixture
def brain() -> MockUpstream:
    """A provider with a small window that refuses any longer summary request."""
    encoders = Encoders(by_name={}, fallback=ApproximateEncoder())
    return MockUpstream(window=WINDOW, encoders=encoders)


@pytest.fixture
async def upstream(brain: MockUpstream) -> AsyncIterator[AiohttpUpstream]:
    async with serve(brain.app) as base_url:
        client = AiohttpUpstream(f"{base_url}/v1", timeout_s=10)
        await client.open()
        yield client
        await client.aclose()


def long_chat(turns: int) -> list[Message]:
    messages = [system("be brief"), user("the task: fix ticket ABC-123")]
    for i in range(turns):
        messages += [assistant(f"reply {i} " + "w " * 120), user(f"next {i} " + "w " * 120)]
    return messages


def needs_summary(messages: list[Message]) -> NeedsSummary:
    situation = Situation(
        messages=messages,
        body={"model": "mock-model"},
        policy=ContextPolicy(keep_recent=4, summary_max_tokens=128),
        budget=Budget(context_window=4 * WINDOW, output_reserve=0),
    )
    plan = plan_compaction(situation, COUNTER)
    assert isinstance(plan, NeedsSummary), plan
    return plan


async def test_a_span_longer_than_the_window_is_summarized_in_parts_that_fit(
    brain: MockUpstream, upstream: AiohttpUpstream
) -> None:
    need = needs_summary(long_chat(30))
    span_tokens = COUNTER.messages(need.span)
    assert span_tokens > 1.5 * WINDOW
    result = await Summarizer(upstream).summarize(
        need, credentials=[], count=COUNTER.message, window=WINDOW
    )
    assert brain.overflows == 0  # every part fitted the summarizer's own window
    # Parts as large as the window allows: a few calls, not one per handful of messages.
    assert 2 <= brain.summary_calls <= 2 * span_tokens // WINDOW + 1
    assert result.text
    assert result.tokens > 0


async def test_a_configured_brain_window_wins_over_the_models(
    brain: MockUpstream, upstream: AiohttpUpstream
) -> None:
    need = needs_summary(long_chat(30))
    summarizer = Summarizer(upstream, window=WINDOW // 2)
    await summarizer.summarize(need, credentials=[], count=COUNTER.message, window=8 * WINDOW)
    smaller = brain.summary_calls
    brain.summary_requests.clear()
    await Summarizer(upstream).summarize(need, credentials=[], count=COUNTER.message, window=WINDOW)
    assert smaller > brain.summary_calls
    assert brain.overflows == 0
