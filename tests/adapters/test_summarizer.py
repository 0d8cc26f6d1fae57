"""The summary brain's client, against the strict mock provider on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from proxy.adapters.summarizer import Summarizer, SummaryFailedError
from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import AiohttpUpstream, UpstreamRequest, fetched
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.tokens import ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream, Reply
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


# --- The prefix form -------------------------------------------------------------------------


@pytest.fixture
def provider() -> MockUpstream:
    """A provider with room for the whole conversation, and its prompt cache."""
    return MockUpstream(encoders=Encoders(by_name={}, fallback=ApproximateEncoder()))


@pytest.fixture
async def conversation_upstream(provider: MockUpstream) -> AsyncIterator[AiohttpUpstream]:
    async with serve(provider.app) as base_url:
        client = AiohttpUpstream(f"{base_url}/v1", timeout_s=10)
        await client.open()
        yield client
        await client.aclose()


async def forward(upstream: AiohttpUpstream, messages: list[Message]) -> None:
    """`messages` sent as the conversation's request, as the proxy forwards it."""
    body = json.dumps({"model": "mock-model", "messages": messages}).encode()
    request = UpstreamRequest("POST", "chat/completions", "", [], body)
    response, _ = await fetched(upstream, request)
    assert response.status == 200


async def test_the_conversation_s_own_brain_is_asked_with_the_conversation_itself(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    messages = long_chat(30)
    need = needs_summary(messages)
    assert need.prefix is not None
    await forward(conversation_upstream, messages)
    result = await Summarizer(conversation_upstream).summarize(
        need, credentials=[], count=COUNTER.message, window=8 * WINDOW
    )
    [request] = provider.summary_requests
    sent = request.json()["messages"]
    assert sent[:-1] == list(need.prefix.messages)
    assert sent[-1]["role"] == "user"
    assert (result.form, result.refused) == ("prefix", False)
    # The provider served the prefix it had just cached: most of the input.
    [usage] = provider.summary_usage
    assert (result.input_tokens, result.cached_tokens) == (usage.prompt_tokens, usage.cached_tokens)
    assert result.cached_tokens >= 0.8 * result.input_tokens
    assert result.text


async def test_a_brain_of_its_own_or_a_conversation_cached_as_items_gets_a_transcript(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    need = needs_summary(long_chat(30))
    count, window = COUNTER.message, 8 * WINDOW
    results = [
        await summarizer.summarize(
            need, credentials=[], count=count, window=window, forwarded_as_chat=as_chat
        )
        for summarizer, as_chat in [
            (Summarizer(conversation_upstream, model="small-model"), True),
            (Summarizer(conversation_upstream, own_upstream=True), True),
            (Summarizer(conversation_upstream), False),  # a Responses API conversation
        ]
    ]
    assert [result.form for result in results] == ["transcript"] * 3
    assert all(r.json()["messages"][0]["role"] == "system" for r in provider.summary_requests)
    # A fresh prompt: nothing of it was cached (the same transcript again would be).
    assert results[0].input_tokens > 0
    assert results[0].cached_tokens == 0


async def test_a_refused_prefix_form_is_asked_again_as_a_transcript(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    refusal = {"error": {"message": "roles must alternate", "type": "invalid_request_error"}}
    provider.queue(Reply(status=400, error=refusal))
    need = needs_summary(long_chat(30))
    result = await Summarizer(conversation_upstream).summarize(
        need, credentials=[], count=COUNTER.message, window=8 * WINDOW
    )
    first, second = provider.summary_requests
    assert first.json()["messages"][-1]["role"] == "user"  # the prefix form, refused
    assert second.json()["messages"][0]["role"] == "system"  # the transcript form
    assert (result.form, result.refused) == ("transcript", True)
    assert result.text


@pytest.mark.parametrize("status", [429, 500])
async def test_an_error_that_would_refuse_any_form_is_not_asked_again(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream, status: int
) -> None:
    provider.queue(Reply(status=status))
    with pytest.raises(SummaryFailedError, match=str(status)):
        await Summarizer(conversation_upstream).summarize(
            needs_summary(long_chat(30)), credentials=[], count=COUNTER.message, window=8 * WINDOW
        )
    assert len(provider.summary_requests) == 1


async def test_the_prefix_form_is_asked_only_when_it_costs_less_than_the_transcript(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    # Long instructions before the span (an agent's): the prefix is several times the span.
    messages = [system("rule " * 5000), *long_chat(12)[1:]]
    need = needs_summary(messages)
    assert need.prefix is not None
    span = sum(COUNTER.message(m) for m in need.span)
    ratio = need.prefix.tokens / span
    forms = []
    # A provider whose cache halves the price, and one that caches nothing: the transcript;
    # one whose cached tokens cost a tenth (the default): the prefix, when it is under ten
    # times the span.
    for price in (0.5, 1.0, 0.1):
        result = await Summarizer(conversation_upstream, cached_price=price).summarize(
            need, credentials=[], count=COUNTER.message, window=8 * WINDOW
        )
        forms.append(result.form)
    assert 2 < ratio < 9
    assert forms == ["transcript", "transcript", "prefix"]
