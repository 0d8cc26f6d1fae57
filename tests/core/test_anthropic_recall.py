"""The rounds of a recall on the Messages API: the proxy's `tool_use` blocks read out of a
message, the next round's body, the one message the client gets, and the event stream
rewritten over rounds (streams made by the mock's own encoder, as Anthropic frames them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from proxy.core.anthropic_recall import (
    MessagesStream,
    earlier_content,
    messages_calls,
    messages_continued,
    messages_final,
)
from proxy.core.recall import TOOL
from proxy.core.recall_rounds import Call
from proxy.mock_upstream.messages_stream import events

JSON = dict[str, Any]
RID = "rc_abcdefghij"
THINK: JSON = {"type": "thinking", "thinking": "I need the old result.", "signature": "c2lnMQ=="}
THINK_2: JSON = {"type": "thinking", "thinking": "Now I can answer.", "signature": "c2lnMg=="}
REDACTED: JSON = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
USAGE_1: JSON = {
    "input_tokens": 10,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 90,
    "output_tokens": 7,
}
USAGE_2: JSON = {
    "input_tokens": 40,
    "cache_creation_input_tokens": 20,
    "cache_read_input_tokens": 90,
    "output_tokens": 5,
}
USAGE_SUM: JSON = {
    "input_tokens": 50,
    "cache_creation_input_tokens": 20,
    "cache_read_input_tokens": 180,
    "output_tokens": 12,
}


def ours(ident: str = "toolu_r", rid: str = RID, **extra: str) -> JSON:
    return {"type": "tool_use", "id": ident, "name": TOOL, "input": {"id": rid, **extra}}


def theirs(ident: str = "toolu_c") -> JSON:
    return {"type": "tool_use", "id": ident, "name": "read_file", "input": {"path": "a.py"}}


def text(value: str) -> JSON:
    return {"type": "text", "text": value}


def message(*content: JSON, usage: JSON = USAGE_1, ident: str = "msg_1") -> JSON:
    calls = any(block["type"] == "tool_use" for block in content)
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": list(content),
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def fed(stream: MessagesStream, answer: JSON) -> list[JSON]:
    return [out for event in events(answer) for out in stream.feed(event)]


def rebuilt(relayed: Sequence[JSON]) -> list[JSON]:
    """The content a client (the SDK) builds from the events: every block where its index
    says, deltas applied."""
    content: list[JSON] = []
    inputs: dict[int, str] = {}
    for event in relayed:
        if event["type"] == "content_block_start":
            assert event["index"] == len(content), "indexes must be consecutive"
            content.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            block, delta = content[event["index"]], event["delta"]
            if delta["type"] == "input_json_delta":
                inputs[event["index"]] = inputs.get(event["index"], "") + delta["partial_json"]
            else:
                key = delta["type"].removesuffix("_delta")
                block[key] = block.get(key, "") + delta[key]
    for index, pieces in inputs.items():
        content[index]["input"] = json.loads(pieces)
    return content


# --- Whole messages ---------------------------------------------------------------------------


def test_the_proxys_calls_are_read_with_their_ids_and_queries() -> None:
    answer = message(THINK, ours("toolu_1"), ours("toolu_2", query="DEPLOY_TOKEN"))
    calls, client = messages_calls(answer)
    assert calls == [Call("toolu_1", RID), Call("toolu_2", RID, "DEPLOY_TOKEN")]
    assert not client


def test_a_call_of_the_clients_tool_is_reported() -> None:
    calls, client = messages_calls(message(text("Both."), ours(), theirs()))
    assert calls == [Call("toolu_r", RID)]
    assert client


def test_a_message_without_content_has_no_calls() -> None:
    assert messages_calls({"type": "error"}) == ([], False)
    assert messages_calls(message(text("Done."))) == ([], False)


def test_a_call_without_an_id_or_input_is_read_as_asking_for_nothing() -> None:
    [call], _ = messages_calls({"content": [{"type": "tool_use", "name": TOOL}]})
    assert call == Call("", None)


def test_the_next_round_carries_the_turn_byte_for_byte_and_one_result_per_call() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "What was it?"}]}
    content = [THINK, ours("toolu_1"), ours("toolu_2")]
    results = [(Call("toolu_1", RID), "first"), (Call("toolu_2", RID), "second")]
    asked = messages_continued(body, content, results)
    assert asked["messages"][:1] == body["messages"]
    assert asked["messages"][1] == {"role": "assistant", "content": content}
    assert asked["messages"][1]["content"][0] is THINK
    assert asked["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "first"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "second"},
        ],
    }
    assert body["messages"] == [{"role": "user", "content": "What was it?"}]  # not changed
    assert messages_continued({}, [ours()], [])["messages"][0]["role"] == "assistant"


def test_thinking_that_led_only_to_the_proxys_call_is_not_left_for_the_client() -> None:
    assert earlier_content([THINK, REDACTED, ours()]) == []
    assert earlier_content([THINK, text("Let me look."), ours()]) == [THINK, text("Let me look.")]
    # Thinking goes with the client's block that follows it, past the proxy's call.
    assert earlier_content([THINK, ours(), text("Then.")]) == [THINK, text("Then.")]


def test_the_final_message_holds_every_rounds_blocks_without_the_proxys_calls() -> None:
    earlier = earlier_content([THINK, text("Looking. "), ours()])
    last = message(THINK_2, text("It is 42."), usage=USAGE_2, ident="msg_2")
    final = messages_final(last, earlier, [USAGE_1, USAGE_2])
    assert final["content"] == [THINK, text("Looking. "), THINK_2, text("It is 42.")]
    assert final["stop_reason"] == "end_turn"
    assert final["usage"] == USAGE_SUM
    assert last["content"] == [THINK_2, text("It is 42.")]  # not changed


def test_the_final_message_keeps_the_clients_calls_and_the_thinking_before_them() -> None:
    final = messages_final(message(THINK, ours(), theirs()), [], [USAGE_1])
    assert final["content"] == [THINK, theirs()]
    assert final["stop_reason"] == "tool_use"


def test_only_the_proxys_calls_left_make_the_stop_reason_end_turn() -> None:
    final = messages_final(message(THINK, ours()), [], [None])
    assert final["content"] == [THINK]  # no round follows: its thinking stays
    assert final["stop_reason"] == "end_turn"
    assert final["usage"] == USAGE_1  # no round reported any: the answer's own


def test_a_message_without_content_is_given_back_as_it_is() -> None:
    assert messages_final({"type": "message"}, [], []) == {"type": "message"}


# --- Streams ----------------------------------------------------------------------------------


def test_a_stream_without_the_proxys_call_is_relayed_as_it_came() -> None:
    stream = MessagesStream()
    answer = message(THINK, text("Hello."), theirs())
    relayed = fed(stream, answer)
    assert stream.end_round() == ([], True)
    relayed += stream.finish(with_usage=False)
    # As it came, but for the ping: relayed at once, not held with the thinking before it.
    came = list(events(answer))
    assert [e for e in relayed if e["type"] != "ping"] == [e for e in came if e["type"] != "ping"]
    assert relayed.count({"type": "ping"}) == came.count({"type": "ping"})
    assert stream.response_id == "msg_1"
    assert stream.usage == stream.first_usage == USAGE_1


def test_rounds_are_one_message_to_the_client() -> None:
    stream = MessagesStream()
    first = message(THINK, text("Looking. "), ours(query="KEY"))
    relayed = fed(stream, first)
    calls, client = stream.end_round()
    assert calls == [Call("toolu_r", RID, "KEY")]
    assert not client
    body = {"messages": [{"role": "user", "content": "What is KEY?"}]}
    asked = stream.continued(body, [(calls[0], "KEY=42")])
    # The turn as the model wrote it: thinking and its signature rebuilt from the deltas.
    assert asked["messages"][1] == {"role": "assistant", "content": first["content"]}
    second = message(THINK_2, text("It is 42."), usage=USAGE_2, ident="msg_2")
    relayed += fed(stream, second)
    assert stream.end_round() == ([], False)
    relayed += stream.finish()
    kinds = [event["type"] for event in relayed]
    assert kinds.count("message_start") == kinds.count("message_delta") == 1
    assert kinds.count("message_stop") == 1
    assert kinds[-1] == "message_stop"
    assert relayed[0]["message"]["id"] == "msg_1"
    assert "context_recall" not in json.dumps(relayed)
    assert rebuilt(relayed) == [THINK, text("Looking. "), THINK_2, text("It is 42.")]
    [delta] = [event for event in relayed if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"] == USAGE_SUM
    assert stream.first_usage == USAGE_1


def test_thinking_held_for_the_proxys_call_is_dropped_when_the_rounds_go_on() -> None:
    stream = MessagesStream()
    relayed = fed(stream, message(THINK, REDACTED, ours()))
    assert [event["type"] for event in relayed] == ["message_start", "ping"]
    calls, _ = stream.end_round()
    stream.continued({"messages": []}, [(calls[0], "found")])
    relayed += fed(stream, message(THINK_2, text("Done."), usage=USAGE_2))
    relayed += stream.finish()
    assert rebuilt(relayed) == [THINK_2, text("Done.")]


def test_thinking_goes_to_the_client_before_its_own_call() -> None:
    stream = MessagesStream()
    relayed = fed(stream, message(THINK, ours(), theirs()))
    assert stream.end_round() == ([Call("toolu_r", RID)], True)
    relayed += stream.finish()
    assert rebuilt(relayed) == [THINK, theirs()]
    [delta] = [event for event in relayed if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {k: USAGE_1[k] for k in delta["usage"]}  # one round: as it came


def test_a_refused_round_closes_the_stream_with_the_round_before() -> None:
    stream = MessagesStream()
    stream.refused()  # nothing asked yet: nothing to take back
    relayed = fed(stream, message(THINK, text("Looking."), ours()))
    calls, _ = stream.end_round()
    stream.continued({"messages": []}, [(calls[0], "found")])
    stream.refused()
    relayed += stream.finish()
    assert rebuilt(relayed) == [THINK, text("Looking.")]
    [delta] = [event for event in relayed if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert stream.usage == USAGE_1


def test_thinking_still_held_at_the_end_is_relayed() -> None:
    stream = MessagesStream()
    relayed = fed(stream, message(THINK, ours()))
    relayed += stream.finish()
    assert rebuilt(relayed) == [THINK]


def test_a_stream_that_failed_ends_with_its_error() -> None:
    stream = MessagesStream()
    error = {"type": "overloaded_error", "message": "Overloaded"}
    relayed = [
        out for e in events(message(text("Hi")), stream_error=error) for out in stream.feed(e)
    ]
    assert relayed[-1] == {"type": "error", "error": error}
    assert stream.finish() == []


def test_odd_events_are_read_as_far_as_they_make_sense() -> None:
    stream = MessagesStream()
    assert stream.feed({"type": "message_start", "message": None}) == [
        {"type": "message_start", "message": None}
    ]
    assert stream.response_id is None
    odd_block = {"type": "content_block_start", "index": 0, "content_block": None}
    assert stream.feed(odd_block) == [odd_block]
    odd_deltas = [
        {"type": "content_block_delta", "index": 0, "delta": None},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "future_delta"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
    ]
    for delta in odd_deltas:
        assert stream.feed(delta) == [delta]
    # A delta for a block that never started is nothing the client could place.
    assert stream.feed({"type": "content_block_delta", "index": 7, "delta": {}}) == []
    delta = {"type": "message_delta", "delta": {}, "usage": {"output_tokens": None}}
    stream.feed(delta)
    assert stream.usage == {}  # a null count says nothing
    assert stream.finish() == [delta]


def test_tool_inputs_are_rebuilt_for_the_next_round() -> None:
    stream = MessagesStream()
    server = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
    cited = {"type": "text", "text": ""}
    start: list[JSON] = [
        {"type": "message_start", "message": {"id": "msg_1", "usage": USAGE_1}},
        {"type": "content_block_start", "index": 0, "content_block": server},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"q": 1}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": cited},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta",
                                                              "citation": {"n": 1}}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": ours()},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                              "partial_json": f'{{"id": "{RID}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": ours("toolu_2")},
        {"type": "content_block_stop", "index": 3},
    ]  # fmt: skip
    for event in start:
        stream.feed(event)
    calls, _ = stream.end_round()
    # Broken JSON still names its id; a call that streamed no input keeps the one it opened with.
    assert calls == [Call("toolu_r", RID), Call("toolu_2", RID)]
    asked = stream.continued({}, [])
    content = asked["messages"][0]["content"]
    assert content[0]["input"] == {"q": 1}
    assert content[1]["citations"] == [{"n": 1}]
    assert content[2]["input"] == {"arguments": f'{{"id": "{RID}'}
    assert content[3]["input"] == ours()["input"]


def test_a_later_round_without_an_input_stated_keeps_an_empty_one() -> None:
    stream = MessagesStream()
    use = {"type": "tool_use", "id": "toolu_x", "name": TOOL}
    stream.feed({"type": "content_block_start", "index": 0, "content_block": use})
    stream.feed({"type": "content_block_stop", "index": 0})
    assert stream.continued({}, [])["messages"][0]["content"] == [{**use, "input": {}}]
