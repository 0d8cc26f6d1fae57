"""The summary brain's client, against the strict mock provider on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from proxy.adapters.summarizer import Summarizer, SummaryFailedError
from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import AiohttpUpstream, UpstreamRequest, fetched
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.request import Api, parse_messages_request, parse_responses_request
from proxy.core.responses import INSTRUCTIONS, ITEMS, to_messages
from proxy.core.summary import (
    AFTER_TASK,
    FOLD_IN,
    Prefix,
    prefix_closing,
    responses_prefix_request,
)
from proxy.core.tokens import ApproximateEncoder, TokenCounter
from proxy.mock_upstream import AgentScript, MockUpstream, Reply
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
    async with served(brain) as client:
        yield client


def long_chat(turns: int) -> list[Message]:
    messages = [system("be brief"), user("the task: fix ticket ABC-123")]
    for i in range(turns):
        messages += [assistant(f"reply {i} " + "w " * 120), user(f"next {i} " + "w " * 120)]
    return messages


def needs_summary(messages: list[Message], body: Mapping[str, Any] | None = None) -> NeedsSummary:
    situation = Situation(
        messages=messages,
        body=dict(body or {"model": "mock-model"}),
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
    async with served(provider) as client:
        yield client


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


async def test_a_brain_of_its_own_gets_a_transcript_whatever_the_conversation_s_api(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    need = needs_summary(long_chat(30))
    count, window = COUNTER.message, 8 * WINDOW
    results = [
        await summarizer.summarize(need, credentials=[], count=count, window=window, api=api)
        for summarizer, api in [
            (Summarizer(conversation_upstream, model="small-model"), Api.CHAT),
            (Summarizer(conversation_upstream, own_upstream=True), Api.CHAT),
            (Summarizer(conversation_upstream, model="small-model"), Api.RESPONSES),
        ]
    ]
    assert [result.form for result in results] == ["transcript"] * 3
    # The transcript form is a chat completion, for a Responses API conversation too.
    assert all(r.path == "/v1/chat/completions" for r in provider.summary_requests)
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


async def test_the_window_is_read_in_our_count_at_the_conversation_s_calibration(
    provider: MockUpstream, conversation_upstream: AiohttpUpstream
) -> None:
    # A Claude model's count is approximate and errs high (by about half on Claude Code's
    # head) until an answer calibrates it: compared with the window as it was, every 16k
    # Messages conversation's prefix read as too long for a summary request, and the prefix
    # form was never asked. The conversation's calibration says what our count is worth.
    need = needs_summary(long_chat(30))
    assert need.prefix is not None
    text = prefix_closing(need.prefix, previous=None, max_tokens=need.max_tokens)
    closing = COUNTER.message({"role": "user", "content": text})
    asked = need.prefix.tokens + closing + need.max_tokens
    window = asked * 10 // 9 * 4 // 5  # a fifth short, in our count
    forms = []
    for calibration in (1.0, 0.75):
        result = await Summarizer(conversation_upstream).summarize(
            need, credentials=[], count=COUNTER.message, window=window, calibration=calibration
        )
        forms.append(result.form)
    assert forms == ["transcript", "prefix"]


# --- The prefix form over the Responses API --------------------------------------------------

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
AGENT = AgentScript(calls=tuple(("read_file", f'{{"path": "src/m{i}.py"}}') for i in range(9)))
RESPONSES_FIELDS: dict[str, Any] = {
    "model": "mock-model",
    "instructions": "You are a coding agent. Be brief.",
    "tools": RESPONSES_TOOLS,
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "low", "summary": "auto"},
    "text": {"verbosity": "low"},
    "parallel_tool_calls": False,
    "prompt_cache_key": "agent-7",
}


def reasoning_provider() -> MockUpstream:
    """A reasoning model on the Responses API that checks what a real one checks: call
    pairs, and each reasoning item's `encrypted_content` sent back exactly as it made it."""
    return MockUpstream(
        encoders=Encoders(by_name={}, fallback=ApproximateEncoder()),
        agent=AGENT,
        strict=True,
        responses_reasoning=True,
    )


@asynccontextmanager
async def served(mock: MockUpstream) -> AsyncIterator[AiohttpUpstream]:
    async with serve(mock.app) as base_url:
        client = AiohttpUpstream(f"{base_url}/v1", timeout_s=10)
        await client.open()
        yield client
        await client.aclose()


async def respond(upstream: AiohttpUpstream, body: dict[str, Any]) -> dict[str, Any]:
    """The answer to `body`, sent over the Responses API as the proxy forwards it."""
    request = UpstreamRequest("POST", "responses", "", [], json.dumps(body).encode())
    response, raw = await fetched(upstream, request)
    assert response.status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


async def stateless_session(upstream: AiohttpUpstream, turns: int) -> dict[str, Any]:
    """`turns` user turns of a stateless agent (`store: false`), each response's items sent
    back as they came, reasoning included; the request of the turn after them."""
    items: list[Any] = []
    for turn in range(turns):
        items.append({"role": "user", "content": f"Step {turn}: read the next module."})
        while True:
            output = (await respond(upstream, {**RESPONSES_FIELDS, "input": items}))["output"]
            items += output
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                break
            items += [
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": f"# {call['arguments']}\n" + "def handler(): return 1\n" * 25,
                }
                for call in calls
            ]
    items.append({"role": "user", "content": "Now the tests."})
    return {**RESPONSES_FIELDS, "input": items}


def responses_need(body: dict[str, Any]) -> NeedsSummary:
    """The summary a compaction of the Responses API request `body` needs (its chat view)."""
    view = parse_responses_request(json.dumps(body).encode()).body
    return needs_summary(view["messages"], view)


async def test_a_responses_api_conversation_is_asked_by_its_own_items_and_read_from_the_cache() -> (
    None
):
    provider = reasoning_provider()
    async with served(provider) as upstream:
        forwarded = await stateless_session(upstream, 12)
        need = responses_need(forwarded)
        assert need.prefix is not None
        await respond(upstream, forwarded)  # the request as the proxy forwarded it: cached
        result = await Summarizer(upstream).summarize(
            need, credentials=[], count=COUNTER.message, window=8 * WINDOW, api=Api.RESPONSES
        )
    [request] = provider.summary_requests
    assert request.path == "/v1/responses"
    sent = request.json()
    # The forwarded items through the span's end, as they were forwarded (reasoning with its
    # encrypted content included), then the closing instruction as one user message item.
    # (The span ends on the assistant's answer: no pause before the closing message.)
    through = sum(len(message[ITEMS]) for message in need.prefix.messages if ITEMS in message)
    *items, closing = sent["input"]
    assert items == forwarded["input"][:through]
    assert through < len(forwarded["input"])  # the recent turns are no part of it
    assert any(item.get("type") == "reasoning" and item["encrypted_content"] for item in items)
    text = prefix_closing(need.prefix, previous=None, max_tokens=need.max_tokens)
    assert closing == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    # The fields the cached prompt depends on, as forwarded; the summary's own; no others.
    kept = ("model", "instructions", "tools", "include", "reasoning", "prompt_cache_key")
    assert {name: sent[name] for name in kept} == {name: forwarded[name] for name in kept}
    assert (sent["tool_choice"], sent["store"]) == ("none", False)
    assert sent["max_output_tokens"] == need.max_tokens
    assert not {"text", "parallel_tool_calls", "temperature", "stream"} & set(sent)
    assert provider.strict_rejections == 0  # the reasoning items verified, the pairs whole
    # The provider served the prefix it had just cached: most of the input.
    assert (result.form, result.refused) == ("prefix", False)
    [usage] = provider.summary_usage
    assert (result.input_tokens, result.cached_tokens) == (usage.prompt_tokens, usage.cached_tokens)
    assert result.cached_tokens >= 0.8 * result.input_tokens
    assert result.tokens == usage.prompt_tokens + usage.completion_tokens
    assert result.text.startswith("## Goal")
    assert result.model == "mock-model"


async def test_a_refused_responses_prefix_form_is_asked_again_as_a_chat_transcript() -> None:
    provider = reasoning_provider()
    refusal = {"error": {"message": "unsupported input", "type": "invalid_request_error"}}
    async with served(provider) as upstream:
        forwarded = await stateless_session(upstream, 12)
        await respond(upstream, forwarded)
        provider.queue(Reply(status=400, error=refusal))
        result = await Summarizer(upstream).summarize(
            responses_need(forwarded),
            credentials=[],
            count=COUNTER.message,
            window=8 * WINDOW,
            api=Api.RESPONSES,
        )
    first, second = provider.summary_requests
    assert first.path == "/v1/responses"  # the prefix form, refused
    assert second.path == "/v1/chat/completions"  # the transcript form
    assert second.json()["messages"][0]["role"] == "system"
    assert (result.form, result.refused) == ("transcript", True)
    assert result.text


async def test_a_responses_answer_without_a_message_is_no_summary() -> None:
    provider = reasoning_provider()
    async with served(provider) as upstream:
        forwarded = await stateless_session(upstream, 12)
        await respond(upstream, forwarded)
        provider.queue(Reply(content=None))  # its reasoning item alone
        with pytest.raises(SummaryFailedError, match="no text"):
            await Summarizer(upstream).summarize(
                responses_need(forwarded),
                credentials=[],
                count=COUNTER.message,
                window=8 * WINDOW,
                api=Api.RESPONSES,
            )
    assert len(provider.summary_requests) == 1  # a failure, not a refusal: not asked again


def test_the_responses_prefix_form_keeps_the_fields_of_the_cached_prompt_alone() -> None:
    """Without tools no `tool_choice`; a prefix ending on the user's turn gets the pause as
    an assistant message item; the earlier summary is folded in, as in chat's form."""
    messages = (
        {"role": "system", "content": "be brief", INSTRUCTIONS: True},
        *to_messages([{"role": "user", "content": "fix T-1"}]),
    )
    fields = {"model": "m", "stream": True, "text": {"format": {"type": "json_object"}}}
    prefix = Prefix(fields, messages, tokens=10, after_task=True)
    body = responses_prefix_request(prefix, previous="- T-0 done", max_tokens=64)
    assert set(body) == {"model", "instructions", "input", "max_output_tokens", "store"}
    assert body["instructions"] == "be brief"
    task, pause, closing = body["input"]
    assert task == {"role": "user", "content": "fix T-1"}
    assert (pause["role"], closing["role"]) == ("assistant", "user")
    text = closing["content"][0]["text"]
    assert AFTER_TASK in text
    assert text.endswith(FOLD_IN + "- T-0 done")


# --- a conversation on the Messages API -----------------------------------------------------

MESSAGES_FIELDS: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 1000,
    "system": "You are a coding agent.",
    "tools": [
        {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ],
}
ANTHROPIC_KEY = [("x-api-key", "sk-ant-client"), ("anthropic-version", "2023-06-01")]


def messages_provider() -> MockUpstream:
    """A Messages API provider that checks pairs and signatures, with a prompt cache."""
    encoders = Encoders(by_name={}, fallback=ApproximateEncoder())
    return MockUpstream(encoders=encoders, strict=True, cache_min_tokens=256)


def messages_conversation(turns: int) -> dict[str, Any]:
    """A Messages conversation of `turns` tool rounds, the last block marked for the cache."""
    messages: list[Any] = []
    for n in range(turns):
        messages += [
            {"role": "user", "content": f"Step {n}: read module {n}."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{n}",
                        "content": f"# module {n}: def handler(): return 1",
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": f"Module {n} read. " + "w " * 120}],
            },
        ]
    messages.append(
        {
            "role": "user",
            "content": [{"type": "text", "text": "Go on.", "cache_control": EPHEMERAL}],
        }
    )
    return {**MESSAGES_FIELDS, "messages": messages}


EPHEMERAL = {"type": "ephemeral"}


async def sent_messages(upstream: AiohttpUpstream, body: dict[str, Any]) -> None:
    """`body` forwarded over the Messages API, as the proxy forwards it (cached then)."""
    headers = [("content-type", "application/json"), *ANTHROPIC_KEY]
    request = UpstreamRequest("POST", "messages", "", headers, json.dumps(body).encode())
    response, raw = await fetched(upstream, request)
    assert response.status == 200, raw


def messages_need(body: dict[str, Any]) -> NeedsSummary:
    view = parse_messages_request(json.dumps(body).encode()).body
    return needs_summary(view["messages"], view)


async def test_a_messages_conversation_is_asked_in_the_messages_api_and_read_from_the_cache() -> (
    None
):
    provider = messages_provider()
    forwarded = messages_conversation(40)
    async with served(provider) as upstream:
        # The agent's requests as they grew, each marked on its last block (so cached there).
        for turn in range(2, 40, 2):
            *before, results = forwarded["messages"][: 4 * turn + 3]
            marked = [
                *results["content"][:-1],
                {**results["content"][-1], "cache_control": EPHEMERAL},
            ]
            earlier = {**forwarded, "messages": [*before, {**results, "content": marked}]}
            await sent_messages(upstream, earlier)
        await sent_messages(upstream, forwarded)
        need = messages_need(forwarded)
        assert need.prefix is not None
        result = await Summarizer(upstream).summarize(
            need,
            credentials=ANTHROPIC_KEY,
            count=COUNTER.message,
            window=8 * WINDOW,
            api=Api.MESSAGES,
        )
    [request] = provider.summary_requests
    assert request.path == "/v1/messages"
    assert request.header("x-api-key") == "sk-ant-client"
    assert request.header("anthropic-version") == "2023-06-01"
    sent = request.json()
    assert sent["system"] == MESSAGES_FIELDS["system"]
    assert sent["tool_choice"] == {"type": "none"}
    assert sent["messages"][:4] == forwarded["messages"][:4]  # as forwarded
    assert provider.strict_rejections == 0
    assert (result.form, result.refused) == ("prefix", False)
    [usage] = provider.summary_usage
    assert (result.input_tokens, result.cached_tokens) == (usage.prompt_tokens, usage.cached_tokens)
    assert result.cached_tokens > 0
    assert result.text.startswith("## Goal")


async def test_a_refused_messages_prefix_form_is_asked_again_as_a_messages_transcript() -> None:
    provider = messages_provider()
    forwarded = messages_conversation(40)
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    async with served(provider) as upstream:
        await sent_messages(upstream, forwarded)
        provider.queue(Reply(status=400, error=refusal))
        result = await Summarizer(upstream, api_key="sk-ant-brain").summarize(
            messages_need(forwarded),
            credentials=[("x-api-key", "sk-ant-client"), ("anthropic-beta", "context-1m")],
            count=COUNTER.message,
            window=8 * WINDOW,
            api=Api.MESSAGES,
        )
    first, second = provider.summary_requests
    assert first.path == second.path == "/v1/messages"
    assert "system" in second.json()
    assert second.json()["messages"][0]["role"] == "user"
    assert second.header("x-api-key") == "sk-ant-brain"  # the brain's own key, as Anthropic's
    assert second.header("anthropic-beta") == "context-1m"  # the client's flags still
    assert second.header("anthropic-version") == "2023-06-01"  # one is always sent
    assert (result.form, result.refused) == ("transcript", True)


async def test_a_brain_of_its_own_gets_a_chat_transcript_of_a_messages_conversation() -> None:
    provider = messages_provider()
    forwarded = messages_conversation(40)
    async with served(provider) as upstream:
        result = await Summarizer(upstream, model="mock-model", own_upstream=True).summarize(
            messages_need(forwarded),
            credentials=[],
            count=COUNTER.message,
            window=8 * WINDOW,
            api=Api.MESSAGES,
        )
    [request] = provider.summary_requests
    assert request.path == "/v1/chat/completions"
    assert result.form == "transcript"


async def test_a_messages_answer_without_text_is_no_summary() -> None:
    provider = messages_provider()
    async with served(provider) as upstream:
        provider.queue(Reply(content=None))
        with pytest.raises(SummaryFailedError, match="no text"):
            await Summarizer(upstream).summarize(
                messages_need(messages_conversation(40)),
                credentials=ANTHROPIC_KEY,
                count=COUNTER.message,
                window=8 * WINDOW,
                api=Api.MESSAGES,
            )
