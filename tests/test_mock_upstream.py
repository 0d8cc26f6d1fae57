"""The mock upstream as a strict, realistic provider, over real sockets.

Token counts are asserted as relations to the proxy's own counter over the same encoders, so
these tests hold whether o200k_base loads or the approximate fallback counts instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core import turn_calls
from proxy.core.messages import Message
from proxy.core.overflow import Kind, classify
from proxy.core.summary import SECTIONS, Prefix, prefix_request, summary_request
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.mock_upstream import AgentScript, MockUpstream, Reply, SummaryQuality, ToolCall
from proxy.mock_upstream.cache import cached_tokens
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.servers import serve

MODEL = "gpt-4o-mini"
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    """Loaded once for the module, and handed to every mock as the proxy's app is handed them."""
    return load_encoders((O200K_BASE,))


@pytest.fixture
def counter(encoders: Encoders) -> TokenCounter:
    """The proxy's count over the encoder the mock uses."""
    return TokenCounter(encoders.by_name.get(O200K_BASE, encoders.fallback))


@asynccontextmanager
async def running(upstream: MockUpstream) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client for `upstream` served by uvicorn on loopback."""
    async with (
        serve(upstream.app) as base_url,
        httpx.AsyncClient(base_url=f"{base_url}/v1") as http,
    ):
        yield http


@asynccontextmanager
async def sdk(upstream: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    """The OpenAI SDK pointed at `upstream` served on loopback, without retries."""
    async with (
        serve(upstream.app) as base_url,
        openai.AsyncOpenAI(api_key="sk-test", base_url=f"{base_url}/v1", max_retries=0) as client,
    ):
        yield client


def chat(*messages: Message, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), **fields}


def long_text(words: int, seed: str = "rule") -> str:
    return " ".join(f"{seed}{i} keeps the build green" for i in range(words))


# --- token counting --------------------------------------------------------------------------


async def test_usage_counts_prompt_with_proxy_counter(
    encoders: Encoders, counter: TokenCounter
) -> None:
    upstream = MockUpstream(encoders=encoders)
    body = chat(system(), user("Summarise the incident report INC-4821 in two lines."))
    async with running(upstream) as http:
        usage = (await http.post("/chat/completions", json=body)).json()["usage"]
    assert usage["prompt_tokens"] == counter.request(body)
    assert usage["completion_tokens"] == counter.text("Hello from the mock upstream.")
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert upstream.prompt_tokens == [usage["prompt_tokens"]]


async def test_token_factor_scales_usage(encoders: Encoders, counter: TokenCounter) -> None:
    body = chat(user(long_text(40)))
    plain, inflated = MockUpstream(encoders=encoders), MockUpstream(encoders=encoders)
    inflated.token_factor = 1.15
    async with running(plain) as plain_http, running(inflated) as inflated_http:
        base = (await plain_http.post("/chat/completions", json=body)).json()["usage"]
        more = (await inflated_http.post("/chat/completions", json=body)).json()["usage"]
    assert more["prompt_tokens"] == round(counter.request(body) * 1.15)
    assert more["prompt_tokens"] > base["prompt_tokens"]
    assert more["completion_tokens"] == round(base["completion_tokens"] * 1.15)


async def test_usage_counts_tool_calls_in_reply(encoders: Encoders, counter: TokenCounter) -> None:
    upstream = MockUpstream(encoders=encoders)
    upstream.queue(Reply(content=None, tool_calls=(ToolCall("read_file", '{"path": "a.py"}'),)))
    async with running(upstream) as http:
        usage = (await http.post("/chat/completions", json=chat(user()))).json()["usage"]
    # The arguments, plus the function's name and the call's framing.
    assert usage["completion_tokens"] > counter.text('{"path": "a.py"}')


async def test_streamed_usage_matches_whole(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    body = chat(user("What does src/app.py import on line 12?"))
    async with sdk(upstream) as client:
        whole = await client.chat.completions.create(**body)
        stream = await client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )
        usages = [chunk.usage async for chunk in stream if chunk.usage is not None]
    assert whole.usage is not None
    assert [usage.model_dump() for usage in usages] == [whole.usage.model_dump()]


async def test_counter_loads_itself_when_not_given(counter: TokenCounter) -> None:
    upstream = MockUpstream()
    body = chat(user("hello there"))
    async with running(upstream) as http:
        usage = (await http.post("/chat/completions", json=body)).json()["usage"]
    assert usage["prompt_tokens"] == counter.request(body)


# --- overflow --------------------------------------------------------------------------------


async def test_overflow_is_openai_400(encoders: Encoders, counter: TokenCounter) -> None:
    body = chat(user(long_text(200)))
    prompt = counter.request(body)
    upstream = MockUpstream(window=prompt - 1, encoders=encoders)
    upstream.queue(Reply(content="never sent"))
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": (
                f"This model's maximum context length is {prompt - 1} tokens. However, your "
                f"messages resulted in {prompt} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    verdict = classify(400, response.content, {"content-type": "application/json"})
    assert (verdict.kind, verdict.limit, verdict.prompt_tokens) == (
        Kind.OVERFLOW_PROMPT,
        prompt - 1,
        prompt,
    )
    assert (upstream.overflows, upstream.prompt_tokens) == (1, [])
    assert len(upstream.requests) == 1  # recorded, and the queued reply is still waiting


async def test_overflow_with_max_tokens_names_both_parts(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = chat(user(long_text(50)), max_tokens=1000)
    prompt = counter.request(body)
    upstream = MockUpstream(window=prompt + 999, encoders=encoders)
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=body)
    message = response.json()["error"]["message"]
    assert message == (
        f"This model's maximum context length is {prompt + 999} tokens. However, you requested "
        f"{prompt + 1000} tokens ({prompt} in the messages, 1000 in the completion). Please "
        "reduce the length of the messages or completion."
    )
    verdict = classify(400, response.content, requested_output=1000)
    assert verdict.kind is Kind.OVERFLOW_TOTAL
    assert (verdict.prompt_tokens, verdict.requested_output) == (prompt, 1000)
    assert verdict.compaction_can_fix


async def test_prompt_that_fits_is_answered(encoders: Encoders, counter: TokenCounter) -> None:
    body = chat(user(long_text(50)), max_completion_tokens=10)
    upstream = MockUpstream(window=counter.request(body) + 10, encoders=encoders)
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=body)
    assert response.status_code == 200
    assert upstream.overflows == 0


async def test_token_factor_overflows_what_the_proxy_thinks_fits(
    encoders: Encoders, counter: TokenCounter
) -> None:
    body = chat(user(long_text(100)))
    upstream = MockUpstream(window=counter.request(body), token_factor=1.15, encoders=encoders)
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=body)
    verdict = classify(400, response.content)
    assert verdict.prompt_tokens == round(counter.request(body) * 1.15)


async def test_overflow_of_stream_is_json_before_any_event(encoders: Encoders) -> None:
    upstream = MockUpstream(window=10, encoders=encoders)
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=chat(user(long_text(5)), stream=True))
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_overflow_through_sdk_is_bad_request(encoders: Encoders) -> None:
    upstream = MockUpstream(window=10, encoders=encoders)
    async with sdk(upstream) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(**chat(user(long_text(5))))
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"


# --- strict tool pairing ---------------------------------------------------------------------

ORPHANED = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


async def _reject(upstream: MockUpstream, *messages: Message) -> dict[str, Any]:
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=chat(*messages))
    assert response.status_code == 400
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_strict_rejects_orphaned_tool_result(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    error = await _reject(upstream, user(), tool_result("c1"), assistant())
    assert error == {
        "message": ORPHANED,
        "type": "invalid_request_error",
        "param": "messages.[1].role",
        "code": None,
    }
    assert upstream.strict_rejections == 1
    assert upstream.prompt_tokens == []


async def test_strict_rejects_unanswered_calls(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    messages = (user(), assistant_calls("call_a", "call_b"), tool_result("call_a"), user("next"))
    error = await _reject(upstream, *messages)
    assert error["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_b"
    )
    assert error["param"] == "messages.[3].role"


async def test_strict_rejects_calls_left_at_the_end(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    error = await _reject(upstream, user(), assistant_calls("call_a"))
    assert error["message"].endswith("did not have response messages: call_a")
    assert error["param"] == "messages.[1].role"


async def test_strict_rejects_answer_to_unknown_call(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    error = await _reject(upstream, user(), assistant_calls("call_a"), tool_result("call_z"))
    assert error["message"] == (
        "Invalid parameter: 'tool_call_id' of 'call_z' not found in 'tool_calls' of previous "
        "message."
    )
    assert error["param"] == "messages.[2].tool_call_id"


async def test_strict_rejection_through_sdk(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    async with sdk(upstream) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(**chat(user(), tool_result("c1")))
    assert caught.value.param == "messages.[1].role"
    assert caught.value.message.endswith(ORPHANED)


async def test_strict_accepts_well_formed_tool_traffic(encoders: Encoders) -> None:
    upstream = MockUpstream(strict=True, encoders=encoders)
    messages = (
        system(),
        user(),
        assistant_calls("call_a", "call_b"),
        tool_result("call_b"),  # parallel answers may come in any order
        tool_result("call_a"),
        assistant(),
        user("again"),
    )
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=chat(*messages))
    assert response.status_code == 200
    assert upstream.strict_rejections == 0


async def test_lenient_by_default(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=chat(user(), tool_result("c1")))
    assert response.status_code == 200


# --- role alternation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [user(), user()],
        [user(), assistant(), assistant()],
        [user(), system(), user()],
        [user(), assistant_calls("c1"), tool_result("c1"), user()],
    ],
    ids=["two_users", "two_assistants", "system_between", "tool_traffic_between"],
)
async def test_roles_alternate_rejects_same_role_twice(
    encoders: Encoders, messages: list[Message]
) -> None:
    upstream = MockUpstream(roles_alternate=True, encoders=encoders)
    error = await _reject(upstream, *messages)
    assert error["message"] == (
        "After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/..."
    )
    assert (error["type"], error["code"]) == ("BadRequestError", 400)
    assert upstream.strict_rejections == 1


async def test_roles_alternate_accepts_tool_loop(encoders: Encoders) -> None:
    upstream = MockUpstream(roles_alternate=True, encoders=encoders)
    messages = (
        system(),
        user(),
        assistant_calls("c1"),
        tool_result("c1"),
        assistant_calls("c2"),
        tool_result("c2"),
        assistant("done"),
        user("thanks"),
    )
    async with running(upstream) as http:
        response = await http.post("/chat/completions", json=chat(*messages))
    assert response.status_code == 200


# --- agent -----------------------------------------------------------------------------------


async def test_agent_calls_tools_then_answers_each_turn(encoders: Encoders) -> None:
    script = AgentScript(
        calls=(("read_file", '{"path": "src/a.py"}'), ("read_file", '{"path": "src/b.py"}')),
        rounds_per_turn=2,
        answer="All done.",
    )
    upstream = MockUpstream(agent=script, strict=True, roles_alternate=True, encoders=encoders)
    messages: list[Message] = []
    seen: list[tuple[str, str]] = []
    async with sdk(upstream) as client:
        for turn in ("fix the bug", "and the other one"):
            messages.append(user(turn))
            while True:
                reply = await client.chat.completions.create(**chat(*messages, tools=[READ_FILE]))
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    seen.append(("answer", message.content or ""))
                    break
                for call in message.tool_calls:
                    assert call.type == "function"
                    seen.append((call.id, json.loads(call.function.arguments)["path"]))
                    messages.append(tool_result(call.id, "contents"))
    assert seen == [
        ("call_agent_1", "src/a.py"),
        ("call_agent_2", "src/b.py"),
        ("answer", "All done."),
        ("call_agent_3", "src/a.py"),  # the script cycles
        ("call_agent_4", "src/b.py"),
        ("answer", "All done."),
    ]
    assert upstream.strict_rejections == 0


async def test_agent_carries_on_from_a_summary_in_its_place_not_from_its_answer(
    encoders: Encoders,
) -> None:
    # Codex compacting mid-turn sends its history ending with the compaction item, which the
    # proxy expands into an assistant message holding its block: the model resumes the task.
    script = AgentScript(calls=(("ls", "{}"),), rounds_per_turn=2, answer="All done.")
    upstream = MockUpstream(agent=script, encoders=encoders)
    summary = assistant("What was done so far: the listing.")
    async with running(upstream) as http:

        async def after(*messages: Message) -> Any:
            reply = await http.post("/chat/completions", json=chat(*messages, tools=[READ_FILE]))
            return reply.json()["choices"][0]["message"]

        resumed = await after(user("go"), summary)
        finished = await after(user("go"), assistant("All done."))
        called = await after(user("go"), assistant_calls("c1"))
    assert [call["function"]["name"] for call in resumed["tool_calls"]] == ["ls"]
    assert finished["content"] == called["content"] == "All done."


async def test_agent_counts_the_calls_a_block_lists_for_the_running_turn(
    encoders: Encoders,
) -> None:
    # A window too small for a long turn folds its oldest rounds; the block lists their
    # calls. A model reads that it made them and goes on; a listing the model's answer
    # followed belongs to a turn that is over.
    script = AgentScript(calls=(("ls", "{}"),), rounds_per_turn=3, answer="All done.")
    upstream = MockUpstream(agent=script, encoders=encoders)

    def block(calls: int) -> Message:
        listing = "\n".join([turn_calls.HEADING, *["- ls({})"] * calls])
        return user(f"[4 earlier messages omitted]\n\n{listing}")

    async with running(upstream) as http:

        async def after(*messages: Message) -> Any:
            reply = await http.post("/chat/completions", json=chat(*messages, tools=[READ_FILE]))
            return reply.json()["choices"][0]["message"]

        last_round = await after(user("go"), block(2), user("go on"))
        ran = (assistant_calls("c3"), tool_result("c3", "a.py"))
        finished = await after(user("go"), block(2), user("go on"), *ran)
        over = await after(user("go"), block(3), assistant("Listed."), user("again"))
    assert [call["function"]["name"] for call in last_round["tool_calls"]] == ["ls"]
    assert finished["content"] == "All done."
    assert [call["function"]["name"] for call in over["tool_calls"]] == ["ls"]


async def test_agent_answers_without_tools_on_offer(encoders: Encoders) -> None:
    upstream = MockUpstream(agent=AgentScript(calls=(("ls", "{}"),)), encoders=encoders)
    async with running(upstream) as http:
        reply = (await http.post("/chat/completions", json=chat(user()))).json()
    assert reply["choices"][0]["message"]["content"] == "Done. The task is complete."


async def test_agent_gives_its_answers_in_turn_when_it_has_several(encoders: Encoders) -> None:
    script = AgentScript(calls=(), answers=("short", "longer answer"))
    upstream = MockUpstream(agent=script, encoders=encoders)
    async with running(upstream) as http:
        replies = [
            (await http.post("/chat/completions", json=chat(user(turn)))).json()
            for turn in ("a", "b", "c")
        ]
    answers = [reply["choices"][0]["message"]["content"] for reply in replies]
    assert answers == ["short", "longer answer", "short"]


async def test_agent_makes_parallel_calls_until_script_runs_out(encoders: Encoders) -> None:
    calls = (("ls", "{}"), ("ls", '{"all": true}'), ("pwd", "{}"))
    script = AgentScript(calls=calls, parallel=2, cycle=False)
    upstream = MockUpstream(agent=script, encoders=encoders)
    async with running(upstream) as http:
        replies = [
            (await http.post("/chat/completions", json=chat(user(turn), tools=[READ_FILE]))).json()[
                "choices"
            ][0]
            for turn in ("a", "b", "c")
        ]
    first, second, third = (reply["message"] for reply in replies)
    assert [call["function"]["name"] for call in first["tool_calls"]] == ["ls", "ls"]
    assert replies[0]["finish_reason"] == "tool_calls"
    assert [call["id"] for call in second["tool_calls"]] == ["call_agent_3"]
    assert third == {"role": "assistant", "content": "Done. The task is complete."}


def test_agent_script_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        AgentScript(calls=(("ls", "{not json"),))


def test_agent_and_default_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        MockUpstream(agent=AgentScript(calls=()), default=Reply())


# --- summaries -------------------------------------------------------------------------------

FACTS = ("INC-4821", "src/billing/invoice.py", "37 ms", "never deploy on Fridays")


def summary_span() -> list[Message]:
    """Turns that state each of `FACTS`."""
    return [
        user("The checkout is slow; see incident INC-4821. We must never deploy on Fridays."),
        assistant_calls("call_7", name="read_file", arguments={"path": "src/billing/invoice.py"}),
        tool_result("call_7", "def total(): ...  # p99 latency 37 ms"),
        assistant("The invoice total is recomputed for every line item."),
    ]


def summary_body() -> dict[str, Any]:
    return summary_request(summary_span(), previous=None, model=MODEL, max_tokens=800)


@pytest.mark.parametrize("quality", ["good", "poor"])
async def test_summary_requests_get_summaries(encoders: Encoders, quality: SummaryQuality) -> None:
    upstream = MockUpstream(summary_quality=quality, encoders=encoders)
    async with running(upstream) as http:
        reply = (await http.post("/chat/completions", json=summary_body())).json()
        await http.post("/chat/completions", json=chat(user()))
    summary = reply["choices"][0]["message"]["content"]
    assert all(f"## {section}" in summary for section in SECTIONS)
    kept = [fact for fact in FACTS if fact in summary]
    if quality == "good":
        assert kept == list(FACTS)
    else:
        assert kept == []
        assert not any(character.isdigit() for character in summary)
        assert "/" not in summary
        assert "call_" not in summary
    assert upstream.summary_calls == 1
    assert upstream.summary_requests[0].json() == summary_body()
    assert len(upstream.prompt_tokens) == 1  # the ordinary chat request only


async def test_good_summary_stays_within_max_tokens(
    encoders: Encoders, counter: TokenCounter
) -> None:
    span = [user(f"Ticket T-{i} touches src/module_{i}.py") for i in range(200)]
    body = summary_request(span, previous=None, model=MODEL, max_tokens=300)
    upstream = MockUpstream(encoders=encoders)
    async with running(upstream) as http:
        reply = (await http.post("/chat/completions", json=body)).json()
    summary = reply["choices"][0]["message"]["content"]
    assert "src/module_0.py" in summary
    assert counter.text(summary) <= 300 + 100  # the headings come on top of the quotes


@pytest.mark.parametrize("after_task", [True, False])
async def test_a_summary_asked_as_the_conversation_s_prefix_is_read_from_its_cache(
    encoders: Encoders, after_task: bool
) -> None:
    """The prefix form: the conversation as it was sent (cached then), one closing prompt.
    The summary is written from the turns the prompt names and the earlier summary."""
    task = user("Fix the checkout, ticket T-1 in src/app.py.")
    conversation = [system(long_text(600)), task, *summary_span()]
    prefix = Prefix({"model": MODEL}, tuple(conversation), tokens=0, after_task=after_task)
    body = prefix_request(prefix, previous="- INC-9 was closed", max_tokens=800)
    upstream = MockUpstream(encoders=encoders)
    async with running(upstream) as http:
        await http.post("/chat/completions", json=chat(*conversation))  # sent, and cached
        reply = (await http.post("/chat/completions", json=body)).json()
    summary = reply["choices"][0]["message"]["content"]
    assert upstream.summary_calls == 1
    assert all(fact in summary for fact in (*FACTS, "INC-9"))
    assert ("T-1" in summary) is not after_task  # a task that stays is not summarized
    cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    [usage] = upstream.summary_usage
    assert cached == usage.cached_tokens >= 1024  # the conversation, from the prompt cache
    assert usage.prompt_tokens - cached < 0.3 * usage.prompt_tokens
    assert len(upstream.prompt_tokens) == 1  # the ordinary chat request only


async def test_given_default_answers_summary_requests(encoders: Encoders) -> None:
    upstream = MockUpstream(default=Reply(content="## Goal\n- as scripted"), encoders=encoders)
    async with running(upstream) as http:
        reply = (await http.post("/chat/completions", json=summary_body())).json()
    assert reply["choices"][0]["message"]["content"] == "## Goal\n- as scripted"
    assert upstream.summary_calls == 1


# --- prompt caching --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shared", "cached"),
    [(0, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (5000, 4992)],
)
def test_cached_tokens_rounds_like_openai(shared: int, cached: int) -> None:
    assert cached_tokens(shared, granularity=128, minimum=1024) == cached


async def test_growing_conversation_is_served_from_cache(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    head = [system(long_text(300)), user("first question")]
    grown = [*head, assistant("first answer"), user("second question")]
    edited = [system(long_text(300, seed="law")), *grown[1:]]
    async with running(upstream) as http:
        for messages in (head, grown, edited):
            await http.post("/chat/completions", json=chat(*messages))
    first, second, third = upstream.cached_tokens
    assert first == 0
    assert second >= 1024
    assert (second - 1024) % 128 == 0
    assert second / upstream.prompt_tokens[1] > 0.8
    assert third == 0


async def test_cached_tokens_reported_in_usage(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    body = chat(system(long_text(300)), user("same question"))
    async with sdk(upstream) as client:
        await client.chat.completions.create(**body)
        again = await client.chat.completions.create(**body)
    assert again.usage is not None
    assert again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == upstream.cached_tokens[1] > 0


async def test_changed_tools_invalidate_the_cache(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    messages = (system(long_text(300)), user("q"))
    async with running(upstream) as http:
        await http.post("/chat/completions", json=chat(*messages, tools=[READ_FILE]))
        await http.post("/chat/completions", json=chat(*messages))
    assert upstream.cached_tokens == [0, 0]


# --- models ----------------------------------------------------------------------------------


async def test_models_report_window_when_set() -> None:
    upstream = MockUpstream(window=32_000, models=("mock-model", MODEL))
    async with running(upstream) as http:
        listing = (await http.get("/models")).json()
    assert [entry["id"] for entry in listing["data"]] == ["mock-model", MODEL]
    for entry in listing["data"]:
        assert (entry["context_length"], entry["max_model_len"]) == (32_000, 32_000)


async def test_models_without_window_have_no_window_fields() -> None:
    async with running(MockUpstream()) as http:
        listing = (await http.get("/models")).json()
    assert listing["data"] == [
        {"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"}
    ]
