"""The mock's Messages API over several requests, through the official `anthropic` SDK: its
prompt cache (breakpoints, reads and writes), the agent playing a tool loop as Claude Code
drives one, the recaller, and the proxy's summary request."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from anthropic.types import Usage

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.summary import Prefix, prefix_closing, summary_request
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.mock_upstream import AgentScript, MockUpstream, Reply, messages_prompt_tokens
from proxy.mock_upstream.messages_cache import BreakpointCache, CacheUse
from tests.mock_messages import (
    EPHEMERAL,
    MODEL,
    READ_FILE,
    Block,
    Body,
    assistant,
    echoed,
    long_text,
    request,
    results_for,
    sdk,
    text,
    tool_result,
    tool_use,
    user,
)

RECALL = {
    "name": "context_recall",
    "description": "Get back content the proxy condensed.",
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders((O200K_BASE,))


@pytest.fixture
def counter(encoders: Encoders) -> TokenCounter:
    return TokenCounter(encoders.by_name.get(O200K_BASE, encoders.fallback))


def marked_last(messages: list[Block]) -> list[Block]:
    """`messages` with one breakpoint, on the last block of the last message (and none
    elsewhere), as Claude Code marks every request."""
    out = []
    for number, message in enumerate(messages):
        content = message["content"]
        listed = [text(content)] if isinstance(content, str) else content
        listed = [{k: v for k, v in block.items() if k != "cache_control"} for block in listed]
        if number == len(messages) - 1:
            listed[-1] = {**listed[-1], "cache_control": EPHEMERAL}
        out.append({**message, "content": listed})
    return out


# --- the prompt cache ------------------------------------------------------------------------


def cache_model(encoders: Encoders) -> MockUpstream:
    return MockUpstream(encoders=encoders, default=Reply(content="ok"), cache_min_tokens=256)


def split(usage: Usage) -> tuple[int, int, int]:
    """Input, cache read, cache creation (the mock always sends the two cache counts)."""
    read, created = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    assert read is not None
    assert created is not None
    return (usage.input_tokens, read, created)


async def test_breakpoints_write_the_prefix_and_later_requests_read_it(
    encoders: Encoders, counter: TokenCounter
) -> None:
    upstream = cache_model(encoders)
    system = [text("You are a careful engineer. " + long_text(60, "rule"), cache_control=EPHEMERAL)]
    turns = [user("Turn 1: " + long_text(30)), assistant("Noted 1."), user("Turn 2: go on.")]
    bodies = [
        request(*marked_last(turns[:1]), system=system),
        request(*marked_last(turns), system=system),
        # The marker moved on, as Claude Code moves it every request.
        request(*marked_last([*turns, assistant("Noted 2."), user("Turn 3.")]), system=system),
        # An edit at the head: nothing before it is the same prompt any more.
        request(*marked_last(turns), system=[{**system[0], "text": "You are terse. "}]),
    ]
    async with sdk(upstream) as client:
        usages = [(await client.messages.create(**body)).usage for body in bodies]
    (in1, read1, made1), (in2, read2, made2), (in3, read3, made3), (in4, read4, made4) = map(
        split, usages
    )
    assert (read1, read2, read3, read4) == (0, made1, made1 + made2, 0)
    assert made1 > 256  # the system prompt, from its breakpoint
    assert min(made2, made3, made4) > 0
    assert in1 > 0  # the user's message after the system's breakpoint
    assert in2 == in3 == in4 == 3  # only the reply's priming is after the last breakpoint
    for body, usage in zip(bodies, usages, strict=True):
        assert sum(split(usage)) == messages_prompt_tokens(body, counter)
    assert upstream.cached_tokens == [read1, read2, read3, read4]
    assert upstream.prompt_tokens == [sum(split(usage)) for usage in usages]


async def test_no_breakpoint_no_cache(encoders: Encoders) -> None:
    upstream = cache_model(encoders)
    body = request(user(long_text(100)), system=long_text(60, "rule"))
    async with sdk(upstream) as client:
        usages = [(await client.messages.create(**body)).usage for _ in range(2)]
    assert [split(usage)[1:] for usage in usages] == [(0, 0), (0, 0)]


async def test_a_prefix_below_the_minimum_is_not_cached(encoders: Encoders) -> None:
    upstream = cache_model(encoders)
    body = request(*marked_last([user("A short question.")]))
    async with sdk(upstream) as client:
        usages = [(await client.messages.create(**body)).usage for _ in range(2)]
    assert [split(usage)[1:] for usage in usages] == [(0, 0), (0, 0)]


async def test_automatic_caching_marks_the_last_block(encoders: Encoders) -> None:
    upstream = cache_model(encoders)
    body = request(user(long_text(100)), cache_control=EPHEMERAL)
    async with sdk(upstream) as client:
        first, second = [(await client.messages.create(**body)).usage for _ in range(2)]
    assert split(first)[2] > 256
    assert split(second)[1:] == (split(first)[2], 0)


async def test_a_marker_far_behind_the_cached_prefix_misses_it(encoders: Encoders) -> None:
    """The API looks back 20 blocks from a breakpoint for a cached prefix, no further."""
    head = [user(long_text(60)), assistant("Noted.")]
    near = [*head, user(*(f"line {n}" for n in range(19)))]  # 20 blocks after the prefix
    far = [*head, user(*(f"line {n}" for n in range(20)))]  # 21
    usages = []
    for later in (near, far):
        async with sdk(cache_model(encoders)) as client:
            await client.messages.create(**request(*marked_last(head[:1])))
            usages.append((await client.messages.create(**request(*marked_last(later)))).usage)
    hit, miss = usages
    assert split(hit)[1] > 256
    assert split(miss)[1] == 0


# --- the agent -------------------------------------------------------------------------------


async def test_agent_plays_a_tool_loop_as_claude_code_drives_it(encoders: Encoders) -> None:
    """Thinking on, a breakpoint on the newest block, every message sent back as it came:
    the agent's rounds, the API's rules kept throughout, and a cache that keeps reading."""
    script = AgentScript(
        calls=(("read_file", '{"path": "a.py"}'), ("read_file", '{"path": "b.py"}')),
        rounds_per_turn=2,
    )
    upstream = MockUpstream(encoders=encoders, agent=script, strict=True, cache_min_tokens=256)
    system = [text("You are a careful engineer. " + long_text(40, "rule"))]
    thinking = {"type": "enabled", "budget_tokens": 2048}
    messages: list[Block] = []
    shapes, reads = [], []
    async with sdk(upstream) as client:
        for turn in range(3):
            messages.append(user(f"Turn {turn}: check the files."))
            while True:
                body = request(
                    *marked_last(messages), system=system, tools=[READ_FILE], thinking=thinking
                )
                async with client.messages.stream(**body) as stream:
                    message = await stream.get_final_message()
                messages.append(echoed(message))
                shapes.append(tuple(block.type for block in message.content))
                reads.append(split(message.usage)[1])
                if message.stop_reason != "tool_use":
                    break
                messages.append(results_for(message, "import os\n" + long_text(10)))
    calls, answer = ("thinking", "tool_use"), ("thinking", "text")
    assert shapes == [calls, calls, answer] * 3
    assert message.content[-1].type == "text"
    assert message.content[-1].text == "Done. The task is complete."
    used = [
        block["id"]
        for message in messages[1:]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    assert used == [f"call_agent_{n}" for n in range(1, 7)]
    assert upstream.strict_rejections == 0
    assert reads[0] == 0
    assert all(later > earlier for earlier, later in itertools.pairwise(reads[1:]))
    assert all(read < prompt for read, prompt in zip(reads, upstream.prompt_tokens, strict=True))


async def test_reminders_beside_tool_results_do_not_start_a_new_turn(encoders: Encoders) -> None:
    """Claude Code puts `<system-reminder>` text next to its tool results: still the same turn,
    so the agent ends it after its rounds, and its calls read the results."""
    script = AgentScript(calls=(("read_file", '{"path": "a.py"}'),), rounds_per_turn=2)
    upstream = MockUpstream(encoders=encoders, agent=script, strict=True)
    reminder = text("<system-reminder>The todo list is empty.</system-reminder>")
    messages: list[Block] = [user("Check a.py.")]
    stops = []
    async with sdk(upstream) as client:
        for _ in range(4):
            message = await client.messages.create(**request(*messages, tools=[READ_FILE]))
            stops.append(message.stop_reason)
            if message.stop_reason != "tool_use":
                break
            results = results_for(message)
            messages += [echoed(message), {**results, "content": [*results["content"], reminder]}]
    assert stops == ["tool_use", "tool_use", "end_turn"]


async def test_agent_answers_without_tools_on_offer(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders, agent=AgentScript(calls=(("read_file", "{}"),)))
    async with sdk(upstream) as client:
        message = await client.messages.create(**request(user("hello")))
        none = await client.messages.create(
            **request(user("hello"), tools=[READ_FILE], tool_choice={"type": "none"})
        )
    assert [block.type for block in message.content] == ["text"]
    assert [block.type for block in none.content] == ["text"]


async def test_agent_calls_claude_codes_tools_in_its_working_directory(
    encoders: Encoders,
) -> None:
    """Claude Code's `Read` needs an absolute path: the agent takes the directory from
    Claude Code's system prompt, escaped into the arguments' JSON, and without one (any other
    client) leaves the script's arguments as written."""
    script = AgentScript(
        calls=(("Read", json.dumps({"file_path": "{workspace}/notes.txt"})),),
        rounds_per_turn=1,
    )
    workspace = 'C:\\work\\"odd" dir'
    environment = [
        text("x-anthropic-billing-header: cc_version=2.1;"),
        text(
            "# Environment\nYou have been invoked in the following environment: \n"
            f" - Primary working directory: {workspace}\n - Is a git repository: false\n"
        ),
    ]
    read = {"name": "Read", "input_schema": {"type": "object"}}
    inputs = []
    for system in (environment, "You are a coding agent."):
        upstream = MockUpstream(encoders=encoders, agent=script, strict=True)
        async with sdk(upstream) as client:
            message = await client.messages.create(
                **request(user("Read the notes."), system=system, tools=[read])
            )
        [call] = [block for block in message.content if block.type == "tool_use"]
        inputs.append((call.name, call.input))
    assert inputs == [
        ("Read", {"file_path": f"{workspace}/notes.txt"}),
        ("Read", {"file_path": "{workspace}/notes.txt"}),
    ]


async def test_agent_answers_with_what_the_latest_tool_result_shows(encoders: Encoders) -> None:
    """With `quote`, the answer ends with the pattern's match in the newest result (its group
    when it has one): what the client's tool really returned, not an older result's."""
    grep = {"name": "Grep", "input_schema": {"type": "object"}}
    pattern = r"checksum (ck-[0-9a-f]+)"
    outputs = {
        "newest": ("notes.txt:3: checksum ck-0ld", "notes.txt:41: checksum ck-c0ffee"),
        "no match": ("notes.txt:3: checksum ck-0ld", "no matches"),
    }
    answers = {}
    for case, (older, newest) in outputs.items():
        script = AgentScript(
            calls=(("Grep", '{"pattern": "checksum"}'),), rounds_per_turn=2, quote=pattern
        )
        upstream = MockUpstream(encoders=encoders, agent=script, strict=True)
        messages: list[Block] = [user("What is the checksum?")]
        async with sdk(upstream) as client:
            for output in (older, newest, None):
                message = await client.messages.create(**request(*messages, tools=[grep]))
                if output is None:
                    break
                messages += [echoed(message), results_for(message, output)]
        assert message.stop_reason == "end_turn"
        assert message.content[-1].type == "text"
        answers[case] = message.content[-1].text
    assert answers == {
        "newest": "Done. The task is complete. ck-c0ffee",
        "no match": "Done. The task is complete.",
    }
    with pytest.raises(re.error):
        AgentScript(calls=(), quote="checksum (")


# --- the recaller ----------------------------------------------------------------------------


async def test_recaller_answers_from_the_request_or_recalls_what_was_condensed(
    encoders: Encoders,
) -> None:
    upstream = MockUpstream(encoders=encoders, recaller=True, strict=True)
    placeholder = '[tool result cleared: context_recall(id="rc_abcdefghij") returns it]'
    history = [
        user("Deploy it."),
        assistant(tool_use("toolu_1", "deploy/env.txt")),
        user(tool_result("toolu_1", placeholder)),
        assistant("Deployed."),
        user("What is the value of DEPLOY_TOKEN in deploy/env.txt?"),
    ]
    async with sdk(upstream) as client:
        recall = await client.messages.create(**request(*history, tools=[READ_FILE, RECALL]))
        [call] = [block for block in recall.content if block.type == "tool_use"]
        answered = [*history, echoed(recall), user(tool_result(call.id, "DEPLOY_TOKEN=tok-42"))]
        answer = await client.messages.create(**request(*answered, tools=[READ_FILE, RECALL]))
    assert (call.name, call.input) == (
        "context_recall",
        {"id": "rc_abcdefghij", "query": "DEPLOY_TOKEN"},
    )
    assert answer.content[0].type == "text"
    assert answer.content[0].text == "DEPLOY_TOKEN is tok-42."
    assert upstream.recalled_ids == ["rc_abcdefghij"]
    assert upstream.recall_answers == ["DEPLOY_TOKEN is tok-42."]


# --- the proxy's summary request -------------------------------------------------------------


async def test_a_summary_asked_as_a_transcript_is_answered(encoders: Encoders) -> None:
    """The transcript form: the summarizer's instructions as `system`, the turns as one user
    message, as a Messages translation of `summary_request` sends them."""
    chat = summary_request(
        [
            {"role": "user", "content": "The checkout is slow; see incident INC-4821."},
            {"role": "assistant", "content": "Reading src/billing/invoice.py."},
        ],
        previous=None,
        model=MODEL,
        max_tokens=400,
    )
    instructions, transcript = chat["messages"]
    body = request(user(transcript["content"]), system=instructions["content"], max_tokens=400)
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        summary = await client.messages.create(**body)
    assert upstream.summary_calls == 1
    assert summary.content[0].type == "text"
    assert "INC-4821" in summary.content[0].text
    assert upstream.prompt_tokens == []


def conversation() -> list[Block]:
    return [
        user("Fix the checkout, ticket T-1 in src/app.py."),
        assistant("Looking."),
        user("The checkout is slow; see incident INC-4821. Never deploy on Fridays."),
        assistant(tool_use("toolu_7", "src/billing/invoice.py")),
        user(tool_result("toolu_7", "def total(): ...  # p99 latency 37 ms\n" + long_text(300))),
        assistant("The invoice total is recomputed per line item."),
    ]


async def test_a_summary_asked_after_the_conversation_is_answered_from_its_cache(
    encoders: Encoders, counter: TokenCounter
) -> None:
    """The prefix form on the Messages API: the conversation's messages as they were sent
    (cached then), one closing user message with the summarizer's prompt. The summarizer
    writes it from the turns after the task, within `max_tokens`; it is counted apart."""
    closing = prefix_closing(
        Prefix({}, (), 0, after_task=True), previous="- INC-9 was closed", max_tokens=400
    )
    sent: Body = request(*marked_last(conversation()), tools=[READ_FILE])
    summary_body = request(
        *marked_last([*conversation(), user(closing)]),
        tools=[READ_FILE],
        tool_choice={"type": "none"},
        max_tokens=400,
    )
    upstream = MockUpstream(encoders=encoders, strict=True)
    async with sdk(upstream) as client:
        await client.messages.create(**sent)
        summary = await client.messages.create(**summary_body)
    assert upstream.summary_calls == 1
    assert upstream.summary_requests[0].json() == summary_body
    assert summary.content[0].type == "text"
    written = summary.content[0].text
    for fact in ("INC-4821", "src/billing/invoice.py", "37 ms", "INC-9"):
        assert fact in written, fact
    assert "T-1" not in written  # the task stays in place: it is not summarized
    assert counter.text(written) <= 400 + 100  # the headings come on top of the quotes
    [billed] = upstream.summary_usage
    read = split(summary.usage)[1]
    assert (billed.prompt_tokens, billed.cached_tokens) == (sum(split(summary.usage)), read)
    assert read >= 1024  # the conversation, from the prompt cache
    assert len(upstream.prompt_tokens) == 1  # the conversation's


async def test_a_breakpoint_inside_a_tool_result_caches_through_it(encoders: Encoders) -> None:
    """Markers may sit on the blocks of a tool result; where they sit is no part of the
    prompt, so the next request reads the prefix though its marker moved on."""
    upstream = cache_model(encoders)
    marked = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [text(long_text(60), cache_control=EPHEMERAL)],
    }
    unmarked = {**marked, "content": [text(long_text(60))]}
    head = [user("go"), assistant(tool_use("toolu_1"))]
    async with sdk(upstream) as client:
        first = await client.messages.create(**request(*head, user(marked)))
        second = await client.messages.create(
            **request(*head, user(unmarked), *marked_last([assistant("Read."), user("Next?")]))
        )
    assert split(first.usage)[2] > 256
    assert split(second.usage)[1] == split(first.usage)[2]


def test_the_cache_forgets_its_oldest_prefixes() -> None:
    cache = BreakpointCache(capacity=2)
    sums = [0, 2000]
    for key in (b"a", b"b", b"c"):
        assert cache.account([key], sums, [0], 1024) == CacheUse(0, 2000)
    assert cache.account([b"c"], sums, [0], 1024) == CacheUse(2000, 0)
    assert cache.account([b"a"], sums, [0], 1024) == CacheUse(0, 2000)  # forgotten
