"""The mock upstream's Responses API (`POST /v1/responses`), through the official SDK over
real sockets: shapes the SDK parses, metering, the window, OpenAI's strictness and the
reasoning rules, `previous_response_id`, streaming, and an agent played over several turns.

Token counts are asserted against `responses_prompt_tokens` (the mock's own metering,
exported for the proxy's tests) and as relations, so they hold whichever encoder loads.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseIncludable

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.request import parse_responses_request
from proxy.core.summary import Prefix, responses_prefix_request
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.mock_upstream import AgentScript, MockUpstream, Reply, ToolCall, responses_prompt_tokens
from proxy.mock_upstream.responses_strictness import OVERFLOW_MESSAGE
from tests.servers import serve, serve_in_thread

MODEL = "gpt-5-mini"
ENCRYPTED: list[ResponseIncludable] = ["reasoning.encrypted_content"]
READ_FILE = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file of the repository.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": False,
}
Item = dict[str, Any]


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders((O200K_BASE,))


@pytest.fixture
def counter(encoders: Encoders) -> TokenCounter:
    """The count the mock makes its own from (the encoder it is handed)."""
    return TokenCounter(encoders.by_name.get(O200K_BASE, encoders.fallback))


@asynccontextmanager
async def sdk(upstream: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        serve(upstream.app) as base_url,
        openai.AsyncOpenAI(api_key="sk-test", base_url=f"{base_url}/v1", max_retries=0) as client,
    ):
        yield client


@asynccontextmanager
async def raw(upstream: MockUpstream) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(upstream.app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield http


def request(*items: Item, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": list(items), **fields}


def user(text: str = "Read src/app.py and tell me what it imports.") -> Item:
    return {"role": "user", "content": text}


def call(call_id: str, arguments: str = '{"path": "src/app.py"}') -> Item:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "read_file",
        "arguments": arguments,
    }


def output(call_id: str, text: str = "import os\nimport sys") -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def reasoning(ident: str, encrypted: str, summary: str = "Thinking.") -> Item:
    return {
        "type": "reasoning",
        "id": ident,
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted,
    }


def long_text(words: int, seed: str = "fact") -> str:
    return " ".join(f"{seed}{i} is recorded in notes/{seed}{i}.md" for i in range(words))


def echoed(response: Response) -> list[Item]:
    """The response's output as a stateless client sends it back."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def tool_outputs(response: Response) -> list[Item]:
    return [output(item.call_id) for item in response.output if item.type == "function_call"]


def error_of(raised: pytest.ExceptionInfo[openai.APIStatusError]) -> Any:
    return raised.value.body


# --- the response and its usage --------------------------------------------------------------


async def test_whole_response_parses_with_the_sdk(
    encoders: Encoders, counter: TokenCounter
) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content="It imports os and sys."))
    body = request(user(), instructions="You are a careful engineer.", tools=[READ_FILE])
    async with sdk(upstream) as client:
        response = await client.responses.create(**body)
    assert response.output_text == "It imports os and sys."
    assert [item.type for item in response.output] == ["message"]
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens == responses_prompt_tokens(body, counter)
    assert response.usage.output_tokens == counter.text("It imports os and sys.")
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert upstream.last.path == "/v1/responses"
    assert upstream.prompt_tokens == [response.usage.input_tokens]


def test_sync_client_gets_the_same_answer(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, default=Reply(content="Same answer."))
    with (
        serve_in_thread(upstream.app) as base_url,
        openai.OpenAI(api_key="sk-test", base_url=f"{base_url}/v1", max_retries=0) as client,
    ):
        whole = client.responses.create(model=MODEL, input="What does src/app.py import?")
        streamed = list(
            client.responses.create(model=MODEL, input="What does src/app.py import?", stream=True)
        )
    assert whole.output_text == "Same answer."
    completed = streamed[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Same answer."
    assert completed.response.usage == whole.usage


async def test_queued_tool_calls_become_function_call_items(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    calls = (ToolCall("read_file", '{"path": "a.py"}', "call_a"), ToolCall("read_file", "{}", "b"))
    upstream.queue(Reply(content=None, tool_calls=calls))
    async with sdk(upstream) as client:
        response = await client.responses.create(**request(user(), tools=[READ_FILE]))
    made = [(item.type, getattr(item, "call_id", None)) for item in response.output]
    assert made == [("function_call", "call_a"), ("function_call", "b")]
    assert response.output_text == ""


async def test_scripted_error_is_sent_as_is(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    error = {"error": {"message": "slow down", "type": "rate_limit_error", "code": None}}
    upstream.queue(Reply(status=429, error=error, headers={"retry-after": "1"}))
    async with raw(upstream) as http:
        response = await http.post("/v1/responses", json=request(user()))
    assert (response.status_code, response.json()) == (429, error)
    assert response.headers["retry-after"] == "1"


# --- metering --------------------------------------------------------------------------------


def test_string_input_counts_as_one_user_message(counter: TokenCounter) -> None:
    as_string = {"model": MODEL, "input": "hello there"}
    as_item = request({"role": "user", "content": [{"type": "input_text", "text": "hello there"}]})
    assert responses_prompt_tokens(as_string, counter) == responses_prompt_tokens(as_item, counter)


@pytest.mark.parametrize(
    ("small", "large"),
    [
        (request(user("short")), request(user(long_text(30)))),
        (
            request(user(), call("c1"), output("c1")),
            request(user(), call("c1"), output("c1", "x" * 900)),
        ),
        (
            request(user(), call("c1", "{}"), output("c1")),
            request(user(), call("c1", json.dumps({"path": long_text(20)})), output("c1")),
        ),
        (
            request(reasoning("rs_1", "gAAAA" * 10), user()),
            request(reasoning("rs_1", "gAAAA" * 400), user()),
        ),
        (request(user()), request(user(), instructions=long_text(20))),
        (request(user()), request(user(), tools=[READ_FILE])),
        (
            request(user()),
            request(user(), {"type": "web_search_call", "id": "ws_1", "status": "completed"}),
        ),
    ],
    ids=["message", "tool-output", "arguments", "encrypted", "instructions", "tools", "opaque"],
)
def test_more_input_is_more_tokens(
    counter: TokenCounter, small: dict[str, Any], large: dict[str, Any]
) -> None:
    assert responses_prompt_tokens(large, counter) > responses_prompt_tokens(small, counter)


def test_encrypted_content_counts_a_token_per_four_characters(counter: TokenCounter) -> None:
    short = request(reasoning("rs_1", "A" * 400), user())
    long = request(reasoning("rs_1", "A" * 800), user())
    assert responses_prompt_tokens(long, counter) - responses_prompt_tokens(short, counter) == 100


async def test_token_factor_scales_usage(encoders: Encoders, counter: TokenCounter) -> None:
    upstream = MockUpstream(encoders=encoders, token_factor=1.15, default=Reply(content="ok"))
    body = request(user(long_text(40)), call("c1"), output("c1"), tools=[READ_FILE])
    async with sdk(upstream) as client:
        response = await client.responses.create(**body)
    assert response.usage is not None
    base = responses_prompt_tokens(body, counter)
    assert (
        response.usage.input_tokens
        == round(base * 1.15)
        == responses_prompt_tokens(body, counter, 1.15)
    )
    assert response.usage.input_tokens > base


# --- the window ------------------------------------------------------------------------------


OVERFLOW_BODY = {
    "error": {
        "message": OVERFLOW_MESSAGE,
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}


async def test_overflow_is_openai_responses_400(encoders: Encoders, counter: TokenCounter) -> None:
    body = request(user(long_text(100)), max_output_tokens=500)
    prompt = responses_prompt_tokens(body, counter)
    upstream = MockUpstream(encoders=encoders, window=prompt + 499)
    upstream.queue(Reply(content="never sent"))
    async with raw(upstream) as http:
        response = await http.post("/v1/responses", json=body)
    assert response.status_code == 400
    assert response.json() == OVERFLOW_BODY
    assert OVERFLOW_MESSAGE == (
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again."
    )
    assert (upstream.overflows, upstream.prompt_tokens) == (1, [])


async def test_prompt_that_fits_with_its_output_is_answered(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(100)), max_output_tokens=500)
    upstream = MockUpstream(encoders=encoders, window=responses_prompt_tokens(body, counter) + 500)
    async with sdk(upstream) as client:
        response = await client.responses.create(**body)
    assert response.status == "completed"
    assert upstream.overflows == 0


async def test_streamed_overflow_is_400_before_any_event(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(100)))
    upstream = MockUpstream(encoders=encoders, window=responses_prompt_tokens(body, counter) - 1)
    async with sdk(upstream) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**body, stream=True)
    assert error_of(raised) == OVERFLOW_BODY["error"]
    assert upstream.overflows == 1


async def test_streamed_overflow_can_fail_inside_the_stream(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(100)))
    upstream = MockUpstream(
        encoders=encoders,
        window=responses_prompt_tokens(body, counter) - 1,
        responses_overflow_in_stream=True,
    )
    async with sdk(upstream) as client:
        stream = await client.responses.create(**body, stream=True)
        seen = [event async for event in stream]
    assert [event.type for event in seen] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert [event.sequence_number for event in seen] == [0, 1, 2]
    failed = seen[-1].response
    assert failed.status == "failed"
    assert failed.error is not None
    assert (failed.error.code, failed.error.message) == (
        "context_length_exceeded",
        OVERFLOW_MESSAGE,
    )
    assert upstream.overflows == 1


async def test_unstreamed_overflow_stays_400_with_in_stream_option(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = request(user(long_text(100)))
    window = responses_prompt_tokens(body, counter) - 1
    upstream = MockUpstream(encoders=encoders, window=window, responses_overflow_in_stream=True)
    async with raw(upstream) as http:
        response = await http.post("/v1/responses", json=body)
    assert (response.status_code, response.json()) == (400, OVERFLOW_BODY)


# --- strictness: call pairs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [user(), output("call_9")],
            "No tool call found for function call output with call_id call_9.",
        ),
        (
            [user(), output("call_1"), call("call_1")],
            "No tool call found for function call output with call_id call_1.",
        ),
        ([user(), call("call_1")], "No tool output found for function call call_1."),
        (
            [user(), call("call_1"), call("call_2"), output("call_2"), user("go on")],
            "No tool output found for function call call_1.",
        ),
        (
            [
                user(),
                {"type": "custom_tool_call", "call_id": "ct_1", "name": "patch", "input": "x"},
            ],
            "No tool output found for custom tool call ct_1.",
        ),
        (
            [user(), {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "ok"}],
            "No tool call found for custom tool call output with call_id ct_1.",
        ),
    ],
    ids=["orphan-output", "output-before-call", "last-call", "one-of-two", "custom", "custom-out"],
)
async def test_strict_rejects_broken_pairs(
    encoders: Encoders, items: list[Item], message: str
) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**request(*items, tools=[READ_FILE]))
    assert error_of(raised) == {
        "message": message,
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
    assert upstream.strict_rejections == 1
    assert upstream.prompt_tokens == []


async def test_strict_accepts_intact_pairs(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    items = [user(), call("c1"), call("c2"), output("c2"), output("c1"), user("thanks")]
    async with sdk(upstream) as client:
        response = await client.responses.create(**request(*items, tools=[READ_FILE]))
    assert response.status == "completed"
    assert upstream.strict_rejections == 0


async def test_lenient_without_strict(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    async with sdk(upstream) as client:
        response = await client.responses.create(**request(user(), output("call_9")))
    assert response.status == "completed"


# --- strictness: reasoning -------------------------------------------------------------------


@asynccontextmanager
async def reasoning_model(
    encoders: Encoders, parallel: int = 1
) -> AsyncIterator[tuple[MockUpstream, openai.AsyncOpenAI]]:
    script = AgentScript(calls=(("read_file", '{"path": "a.py"}'),), parallel=parallel)
    upstream = MockUpstream(encoders=encoders, agent=script, strict=True, responses_reasoning=True)
    async with sdk(upstream) as client:
        yield upstream, client


async def first_turn(client: openai.AsyncOpenAI, *items: Item) -> tuple[list[Item], Response]:
    """A stateless first request; the input the next request continues from."""
    response = await client.responses.create(
        **request(*items, tools=[READ_FILE], include=ENCRYPTED, store=False)
    )
    return [*items, *echoed(response), *tool_outputs(response)], response


async def test_reasoning_item_opens_each_response(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (_, client):
        _, response = await first_turn(client, user())
        plain = await client.responses.create(**request(user(), tools=[READ_FILE]))
    first = response.output[0]
    assert first.type == "reasoning"
    assert first.id.startswith("rs_")
    assert first.encrypted_content is not None
    assert len(first.encrypted_content) > 200
    assert first.summary[0].text
    assert [item.type for item in response.output[1:]] == ["function_call"]
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens > 0
    # Without the include, no reasoning to send back: the mock sends none.
    assert [item.type for item in plain.output] == ["function_call"]


async def test_reasoning_passed_back_intact_is_accepted(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (upstream, client):
        items, _ = await first_turn(client, user())
        response = await client.responses.create(
            **request(*items, tools=[READ_FILE], include=ENCRYPTED, store=False)
        )
    assert response.status == "completed"
    assert upstream.strict_rejections == 0


async def test_call_without_its_reasoning_is_rejected(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (upstream, client):
        items, first = await first_turn(client, user())
        rs_id, fc = first.output[0].id, first.output[1]
        without = [item for item in items if item.get("type") != "reasoning"]
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**request(*without, tools=[READ_FILE]))
    assert error_of(raised)["message"] == (
        f"Item '{fc.id}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{rs_id}'."
    )
    assert upstream.strict_rejections == 1


async def test_reasoning_separated_from_its_call_is_rejected(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (upstream, client):
        items, _ = await first_turn(client, user())
        # user, reasoning, call, output: a message slipped between reasoning and its call.
        moved = [items[0], items[1], user("also check b.py"), *items[2:]]
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**request(*moved, tools=[READ_FILE]))
    assert "without its required 'reasoning' item" in error_of(raised)["message"]
    assert upstream.strict_rejections == 1


async def test_parallel_calls_after_one_reasoning_item_are_accepted(encoders: Encoders) -> None:
    async with reasoning_model(encoders, parallel=2) as (upstream, client):
        items, first = await first_turn(client, user())
        made = [item.type for item in first.output]
        assert made == ["reasoning", "function_call", "function_call"]
        response = await client.responses.create(
            **request(*items, tools=[READ_FILE], include=ENCRYPTED)
        )
        # The second call still needs the reasoning: the first call between them is its own.
        second_alone = [items[0], items[3], *items[4:]]
        with pytest.raises(openai.BadRequestError):
            await client.responses.create(**request(*second_alone, tools=[READ_FILE]))
    assert response.status == "completed"
    assert upstream.strict_rejections == 1


async def test_altered_encrypted_content_is_rejected(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (upstream, client):
        items, first = await first_turn(client, user())
        rs_id = first.output[0].id
        altered = [
            {**item, "encrypted_content": item["encrypted_content"][:-4] + "AAAA"}
            if item.get("type") == "reasoning"
            else item
            for item in items
        ]
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**request(*altered, tools=[READ_FILE]))
    assert error_of(raised)["message"] == (
        f"The encrypted content for item {rs_id} could not be verified."
    )
    assert upstream.strict_rejections == 1


def without_ciphertext(items: list[Item]) -> list[Item]:
    return [{k: v for k, v in item.items() if k != "encrypted_content"} for item in items]


async def test_reasoning_by_id_alone_needs_a_stored_response(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (upstream, client):
        items, first = await first_turn(client, user())  # store=False
        with pytest.raises(openai.NotFoundError) as raised:
            await client.responses.create(**request(*without_ciphertext(items), tools=[READ_FILE]))
        stored = await client.responses.create(
            **request(user(), tools=[READ_FILE], include=ENCRYPTED)
        )
        by_id = [user(), *without_ciphertext(echoed(stored)), *tool_outputs(stored)]
        accepted = await client.responses.create(**request(*by_id, tools=[READ_FILE]))
    assert error_of(raised)["message"] == (
        f"Item with id '{first.output[0].id}' not found. Items are not persisted when `store` "
        "is set to false. Try again with `store` set to true, or remove this item from your "
        "input."
    )
    assert accepted.status == "completed"
    assert upstream.strict_rejections == 1


async def test_reasoning_the_mock_never_made_is_rejected(encoders: Encoders) -> None:
    async with reasoning_model(encoders) as (_, client):
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(**request(reasoning("rs_made_up", "gAAAAAxyz"), user()))
    assert error_of(raised)["message"] == (
        "The encrypted content for item rs_made_up could not be verified."
    )


# --- previous_response_id --------------------------------------------------------------------


async def test_previous_response_is_prepended(encoders: Encoders, counter: TokenCounter) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    upstream.queue(
        Reply(content=None, tool_calls=(ToolCall("read_file", '{"path": "a.py"}', "call_a"),)),
        Reply(content="a.py imports os."),
    )
    async with sdk(upstream) as client:
        first = await client.responses.create(**request(user(), tools=[READ_FILE]))
        second = await client.responses.create(
            **request(output("call_a"), tools=[READ_FILE], previous_response_id=first.id)
        )
    # The call's output pairs with the call stored in the first response: strict passes.
    assert second.output_text == "a.py imports os."
    whole = request(user(), *echoed(first), output("call_a"), tools=[READ_FILE])
    assert second.usage is not None
    assert second.usage.input_tokens == responses_prompt_tokens(whole, counter)
    assert second.previous_response_id == first.id


async def test_unknown_previous_response_is_400(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    async with sdk(upstream) as client:
        unstored = await client.responses.create(**request(user(), store=False))
        for missing in ("resp_nope", unstored.id):
            with pytest.raises(openai.BadRequestError) as raised:
                await client.responses.create(**request(user(), previous_response_id=missing))
            assert error_of(raised) == {
                "message": f"Previous response with id '{missing}' not found.",
                "type": "invalid_request_error",
                "param": "previous_response_id",
                "code": "previous_response_not_found",
            }


# --- streaming -------------------------------------------------------------------------------


async def test_stream_events_follow_openai_order(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, responses_reasoning=True)
    calls = (ToolCall("read_file", '{"path": "src/app.py"}', "call_a"),)
    upstream.queue(Reply(content="Reading it.", tool_calls=calls))
    async with sdk(upstream) as client:
        stream = await client.responses.create(
            **request(user(), tools=[READ_FILE], include=ENCRYPTED), stream=True
        )
        seen = [event async for event in stream]
    kinds = [event.type for event in seen]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in seen] == list(range(len(seen)))
    added = [event.item for event in seen if event.type == "response.output_item.added"]
    # Items open empty and fill with deltas.
    assert [
        item.model_dump(include={"summary", "content", "arguments"}, exclude_none=True)
        for item in added
    ] == [
        {"summary": []},
        {"content": []},
        {"arguments": ""},
    ]
    done = [event.item for event in seen if event.type == "response.output_item.done"]
    assert [item.type for item in done] == ["reasoning", "message", "function_call"]
    text = "".join(event.delta for event in seen if event.type == "response.output_text.delta")
    arguments = "".join(e.delta for e in seen if e.type == "response.function_call_arguments.delta")
    summary = "".join(e.delta for e in seen if e.type == "response.reasoning_summary_text.delta")
    completed = seen[-1].response
    assert (text, arguments) == ("Reading it.", '{"path": "src/app.py"}')
    assert summary == completed.output[0].summary[0].text
    assert [item.model_dump() for item in done] == [item.model_dump() for item in completed.output]
    assert completed.usage is not None
    assert completed.usage.input_tokens > 0


async def test_stream_is_sse_with_event_lines_and_no_done(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, default=Reply(content="hi"))
    async with (
        raw(upstream) as http,
        http.stream("POST", "/v1/responses", json=request(user(), stream=True)) as response,
    ):
        text = (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [block for block in text.split("\n\n") if block]
    for block in blocks:
        event, data = block.split("\n")
        assert event.removeprefix("event: ") == json.loads(data.removeprefix("data: "))["type"]
    assert "[DONE]" not in text


async def test_stream_waits_on_hold_after_first_delta(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    hold = asyncio.Event()
    upstream.queue(Reply(content="a long enough answer", hold=hold))
    async with sdk(upstream) as client:
        stream = await client.responses.create(**request(user()), stream=True)
        events = aiter(stream)
        kinds = [(await asyncio.wait_for(anext(events), 5)).type for _ in range(5)]
        assert kinds[-1] == "response.output_text.delta"
        pending = asyncio.ensure_future(anext(events))
        done, _ = await asyncio.wait({pending}, timeout=0.2)
        assert not done  # the mock holds the rest of the answer
        hold.set()
        rest = [(await pending).type] + [event.type async for event in events]
    assert rest[0] == "response.output_text.delta"
    assert rest[-1] == "response.completed"


async def test_abandoned_stream_is_counted(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content="tick", endless=True, chunk_delay_s=0.01))
    async with sdk(upstream) as client:
        stream = await client.responses.create(**request(user()), stream=True)
        async for event in stream:
            if event.type == "response.output_text.delta" and event.sequence_number > 8:
                break
        await stream.close()
        for _ in range(500):
            if upstream.streams_abandoned:
                break
            await asyncio.sleep(0.01)
    assert upstream.streams_abandoned == 1


# --- the agent over several turns ------------------------------------------------------------


async def test_agent_plays_stateless_turns_with_growing_cache(encoders: Encoders) -> None:
    script = AgentScript(
        calls=(("read_file", '{"path": "a.py"}'), ("read_file", '{"path": "b.py"}')),
        rounds_per_turn=2,
    )
    upstream = MockUpstream(
        encoders=encoders,
        agent=script,
        strict=True,
        responses_reasoning=True,
        cache_min_tokens=256,
        cache_granularity=64,
    )
    items: list[Item] = []
    shapes, cached = [], []
    instructions = "You are a careful engineer. " + long_text(40, "rule")
    async with sdk(upstream) as client:
        for turn in range(3):
            items.append(user(f"Turn {turn}: check the files."))
            while True:
                body = request(*items, instructions=instructions, tools=[READ_FILE])
                response = await client.responses.create(**body, include=ENCRYPTED, store=False)
                items += [*echoed(response), *tool_outputs(response)]
                shapes.append(tuple(item.type for item in response.output))
                assert response.usage is not None
                cached.append(response.usage.input_tokens_details.cached_tokens)
                if response.output_text:
                    break
    calls, answer = ("reasoning", "function_call"), ("reasoning", "message")
    assert shapes == [calls, calls, answer] * 3
    assert response.output_text == "Done. The task is complete."
    called = [item["call_id"] for item in items if item.get("type") == "function_call"]
    assert called == [f"call_agent_{n}" for n in range(1, 7)]
    assert upstream.strict_rejections == 0
    assert cached[0] == 0
    assert all(later > earlier for earlier, later in itertools.pairwise(cached[1:]))
    assert upstream.cached_tokens == cached
    assert all(c < p for c, p in zip(cached, upstream.prompt_tokens, strict=True))


async def test_agent_answers_without_tools_on_offer(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, agent=AgentScript(calls=(("read_file", "{}"),)))
    async with sdk(upstream) as client:
        response = await client.responses.create(model=MODEL, input="hello")
    assert response.output_text == "Done. The task is complete."


# --- the proxy's summary request -------------------------------------------------------------


async def test_a_summary_asked_as_the_conversation_s_items_is_answered_from_its_cache(
    encoders: Encoders, counter: TokenCounter
) -> None:
    """The proxy's prefix form on the Responses API: the conversation's items as they were
    sent (cached then), one closing prompt as a message item. The summarizer writes it from
    the turns after the task, within `max_output_tokens`; it is counted apart, as chat's."""
    conversation = request(
        user("Fix the checkout, ticket T-1 in src/app.py."),
        user("The checkout is slow; see incident INC-4821. Never deploy on Fridays."),
        call("call_7", '{"path": "src/billing/invoice.py"}'),
        output("call_7", "def total(): ...  # p99 latency 37 ms\n" + long_text(300)),
        {"role": "assistant", "content": "The invoice total is recomputed per line item."},
        instructions="You are a careful engineer.",
        tools=[READ_FILE],
        store=False,
    )
    messages = parse_responses_request(json.dumps(conversation).encode()).body["messages"]
    prefix = Prefix({"model": MODEL, "tools": [READ_FILE]}, tuple(messages), 0, after_task=True)
    body = responses_prefix_request(prefix, previous="- INC-9 was closed", max_tokens=400)
    upstream = MockUpstream(encoders=encoders)
    async with sdk(upstream) as client:
        await client.responses.create(**conversation)  # sent, and cached
        summary = await client.responses.create(**body)
    assert upstream.summary_calls == 1
    assert upstream.summary_requests[0].json() == body
    text = summary.output_text
    for fact in ("INC-4821", "src/billing/invoice.py", "37 ms", "INC-9"):
        assert fact in text, fact
    assert "T-1" not in text  # the task stays in place: it is not summarized
    assert counter.text(text) <= 400 + 100  # the headings come on top of the quotes
    assert summary.usage is not None
    cached = summary.usage.input_tokens_details.cached_tokens
    [usage] = upstream.summary_usage
    assert (usage.prompt_tokens, usage.cached_tokens) == (summary.usage.input_tokens, cached)
    assert usage.completion_tokens == summary.usage.output_tokens
    assert cached >= 1024  # the conversation, from the prompt cache
    assert usage.prompt_tokens - cached < 0.3 * usage.prompt_tokens
    assert len(upstream.prompt_tokens) == len(upstream.cached_tokens) == 1  # the conversation's
