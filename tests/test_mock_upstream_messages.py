"""The mock upstream's Messages API (`POST /v1/messages`), through the official `anthropic` SDK
over real sockets: shapes the SDK parses, sync and async, metering, the window and its overflow
(whole and streamed), the event stream, `count_tokens`, and Claude Code's probe.

Token counts are asserted against `messages_prompt_tokens` (the mock's own metering, exported
for the proxy's tests) and as relations, so they hold whichever encoder loads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.overflow import Kind, classify
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.mock_upstream import MockUpstream, Reply, ToolCall, messages_prompt_tokens
from proxy.mock_upstream.command import Options, add_arguments, describe, mock_for, options_from
from tests.mock_messages import (
    EPHEMERAL,
    MODEL,
    READ_FILE,
    Block,
    Body,
    assistant,
    error_of,
    headers,
    long_text,
    raw,
    request,
    sdk,
    text,
    tool_result,
    tool_use,
    user,
)
from tests.servers import serve, serve_in_thread
from tests.test_cli_mock import mock_process


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders((O200K_BASE,))


@pytest.fixture
def counter(encoders: Encoders) -> TokenCounter:
    """The count the mock makes its own from (the encoder it is handed)."""
    return TokenCounter(encoders.by_name.get(O200K_BASE, encoders.fallback))


def blocks_of(message: Message) -> list[dict[str, Any]]:
    """A message's content as JSON (a streamed message's blocks are the SDK's parsed kind)."""
    return [block.model_dump(exclude_none=True) for block in message.content]


# --- the message and its usage ---------------------------------------------------------------


async def test_whole_message_parses_with_the_sdk(encoders: Encoders, counter: TokenCounter) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content="It imports os and sys."))
    body = request(
        user("Read src/app.py and tell me what it imports."),
        system="You are a careful engineer.",
        tools=[READ_FILE],
    )
    async with sdk(upstream) as client:
        message = await client.messages.create(**body)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].type == "text"
    assert message.content[0].text == "It imports os and sys."
    assert (message.role, message.model, message.stop_reason) == ("assistant", MODEL, "end_turn")
    assert message.id.startswith("msg_")
    usage = message.usage
    assert usage.input_tokens == messages_prompt_tokens(body, counter)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)
    assert usage.output_tokens == counter.text("It imports os and sys.")
    recorded = upstream.last
    assert recorded.path == "/v1/messages"
    # The key as a Bearer token (2.x) or in x-api-key (earlier), and the SDK's API version.
    sent = {recorded.header("x-api-key"), recorded.header("authorization")}
    assert sent & {"sk-ant-test", "Bearer sk-ant-test"}
    assert recorded.header("anthropic-version")
    assert upstream.prompt_tokens == [usage.input_tokens]
    assert upstream.cached_tokens == [0]


def test_sync_client_gets_the_same_answer_whole_and_streamed(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, default=Reply(content="Same answer, whole."))
    body = request(user("What does src/app.py import?"))
    with (
        serve_in_thread(upstream.app) as base_url,
        anthropic.Anthropic(api_key="sk-ant-test", base_url=base_url, max_retries=0) as client,
    ):
        whole = client.messages.create(**body)
        with client.messages.stream(**body) as stream:
            deltas = list(stream.text_stream)
            streamed = stream.get_final_message()
    assert "".join(deltas) == "Same answer, whole."
    assert len(deltas) > 1
    assert blocks_of(streamed) == blocks_of(whole)
    assert streamed.usage == whole.usage
    assert streamed.stop_reason == whole.stop_reason == "end_turn"


async def test_beta_route_and_bearer_credentials_are_accepted(encoders: Encoders) -> None:
    """Claude Code's shape: `?beta=true`, flags in `anthropic-beta`; gateways use Bearer."""
    upstream = MockUpstream(encoders=encoders, strict=True)
    beta = "claude-code-20250219,interleaved-thinking-2025-05-14"
    async with raw(upstream) as http:
        response = await http.post(
            "/v1/messages?beta=true",
            json=request(user("hi")),
            headers={
                "authorization": "Bearer sk-ant-token",
                "anthropic-version": "2023-06-01",
                "anthropic-beta": beta,
            },
        )
    assert response.status_code == 200
    assert response.json()["type"] == "message"
    assert response.headers["request-id"].startswith("req_mock_")
    assert (upstream.last.query, upstream.last.header("anthropic-beta")) == ("beta=true", beta)


async def test_the_beta_client_and_an_api_key_header_are_accepted(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with (
        serve(upstream.app) as base_url,
        anthropic.AsyncAnthropic(
            api_key=None,
            base_url=base_url,
            default_headers={"x-api-key": "sk-ant-key"},
            max_retries=0,
        ) as client,
    ):
        message = await client.beta.messages.create(
            **request(user("hi")), betas=["context-management-2025-06-27"]
        )
    assert message.stop_reason == "end_turn"
    assert upstream.last.header("anthropic-beta") == "context-management-2025-06-27"
    assert (upstream.last.header("x-api-key"), upstream.last.header("authorization")) == (
        "sk-ant-key",
        None,
    )


async def test_queued_tool_calls_become_tool_use_blocks(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    calls = (
        ToolCall("read_file", '{"path": "a.py"}', "toolu_a"),
        ToolCall("read_file", '{"path": "b.py"}', "toolu_b"),
    )
    upstream.queue(Reply(content="Reading both.", tool_calls=calls))
    async with sdk(upstream) as client:
        message = await client.messages.create(
            **request(user("Read a.py, b.py"), tools=[READ_FILE])
        )
    uses = [block for block in message.content if block.type == "tool_use"]
    assert [(use.id, use.name, use.input) for use in uses] == [
        ("toolu_a", "read_file", {"path": "a.py"}),
        ("toolu_b", "read_file", {"path": "b.py"}),
    ]
    assert message.content[0].type == "text"
    assert message.stop_reason == "tool_use"


async def test_scripted_error_is_sent_as_is(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.queue(Reply(status=529, error=error, headers={"retry-after": "1"}))
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(**request(user("hi")))
    assert raised.value.status_code == 529
    assert raised.value.body == error
    assert raised.value.response.headers["retry-after"] == "1"


async def test_head_on_the_base_url_is_answered(encoders: Encoders) -> None:
    """Claude Code probes its base URL with `HEAD /` before its first request."""
    upstream = MockUpstream(encoders=encoders)
    async with raw(upstream) as http:
        response = await http.head("/")
    assert response.status_code == 200
    assert (upstream.last.method, upstream.last.path) == ("HEAD", "/")


# --- metering --------------------------------------------------------------------------------

IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
PDF = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
}


def document(content: str) -> Block:
    source = {"type": "text", "media_type": "text/plain", "data": content}
    return {"type": "document", "source": source}


@pytest.mark.parametrize(
    ("small", "large"),
    [
        (request(user("short")), request(user(long_text(30)))),
        (
            request(user("go"), assistant(tool_use("t1")), user(tool_result("t1"))),
            request(user("go"), assistant(tool_use("t1")), user(tool_result("t1", "x " * 900))),
        ),
        (
            request(user("go"), assistant(tool_use("t1")), user(tool_result("t1"))),
            request(user("go"), assistant(tool_use("t1", long_text(20))), user(tool_result("t1"))),
        ),
        (
            request(
                user("go"), assistant({"type": "thinking", "thinking": "Hm.", "signature": "s"})
            ),
            request(
                user("go"),
                assistant({"type": "thinking", "thinking": long_text(20), "signature": "s"}),
            ),
        ),
        (request(user("go")), request(user("go"), system=long_text(20))),
        (request(user("go")), request(user("go"), system=[text("a"), text(long_text(20))])),
        (request(user("go")), request(user("go"), tools=[READ_FILE])),
        (request(user("go")), request(user(text("go"), IMAGE))),
        (
            request(user("go")),
            request(user("go"), assistant({"type": "redacted_thinking", "data": "Ab" * 400})),
        ),
        (
            request(user("go")),
            request(user("go"), assistant({"type": "server_tool_use", "id": "s1", "name": "x"})),
        ),
        (request(user("go")), request(user(text("go"), PDF))),
        (
            request(user(text("go"), document("short"))),
            request(user(text("go"), document(long_text(20)))),
        ),
        (request(user("go")), request(user("go"), {"role": "assistant", "content": []})),
    ],
    ids=[
        "text",
        "tool-result",
        "tool-input",
        "thinking",
        "system",
        "system-blocks",
        "tools",
        "image",
        "redacted",
        "unknown-block",
        "pdf",
        "text-document",
        "empty-message",
    ],
)
def test_more_input_is_more_tokens(counter: TokenCounter, small: Body, large: Body) -> None:
    assert messages_prompt_tokens(large, counter) > messages_prompt_tokens(small, counter)


def test_string_content_counts_as_one_text_block(counter: TokenCounter) -> None:
    as_string = request(user("hello there"), system="Be brief.")
    as_blocks = request(user(text("hello there")), system=[text("Be brief.")])
    assert messages_prompt_tokens(as_string, counter) == messages_prompt_tokens(as_blocks, counter)


def test_markers_and_signatures_cost_nothing(counter: TokenCounter) -> None:
    """A breakpoint marks a place in the prompt, and the model never reads a signature."""
    plain = request(user(text("hello there")))
    marked = request(user(text("hello there", cache_control=EPHEMERAL)))
    assert messages_prompt_tokens(plain, counter) == messages_prompt_tokens(marked, counter)
    short = assistant({"type": "thinking", "thinking": "Hm.", "signature": "s"})
    long = assistant({"type": "thinking", "thinking": "Hm.", "signature": "s" * 900})
    assert messages_prompt_tokens(request(user("go"), short), counter) == messages_prompt_tokens(
        request(user("go"), long), counter
    )


async def test_token_factor_scales_usage(encoders: Encoders, counter: TokenCounter) -> None:
    upstream = MockUpstream(encoders=encoders, token_factor=1.15, default=Reply(content="ok"))
    body = request(user(long_text(40)), tools=[READ_FILE])
    async with sdk(upstream) as client:
        message = await client.messages.create(**body)
    base = messages_prompt_tokens(body, counter)
    assert (
        message.usage.input_tokens
        == round(base * 1.15)
        == messages_prompt_tokens(body, counter, 1.15)
    )
    assert message.usage.input_tokens > base


# --- the window ------------------------------------------------------------------------------


def overflow_error(prompt: int, window: int) -> dict[str, Any]:
    message = f"prompt is too long: {prompt} tokens > {window} maximum"
    return {"type": "invalid_request_error", "message": message}


async def test_overflow_is_anthropic_s_400(encoders: Encoders, counter: TokenCounter) -> None:
    body = request(user(long_text(100)))
    prompt = messages_prompt_tokens(body, counter)
    upstream = MockUpstream(encoders=encoders, window=prompt - 1)
    upstream.queue(Reply(content="never sent"))
    async with raw(upstream) as http:
        response = await http.post("/v1/messages", json=body, headers=headers())
    assert response.status_code == 400
    sent = response.json()
    assert sent == {
        "type": "error",
        "error": overflow_error(prompt, prompt - 1),
        "request_id": response.headers["request-id"],
    }
    assert (upstream.overflows, upstream.prompt_tokens) == (1, [])
    # The proxy's classifier reads it as the fixtures' Anthropic overflow: prompt, then limit.
    verdict = classify(400, response.content)
    assert (verdict.kind, verdict.prompt_tokens, verdict.limit) == (
        Kind.OVERFLOW_PROMPT,
        prompt,
        prompt - 1,
    )


async def test_a_prompt_at_the_window_is_answered_whatever_max_tokens(
    encoders: Encoders, counter: TokenCounter
) -> None:
    """Current models refuse the prompt alone over the window; the output is capped instead."""
    body = request(user(long_text(100)), max_tokens=20_000)
    upstream = MockUpstream(encoders=encoders, window=messages_prompt_tokens(body, counter))
    async with sdk(upstream) as client:
        message = await client.messages.create(**body)
    assert message.stop_reason == "end_turn"
    assert upstream.overflows == 0


async def test_streamed_overflow_is_400_before_any_event(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(100)))
    prompt = messages_prompt_tokens(body, counter)
    upstream = MockUpstream(encoders=encoders, window=prompt - 10)
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**body, stream=True)
    assert error_of(raised) == overflow_error(prompt, prompt - 10)
    assert upstream.overflows == 1
    assert upstream.streams_abandoned == 0  # no stream was started


# --- streaming -------------------------------------------------------------------------------

RAW_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)


async def test_stream_events_follow_anthropic_order(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    calls = (ToolCall("read_file", '{"path": "src/app.py"}', "toolu_1"),)
    upstream.queue(Reply(content="Reading it.", tool_calls=calls))
    body = request(
        user("Read src/app.py"),
        tools=[READ_FILE],
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    async with sdk(upstream) as client, client.messages.stream(**body) as stream:
        # The SDK adds its own events per delta (`text`, `thinking`, ...): the raw ones only.
        seen = [event async for event in stream if event.type in RAW_EVENTS]
        final = await stream.get_final_message()
    kinds = [event.type for event in seen]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    opened = [event.content_block.type for event in seen if event.type == "content_block_start"]
    assert opened == ["thinking", "text", "tool_use"]
    stops = [event.index for event in seen if event.type == "content_block_stop"]
    assert stops == [0, 1, 2]
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    thinking = final.content[0]
    assert thinking.type == "thinking"
    assert "read_file" in thinking.thinking
    assert len(thinking.signature) > 200
    assert final.content[2].type == "tool_use"
    assert final.content[2].input == {"path": "src/app.py"}
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens > 1


async def test_stream_is_sse_with_event_lines_a_ping_and_no_done(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, default=Reply(content="a short answer"))
    body = request(user("hi"), stream=True, thinking={"type": "adaptive"})
    async with (
        raw(upstream) as http,
        http.stream("POST", "/v1/messages", json=body, headers=headers()) as response,
    ):
        sent = (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in filter(None, sent.split("\n\n")):
        event, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert event.removeprefix("event: ") == payload["type"]
        events.append(payload)
    assert "[DONE]" not in sent
    kinds = [event["type"] for event in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    start = events[0]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == (
        [],
        None,
        1,
    )
    deltas = [event["delta"] for event in events if event["type"] == "content_block_delta"]
    assert {delta["type"] for delta in deltas} == {
        "thinking_delta",
        "signature_delta",
        "text_delta",
    }
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == "a short answer"
    signatures = [d for d in deltas if d["type"] == "signature_delta"]
    assert len(signatures) == 1
    ending = events[-2]
    assert ending["type"] == "message_delta"
    assert ending["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert set(ending["usage"]) == {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    assert ending["usage"]["input_tokens"] == start["usage"]["input_tokens"]


async def test_streamed_and_whole_messages_bill_alike(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, default=Reply(content="The same, twice."))
    body = request(user("hi"))
    async with sdk(upstream) as client:
        whole = await client.messages.create(**body)
        async with client.messages.stream(**body) as stream:
            streamed = await stream.get_final_message()
    assert blocks_of(streamed) == blocks_of(whole)
    assert streamed.usage.output_tokens == whole.usage.output_tokens
    assert streamed.usage.input_tokens == whole.usage.input_tokens


async def test_error_event_ends_a_started_stream(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    upstream.queue(Reply(content="a long enough answer", stream_error=overloaded))
    got: list[str] = []

    async def read(client: anthropic.AsyncAnthropic) -> None:
        async with client.messages.stream(**request(user("hi"))) as stream:
            async for event in stream:
                got.append(event.type)

    async with sdk(upstream) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await read(client)
    assert raised.value.body == {"type": "error", "error": overloaded}
    assert got[:2] == ["message_start", "content_block_start"]
    assert "message_stop" not in got


async def test_a_message_without_content_streams_its_frame(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    upstream.queue(Reply(content=None), Reply(content=None, stream_error=overloaded))
    async with raw(upstream) as http:
        sent = []
        for _ in range(2):
            body = request(user("hi"), stream=True)
            response = await http.post("/v1/messages", json=body, headers=headers())
            sent.append(
                [
                    json.loads(line[6:])["type"]
                    for line in response.text.splitlines()
                    if line.startswith("data: ")
                ]
            )
    assert sent == [
        ["message_start", "ping", "message_delta", "message_stop"],
        ["message_start", "ping", "error"],
    ]


async def test_arguments_that_are_no_json_still_make_an_input(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content=None, tool_calls=(ToolCall("patch", "*** Begin Patch", "t1"),)))
    async with sdk(upstream) as client:
        message = await client.messages.create(**request(user("Patch it.")))
    assert message.content[0].type == "tool_use"
    assert message.content[0].input == {"arguments": "*** Begin Patch"}


async def test_stream_waits_on_hold_after_first_delta(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    hold = asyncio.Event()
    upstream.queue(Reply(content="a long enough answer", hold=hold))
    async with sdk(upstream) as client:
        stream = await client.messages.create(**request(user("hi")), stream=True)
        events = aiter(stream)
        kinds = [(await asyncio.wait_for(anext(events), 5)).type for _ in range(3)]
        assert kinds == ["message_start", "content_block_start", "content_block_delta"]
        pending = asyncio.ensure_future(anext(events))
        done, _ = await asyncio.wait({pending}, timeout=0.2)
        assert not done  # the mock holds the rest of the answer
        hold.set()
        rest = [(await pending).type] + [event.type async for event in events]
    assert rest[0] == "content_block_delta"
    assert rest[-1] == "message_stop"


async def test_abandoned_stream_is_counted(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content="tick", endless=True, chunk_delay_s=0.01))
    async with sdk(upstream) as client:
        stream = await client.messages.create(**request(user("hi")), stream=True)
        deltas = 0
        async for event in stream:
            deltas += event.type == "content_block_delta"
            if deltas > 8:
                break
        await stream.close()
        for _ in range(500):
            if upstream.streams_abandoned:
                break
            await asyncio.sleep(0.01)
    assert upstream.streams_abandoned == 1


# --- count_tokens ----------------------------------------------------------------------------


def counting(*messages: Block, **fields: Any) -> Body:
    """A count_tokens body: a request's, with no `max_tokens`."""
    return {"model": MODEL, "messages": list(messages), **fields}


async def test_count_tokens_answers_the_prompt_s_count(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(50)), system="Be careful.", tools=[READ_FILE])
    prompt = messages_prompt_tokens(body, counter)
    # Counting is no request for the model: the window does not apply to it.
    upstream = MockUpstream(encoders=encoders, window=prompt - 1, strict=True)
    fields = counting(*body["messages"], system=body["system"], tools=body["tools"])
    async with sdk(upstream) as client:
        counted = await client.messages.count_tokens(**fields)
        beta = await client.beta.messages.count_tokens(**fields)
    assert counted.input_tokens == beta.input_tokens == prompt
    assert upstream.last.path == "/v1/messages/count_tokens"
    assert (upstream.overflows, upstream.prompt_tokens) == (0, [])


async def test_count_tokens_checks_the_request_as_the_api_does(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.count_tokens(**counting(user(tool_result("toolu_9"))))
    assert "unexpected `tool_use_id`" in error_of(raised)["message"]
    assert upstream.strict_rejections == 1


async def test_count_tokens_switched_off_is_a_404(encoders: Encoders) -> None:
    """A provider without the endpoint, for the proxy's fallback to its own count."""
    upstream = MockUpstream(encoders=encoders, messages_count_tokens=False)
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.NotFoundError) as raised:
            await client.messages.count_tokens(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        answered = await client.messages.create(**request(user("hi")))
    assert error_of(raised) == {"type": "not_found_error", "message": "Not Found"}
    assert answered.stop_reason == "end_turn"


def test_the_command_line_can_switch_count_tokens_off() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from(parser.parse_args(["--no-count-tokens"]))
    assert options == Options(count_tokens=False)
    assert options_from(parser.parse_args([])).count_tokens
    assert not mock_for(options).messages_count_tokens
    assert "no count_tokens" in describe(options, "http://127.0.0.1:8000/v1", ("m",))
    assert "count_tokens" not in describe(Options(), "http://127.0.0.1:8000/v1", ("m",))


def test_the_mock_command_speaks_the_messages_api() -> None:
    """`compaction-proxy mock` as a user starts it, for an Anthropic client."""
    with mock_process(["--strict", "--window", "1000"]) as (_, base_url, line):
        root = base_url.removesuffix("/v1")
        probe = httpx.head(f"{root}/")
        with anthropic.Anthropic(api_key="sk-ant-any", base_url=root, max_retries=0) as client:
            message = client.messages.create(**request(user("Hi")))
            counted = client.messages.count_tokens(**counting(user("Hi")))
            with pytest.raises(anthropic.BadRequestError) as refused:
                client.messages.create(**request(user(long_text(200))))
    assert probe.status_code == 200
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello from the mock upstream."
    assert counted.input_tokens == message.usage.input_tokens
    assert error_of(refused)["message"].endswith("tokens > 1000 maximum")
    assert "Anthropic-compatible" in line
