"""`bench.thinking`: the thinking blocks a forwarded request carries, against those the mock
issued for their turn (whole and streamed), on the real mock through the `anthropic` SDK."""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic

from bench.thinking import Issued, judge, thinking_of
from proxy.mock_upstream import MockUpstream, Reply, ToolCall
from tests.mock_messages import READ_FILE, request, user
from tests.servers import serve

THINKING = {"type": "enabled", "budget_tokens": 1024}


async def _two_turns() -> tuple[Issued, MockUpstream, list[Any]]:
    """A tool call (whole) and its answer (streamed), thinking on; the third request sends
    both turns back as they came."""
    upstream = MockUpstream(strict=True, roles_alternate=True)
    upstream.queue(
        Reply(content=None, tool_calls=(ToolCall("read_file", '{"path": "a.py"}', "toolu_1"),)),
        Reply(content="a.py imports os."),
        Reply(content="Done."),
    )
    issued = Issued(upstream.app)
    async with (
        serve(issued) as base_url,
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=base_url, max_retries=0) as sdk,
    ):
        fields: dict[str, Any] = {"tools": [READ_FILE], "thinking": THINKING}
        first = await sdk.messages.create(**request(user("Read a.py."), **fields))
        calls = [b.model_dump(exclude_none=True) for b in first.content]
        messages = [
            user("Read a.py."),
            {"role": "assistant", "content": calls},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ]
        async with sdk.messages.stream(**request(*messages, **fields)) as stream:
            second = await stream.get_final_message()
        answer = [b.model_dump(exclude_none=True) for b in second.content]
        messages += [{"role": "assistant", "content": answer}, user("Thanks.")]
        await sdk.messages.create(**request(*messages, **fields))
    return issued, upstream, [r.json() for r in upstream.requests]


async def test_every_answer_is_read_whole_or_streamed_and_turns_sent_back_intact_hold() -> None:
    issued, upstream, bodies = await _two_turns()
    assert upstream.strict_rejections == 0
    assert len(issued.contents) == 3
    assert [[b["type"] for b in c] for c in issued.contents[:2]] == [
        ["thinking", "tool_use"],
        ["thinking", "text"],
    ]
    streamed = issued.contents[1]
    assert streamed[1]["text"] == "a.py imports os."
    assert json.loads(thinking_of(streamed)[0])["signature"] == streamed[0]["signature"]
    tally = judge(issued.contents, bodies)
    # Request 2 carries the first turn, request 3 both.
    assert (tally.held, tally.judged, tally.details) == (3, 3, ())


async def test_a_block_altered_swapped_or_dropped_is_caught() -> None:
    issued, _, bodies = await _two_turns()
    last = bodies[-1]
    first_turn, second_turn = last["messages"][1], last["messages"][3]

    altered = copy.deepcopy(last)
    altered["messages"][1]["content"][0]["signature"] += "A"
    # The other turn's block: a valid signature for its own text, which the mock's
    # strictness would take; not the block issued for this turn.
    swapped = copy.deepcopy(last)
    swapped["messages"][1]["content"][0] = second_turn["content"][0]
    dropped = copy.deepcopy(last)
    dropped["messages"][3]["content"] = second_turn["content"][1:]
    assert first_turn["content"][0] != second_turn["content"][0]

    for body, what in ((altered, "altered"), (swapped, "altered"), (dropped, "dropped")):
        tally = judge(issued.contents, [body])
        assert (tally.held, tally.judged) == (1, 2), what
        assert tally.details[0].endswith(f"thinking {what}"), tally.details


async def test_a_turn_no_answer_made_and_the_breakpoint_moved() -> None:
    issued, _, bodies = await _two_turns()
    last = copy.deepcopy(bodies[-1])
    # The client's breakpoint on a thinking block is no part of it.
    last["messages"][1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    call = {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {}}
    made = {"role": "assistant", "content": [{**last["messages"][1]["content"][0]}, call]}
    last["messages"][1:1] = [made, {"role": "user", "content": "go on"}]
    tally = judge(issued.contents, [last])
    assert (tally.held, tally.judged) == (2, 3)
    assert tally.details == ("request 1, messages.1: thinking never issued",)
