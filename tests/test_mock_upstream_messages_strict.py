"""The mock's Messages API as a strict provider, through the official `anthropic` SDK: each
refusal the API makes, word for word, and what it accepts; and thinking blocks, signed by the
mock, that must come back unaltered."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import AgentScript, MockUpstream, Reply, ToolCall
from proxy.mock_upstream.messages_errors import THINKING_DOCS
from tests.mock_messages import (
    EPHEMERAL,
    READ_FILE,
    Block,
    assistant,
    echoed,
    error_of,
    headers,
    raw,
    request,
    results_for,
    sdk,
    text,
    tool_result,
    tool_use,
    user,
)

THINKING = {"type": "enabled", "budget_tokens": 2048}


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders((O200K_BASE,))


def invalid(message: str) -> dict[str, Any]:
    return {"type": "invalid_request_error", "message": message}


def unanswered(index: int, *ids: str) -> str:
    return (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(ids)}. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    )


def unexpected(place: str, ident: str) -> str:
    return (
        f"messages.{place}: unexpected `tool_use_id` found in `tool_result` blocks: {ident}. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message."
    )


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "fields", "message"),
    [
        (
            [user("go"), assistant("Reading.", tool_use("toolu_1"))],
            {},
            unanswered(1, "toolu_1"),
        ),
        (
            [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_2")), user("go on")],
            {},
            unanswered(1, "toolu_1", "toolu_2"),
        ),
        (
            [
                user("go"),
                assistant(tool_use("toolu_1"), tool_use("toolu_2")),
                user(tool_result("toolu_2")),
            ],
            {},
            unanswered(1, "toolu_1"),
        ),
        (
            # A result after the user's text is not "immediately after".
            [user("go"), assistant(tool_use("toolu_1")), user(text("and"), tool_result("toolu_1"))],
            {},
            unanswered(1, "toolu_1"),
        ),
        ([user(tool_result("toolu_9"))], {}, unexpected("0.content.0", "toolu_9")),
        (
            [
                user("go"),
                assistant(tool_use("toolu_1")),
                user(tool_result("toolu_1"), tool_result("toolu_7")),
            ],
            {},
            unexpected("2.content.1", "toolu_7"),
        ),
        (
            # Results answer the turn right before theirs, not an older one.
            [
                user("go"),
                assistant(tool_use("toolu_1")),
                user(tool_result("toolu_1")),
                assistant("Done."),
                user(tool_result("toolu_1")),
            ],
            {},
            unexpected("4.content.0", "toolu_1"),
        ),
        ([assistant("Hello."), user("go")], {}, 'messages: first message must use the "user" role'),
        ([], {}, "messages: at least one message is required"),
        (
            [user(*(text(f"part {n}", cache_control=EPHEMERAL) for n in range(4)))],
            {"system": [text("Be careful.", cache_control=EPHEMERAL)]},
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            [user(*(text(f"part {n}", cache_control=EPHEMERAL) for n in range(3)))],
            {"tools": [{**READ_FILE, "cache_control": EPHEMERAL}], "cache_control": EPHEMERAL},
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
    ],
    ids=[
        "last-call",
        "calls-then-text",
        "one-of-two",
        "result-after-text",
        "orphan-result",
        "unknown-id",
        "older-turn",
        "assistant-first",
        "no-messages",
        "five-breakpoints",
        "automatic-breakpoint",
    ],
)
async def test_strict_refuses_as_the_api_does(
    encoders: Encoders, messages: list[Block], fields: dict[str, Any], message: str
) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**request(*messages, **{"tools": [READ_FILE], **fields}))
    assert error_of(raised) == invalid(message)
    assert upstream.strict_rejections == 1
    assert upstream.prompt_tokens == []


@pytest.mark.parametrize(
    "messages",
    [
        [
            user("go"),
            assistant("Reading both.", tool_use("toolu_1"), tool_use("toolu_2")),
            user(tool_result("toolu_2"), tool_result("toolu_1"), text("Thanks.")),
            assistant("Both read."),
            user("Good."),
        ],
        # Consecutive messages of one role are one turn, as the API merges them.
        [
            user("go"),
            user("and quickly"),
            assistant(tool_use("toolu_1")),
            assistant(tool_use("toolu_2")),
            user(tool_result("toolu_1"), tool_result("toolu_2")),
            user("Anything else?"),
        ],
        # Claude Code's `system` entries sit between turns.
        [
            user("go"),
            {"role": "system", "content": "Files re-read after compaction: src/app.py"},
            assistant("Ready."),
            user("Now fix it."),
        ],
        # A prefilled answer.
        [user("Say hi."), assistant("Hi")],
        [user(*(text(f"part {n}", cache_control=EPHEMERAL) for n in range(4)))],
    ],
    ids=["parallel", "merged", "system-entry", "prefill", "four-breakpoints"],
)
async def test_strict_accepts_what_the_api_accepts(
    encoders: Encoders, messages: list[Block]
) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        message = await client.messages.create(**request(*messages, tools=[READ_FILE]))
    assert message.type == "message"
    assert upstream.strict_rejections == 0


@pytest.mark.parametrize(
    ("messages", "role"),
    [
        ([user("go"), user("and quickly")], "user"),
        ([user("go"), assistant("a"), assistant("b"), user("c")], "assistant"),
    ],
)
async def test_roles_alternate_refuses_two_turns_of_one_role(
    encoders: Encoders, messages: list[Block], role: str
) -> None:
    """As the API did before it merged them, and as Bedrock and strict servers still do."""
    upstream = MockUpstream(encoders=encoders, roles_alternate=True)
    async with sdk(upstream) as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**request(*messages))
    assert error_of(raised) == invalid(
        f'messages: roles must alternate between "user" and "assistant", but found multiple '
        f'"{role}" roles in a row'
    )
    assert upstream.strict_rejections == 1


async def test_lenient_without_strict(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    async with raw(upstream) as http:
        response = await http.post(
            "/v1/messages", json=request(assistant("Hi."), user(tool_result("toolu_9")))
        )
    assert response.status_code == 200
    assert upstream.strict_rejections == 0


@pytest.mark.parametrize(
    ("sent", "status", "error"),
    [
        (
            {"anthropic-version": "2023-06-01"},
            401,
            {"type": "authentication_error", "message": "x-api-key header is required"},
        ),
        (
            {"authorization": "Basic dXNlcjpwYXNz", "anthropic-version": "2023-06-01"},
            401,
            {"type": "authentication_error", "message": "x-api-key header is required"},
        ),
        ({"x-api-key": "sk-ant-test"}, 400, invalid("anthropic-version: header is required")),
    ],
    ids=["no-key", "basic-auth", "no-version"],
)
async def test_strict_wants_credentials_and_a_version(
    encoders: Encoders, sent: dict[str, str], status: int, error: dict[str, Any]
) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with raw(upstream) as http:
        response = await http.post("/v1/messages", json=request(user("hi")), headers=sent)
        counted = await http.post(
            "/v1/messages/count_tokens", json=request(user("hi")), headers=sent
        )
    assert (response.status_code, response.json()["error"]) == (status, error)
    assert response.json()["request_id"] == response.headers["request-id"]
    assert (counted.status_code, counted.json()["error"]) == (status, error)


# --- thinking --------------------------------------------------------------------------------


async def first_turn(
    client: anthropic.AsyncAnthropic, **fields: Any
) -> tuple[list[Block], anthropic.types.Message]:
    """A first request with thinking on; the messages the next request continues from."""
    opening = user("Read src/app.py and tell me what it imports.")
    message = await client.messages.create(
        **request(opening, tools=[READ_FILE], thinking=THINKING, **fields)
    )
    return [opening, echoed(message), results_for(message)], message


def thinking_model(encoders: Encoders) -> MockUpstream:
    script = AgentScript(calls=(("read_file", '{"path": "src/app.py"}'),))
    return MockUpstream(encoders=encoders, agent=script, strict=True)


async def test_thinking_opens_each_answer_when_enabled(encoders: Encoders) -> None:
    upstream = thinking_model(encoders)
    async with sdk(upstream) as client:
        _, thought = await first_turn(client)
        adaptive = await client.messages.create(
            **request(user("hi"), tools=[READ_FILE], thinking={"type": "adaptive"})
        )
        plain = await client.messages.create(**request(user("hi"), tools=[READ_FILE]))
        disabled = await client.messages.create(
            **request(user("hi"), tools=[READ_FILE], thinking={"type": "disabled"})
        )
    assert [block.type for block in thought.content] == ["thinking", "tool_use"]
    first = thought.content[0]
    assert first.type == "thinking"
    assert "read_file" in first.thinking
    assert len(first.signature) > 200
    assert adaptive.content[0].type == "thinking"
    assert [block.type for block in plain.content] == ["tool_use"]
    assert [block.type for block in disabled.content] == ["tool_use"]
    # Its thinking is billed as output.
    assert thought.usage.output_tokens > plain.usage.output_tokens


async def test_thinking_sent_back_intact_is_accepted_through_a_tool_loop(
    encoders: Encoders,
) -> None:
    upstream = thinking_model(encoders)
    async with sdk(upstream) as client:
        messages, _ = await first_turn(client)
        for _ in range(3):
            message = await client.messages.create(
                **request(*messages, tools=[READ_FILE], thinking=THINKING)
            )
            messages += [echoed(message)]
            if message.stop_reason != "tool_use":
                break
            messages += [results_for(message)]
        messages.append(user("Thanks."))
        closing = await client.messages.create(
            **request(*messages, tools=[READ_FILE], thinking=THINKING)
        )
    assert closing.type == "message"
    assert message.stop_reason == "end_turn"
    assert upstream.strict_rejections == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("signature", "EqQBCkgIARABGAIiQL" + "A" * 300),
        ("thinking", "I changed my mind."),
    ],
)
async def test_an_altered_thinking_block_is_refused(
    encoders: Encoders, field: str, value: str
) -> None:
    upstream = thinking_model(encoders)
    async with sdk(upstream) as client:
        messages, _ = await first_turn(client)
        messages[1]["content"][0][field] = value
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**request(*messages, tools=[READ_FILE], thinking=THINKING))
    assert error_of(raised) == invalid(
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    )
    assert upstream.strict_rejections == 1


async def test_a_thinking_block_without_its_signature_is_refused(encoders: Encoders) -> None:
    upstream = thinking_model(encoders)
    async with sdk(upstream) as client:
        messages, _ = await first_turn(client)
        del messages[1]["content"][0]["signature"]
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**request(*messages, tools=[READ_FILE]))
    assert error_of(raised) == invalid("messages.1.content.0.thinking.signature: Field required")


async def test_a_tool_loop_without_its_thinking_is_refused_when_thinking_is_enabled(
    encoders: Encoders,
) -> None:
    upstream = thinking_model(encoders)
    async with sdk(upstream) as client:
        messages, _ = await first_turn(client)
        dropped = [messages[0], {**messages[1], "content": messages[1]["content"][1:]}, messages[2]]
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**request(*dropped, tools=[READ_FILE], thinking=THINKING))
        # Without thinking the same history is fine; so is a finished turn with thinking.
        without = await client.messages.create(**request(*dropped, tools=[READ_FILE]))
        finished = [*dropped, assistant("It imports os."), user("Thanks.")]
        after = await client.messages.create(
            **request(*finished, tools=[READ_FILE], thinking=THINKING)
        )
    assert error_of(raised) == invalid(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
        "We recommend you include thinking blocks from previous turns. To avoid this "
        f"requirement, disable `thinking`. Please consult our documentation at {THINKING_DOCS}"
    )
    assert (without.type, after.type) == ("message", "message")
    assert upstream.strict_rejections == 1


async def test_thinking_streams_as_deltas_then_its_signature(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, strict=True)
    calls = (ToolCall("read_file", '{"path": "a.py"}', "toolu_1"),)
    upstream.queue(Reply(content=None, tool_calls=calls))
    body = request(user("Read a.py"), tools=[READ_FILE], thinking=THINKING)
    async with sdk(upstream) as client, client.messages.stream(**body) as stream:
        thoughts, signatures = [], []
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "thinking_delta":
                thoughts.append(event.delta.thinking)
            if event.type == "content_block_delta" and event.delta.type == "signature_delta":
                signatures.append(event.delta.signature)
        final = await stream.get_final_message()
    thinking = final.content[0]
    assert thinking.type == "thinking"
    assert "".join(thoughts) == thinking.thinking
    assert len(thoughts) > 1
    assert signatures == [thinking.signature]
    # What the stream built goes back as is.
    followed = [user("Read a.py"), echoed(final), results_for(final)]
    async with sdk(upstream) as client:
        message = await client.messages.create(
            **request(*followed, tools=[READ_FILE], thinking=THINKING)
        )
    assert message.type == "message"
    assert upstream.strict_rejections == 0


async def test_a_foreign_signature_is_refused_and_redacted_thinking_passes(
    encoders: Encoders,
) -> None:
    """Another provider's thinking cannot be replayed; redacted thinking is opaque to the mock."""
    upstream = MockUpstream(encoders=encoders, strict=True)
    foreign = {"type": "thinking", "thinking": "Hm.", "signature": "ErUBCkYIBRgCIkD" + "x" * 200}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a" * 8}
    async with raw(upstream) as http:
        refused = await http.post(
            "/v1/messages",
            json=request(user("go"), assistant(foreign, text("ok")), user("go on")),
            headers=headers(),
        )
        passed = await http.post(
            "/v1/messages",
            json=request(user("go"), assistant(redacted, text("ok")), user("go on")),
            headers=headers(),
        )
    assert refused.json()["error"] == invalid(
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    )
    assert passed.status_code == 200
