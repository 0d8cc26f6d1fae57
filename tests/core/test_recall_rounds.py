"""The rounds of a recall: the proxy's calls read out of an answer, the next round's body,
the one answer the client gets, and the chat and Responses streams rewritten over rounds."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.core.recall import TOOL
from proxy.core.recall_rounds import (
    Call,
    ChatStream,
    ResponsesStream,
    chat_calls,
    chat_continued,
    chat_final,
    chat_text,
    earlier_output,
    responses_calls,
    responses_continued,
    responses_final,
    summed,
    without_our_tool,
)
from tests.builders import user

JSON = dict[str, Any]
RID = "rc_abcdefghij"
OTHER_RID = "rc_bbbbbbbbbb"
USAGE_1: JSON = {
    "prompt_tokens": 100,
    "completion_tokens": 10,
    "total_tokens": 110,
    "prompt_tokens_details": {"cached_tokens": 40},
}
USAGE_2: JSON = {
    "prompt_tokens": 150,
    "completion_tokens": 5,
    "total_tokens": 155,
    "prompt_tokens_details": {"cached_tokens": 100},
}
USAGE_SUM: JSON = {
    "prompt_tokens": 250,
    "completion_tokens": 15,
    "total_tokens": 265,
    "prompt_tokens_details": {"cached_tokens": 140},
}


def recall_call(call_id: str = "call_r", rid: str = RID) -> JSON:
    arguments = json.dumps({"id": rid})
    return {"id": call_id, "type": "function", "function": {"name": TOOL, "arguments": arguments}}


def client_call(call_id: str = "call_c", name: str = "search") -> JSON:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def completion(
    *calls: JSON, content: str | None = None, finish: str = "tool_calls", usage: JSON | None = None
) -> JSON:
    message: JSON = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    answer: JSON = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        answer["usage"] = usage
    return answer


# --- usage -----------------------------------------------------------------------------------


def test_summed_adds_every_number_nested_ones_too() -> None:
    assert summed([USAGE_1, USAGE_2]) == USAGE_SUM


def test_summed_skips_rounds_without_usage_and_is_none_without_any() -> None:
    assert summed([None, USAGE_1, None]) == USAGE_1
    assert summed([None, None]) is None
    assert summed([]) is None


def test_summed_keeps_the_first_flag_or_text_and_adds_floats() -> None:
    first = {"cost": 0.5, "estimated": True, "unit": "usd"}
    second = {"cost": 0.25, "estimated": False, "unit": "eur"}
    assert summed([first, second]) == {"cost": 0.75, "estimated": True, "unit": "usd"}


def test_summed_adds_nested_numbers_after_a_round_that_reported_them_null() -> None:
    first = {"prompt_tokens": 10, "prompt_tokens_details": None}
    second = {"prompt_tokens": 20, "prompt_tokens_details": {"cached_tokens": 8}}
    assert summed([first, second]) == {
        "prompt_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 8},
    }


# --- chat completions ------------------------------------------------------------------------


def test_chat_calls_of_an_answer_calling_only_the_proxy() -> None:
    answer = completion(recall_call("r1", RID), recall_call("r2", OTHER_RID))
    assert chat_calls(answer) == ([Call("r1", RID), Call("r2", OTHER_RID)], False)


def test_chat_calls_of_an_answer_calling_the_client_too() -> None:
    answer = completion(client_call(), recall_call())
    assert chat_calls(answer) == ([Call("call_r", RID)], True)


def test_chat_calls_of_an_answer_calling_only_the_client() -> None:
    assert chat_calls(completion(client_call())) == ([], True)


@pytest.mark.parametrize(
    "answer",
    [completion(content="done", finish="stop"), {"choices": []}, {}, {"choices": ["x"]}],
    ids=["text", "no-choice", "empty", "malformed"],
)
def test_chat_calls_of_an_answer_calling_nothing(answer: JSON) -> None:
    assert chat_calls(answer) == ([], False)


def test_chat_calls_with_arguments_naming_no_id() -> None:
    call = {"id": "r1", "function": {"name": TOOL, "arguments": "{}"}}
    assert chat_calls(completion(call)) == ([Call("r1", None)], False)


def test_chat_continued_appends_the_proxys_calls_and_their_results() -> None:
    body = {"model": "m", "messages": [user("what was the token?")], "stream": False}
    answer = completion(recall_call(), content="Let me look.")
    answer["choices"][0]["message"]["refusal"] = None  # a field the next request does not take
    asked = chat_continued(body, answer, [(Call("call_r", RID), "TOKEN=42")])
    assert asked["model"] == "m"
    assert asked["stream"] is False
    assert asked["messages"] == [
        user("what was the token?"),
        {"role": "assistant", "content": "Let me look.", "tool_calls": [recall_call()]},
        {"role": "tool", "tool_call_id": "call_r", "content": "TOKEN=42"},
    ]
    assert body["messages"] == [user("what was the token?")]  # the body is not changed


def test_chat_continued_without_text_sends_null_content() -> None:
    body = {"messages": [user("q")]}
    answer = completion(recall_call("r1"), recall_call("r2", OTHER_RID))
    results = [(Call("r1", RID), "one"), (Call("r2", OTHER_RID), "two")]
    asked = chat_continued(body, answer, results)
    assistant_message = asked["messages"][1]
    assert assistant_message["content"] is None
    assert [c["id"] for c in assistant_message["tool_calls"]] == ["r1", "r2"]
    assert [m["tool_call_id"] for m in asked["messages"][2:]] == ["r1", "r2"]


def test_chat_final_strips_the_proxys_calls_and_stops() -> None:
    answer = completion(recall_call(), content="It is 42.", usage=USAGE_2)
    final = chat_final(answer, [], [USAGE_1, USAGE_2])
    choice = final["choices"][0]
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "It is 42."
    assert final["usage"] == USAGE_SUM
    assert answer["choices"][0]["message"]["tool_calls"] == [recall_call()]  # not changed


def test_chat_final_keeps_the_clients_calls_and_their_finish() -> None:
    answer = completion(recall_call(), client_call())
    final = chat_final(answer, [], [None])
    choice = final["choices"][0]
    assert choice["message"]["tool_calls"] == [client_call()]
    assert choice["finish_reason"] == "tool_calls"
    assert "usage" not in final


def test_chat_final_puts_the_earlier_rounds_text_in_front() -> None:
    answer = completion(content="It is 42.", finish="stop", usage=USAGE_2)
    final = chat_final(answer, ["Let me look. ", "Found it. "], [USAGE_1, USAGE_2])
    assert final["choices"][0]["message"]["content"] == "Let me look. Found it. It is 42."
    assert final["choices"][0]["finish_reason"] == "stop"


def test_chat_final_with_earlier_text_and_no_content_of_its_own() -> None:
    answer = completion(client_call())
    final = chat_final(answer, ["Let me look."], [])
    assert final["choices"][0]["message"]["content"] == "Let me look."


def test_chat_final_leaves_a_length_finish_alone() -> None:
    answer = completion(recall_call(), finish="length")
    assert chat_final(answer, [], [])["choices"][0]["finish_reason"] == "length"


def test_chat_final_of_an_answer_without_a_choice_still_reports_every_rounds_usage() -> None:
    # A last round with nothing to say (a filtered answer): the client is billed for all.
    answer = {"id": "chatcmpl-2", "object": "chat.completion", "choices": []}
    final = chat_final(answer, ["Let me look."], [USAGE_1, USAGE_2])
    assert final == {**answer, "usage": USAGE_SUM}


def test_chat_text_is_what_the_answer_wrote() -> None:
    assert chat_text(completion(recall_call(), content="Let me look.")) == "Let me look."
    assert chat_text(completion(recall_call())) == ""
    assert chat_text({}) == ""


# --- the chat stream -------------------------------------------------------------------------


def chunk(delta: JSON, finish: str | None = None, response_id: str = "chatcmpl-1") -> JSON:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(usage: JSON, response_id: str = "chatcmpl-1") -> JSON:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [],
        "usage": usage,
    }


def recall_deltas(index: int, call_id: str, rid: str, response_id: str) -> list[JSON]:
    """A `context_recall` call split over three deltas, as providers stream it."""
    opened = {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": TOOL, "arguments": ""},
    }
    return [
        chunk({"tool_calls": [opened]}, response_id=response_id),
        chunk({"tool_calls": [{"index": index, "function": {"arguments": '{"id": "'}}]}),
        chunk({"tool_calls": [{"index": index, "function": {"arguments": f'{rid}"}}'}}]}),
    ]


def mixed_round() -> list[JSON]:
    """Text, the proxy's call at index 0, the client's at 1, the finish, the usage."""
    opened = {
        "index": 1,
        "id": "call_c",
        "type": "function",
        "function": {"name": "search", "arguments": ""},
    }
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me "}),
        chunk({"content": "look."}),
        *recall_deltas(0, "call_r", RID, "chatcmpl-1"),
        chunk({"tool_calls": [opened]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"q": "x"}'}}]}),
        chunk({}, finish="tool_calls"),
        usage_chunk(USAGE_1),
    ]


def recall_round() -> list[JSON]:
    """Text, then only the proxy's call, the finish and the usage."""
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me look."}),
        *recall_deltas(0, "call_r", RID, "chatcmpl-1"),
        chunk({}, finish="tool_calls"),
        usage_chunk(USAGE_1),
    ]


def answer_round() -> list[JSON]:
    """The next round, under the provider's new id: the answer, its finish, its usage."""
    return [
        chunk({"role": "assistant", "content": ""}, response_id="chatcmpl-2"),
        chunk({"content": " It is 42."}, response_id="chatcmpl-2"),
        chunk({}, finish="stop", response_id="chatcmpl-2"),
        usage_chunk(USAGE_2, response_id="chatcmpl-2"),
    ]


def fed(stream: ChatStream, chunks: list[JSON]) -> list[JSON]:
    return [out for c in chunks for out in stream.feed(c)]


def tool_deltas(chunks: list[JSON]) -> list[JSON]:
    return [
        call
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]


def test_chat_stream_never_relays_the_proxys_call() -> None:
    relayed = fed(ChatStream(), mixed_round())
    assert TOOL not in json.dumps(relayed)
    assert RID not in json.dumps(relayed)


def test_chat_stream_renumbers_the_clients_call_to_index_zero() -> None:
    relayed = fed(ChatStream(), mixed_round())
    calls = tool_deltas(relayed)
    assert [c["index"] for c in calls] == [0, 0]
    assert calls[0]["id"] == "call_c"
    assert calls[0]["function"]["name"] == "search"
    assert calls[1]["function"]["arguments"] == '{"q": "x"}'


def test_chat_stream_relays_the_text_and_holds_the_finish_and_usage() -> None:
    relayed = fed(ChatStream(), mixed_round())
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in relayed)
    assert text == "Let me look."
    assert all(c["choices"] for c in relayed)  # no usage chunk yet
    assert all(c["choices"][0]["finish_reason"] is None for c in relayed)
    assert all(c.get("usage") is None for c in relayed)


def test_chat_stream_ends_a_mixed_round_with_the_clients_finish() -> None:
    stream = ChatStream()
    fed(stream, mixed_round())
    assert stream.end_round() == ([Call("call_r", RID)], True)
    closing = stream.finish(with_usage=True)
    assert [c["choices"][0]["finish_reason"] for c in closing if c["choices"]] == ["tool_calls"]
    assert closing[-1]["choices"] == []
    assert closing[-1]["usage"] == USAGE_1


def test_chat_stream_continued_builds_the_next_body() -> None:
    stream = ChatStream()
    fed(stream, recall_round())
    ours, theirs = stream.end_round()
    assert (ours, theirs) == ([Call("call_r", RID)], False)
    body = {"model": "m", "stream": True, "messages": [user("what was the token?")]}
    asked = stream.continued(body, [(ours[0], "TOKEN=42")])
    assert asked["stream"] is True
    assert asked["messages"] == [
        user("what was the token?"),
        {"role": "assistant", "content": "Let me look.", "tool_calls": [recall_call()]},
        {"role": "tool", "tool_call_id": "call_r", "content": "TOKEN=42"},
    ]


def two_rounds(*, with_usage: bool) -> tuple[ChatStream, list[JSON], list[JSON]]:
    """Both rounds fed: the stream, what was relayed as they came, what `finish` gave."""
    stream = ChatStream()
    relayed = fed(stream, recall_round())
    ours, _ = stream.end_round()
    stream.continued({"messages": [user("q")]}, [(ours[0], "TOKEN=42")])
    relayed += fed(stream, answer_round())
    assert stream.end_round() == ([], False)
    return stream, relayed, stream.finish(with_usage=with_usage)


def test_chat_stream_later_rounds_continue_the_first_rounds_response() -> None:
    _, relayed, closing = two_rounds(with_usage=True)
    assert {c["id"] for c in [*relayed, *closing]} == {"chatcmpl-1"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in relayed)
    assert text == "Let me look. It is 42."


def test_chat_stream_finish_gives_one_finish_and_one_summed_usage() -> None:
    stream, _, closing = two_rounds(with_usage=True)
    finishes = [c for c in closing if c["choices"]]
    assert len(finishes) == 1
    assert finishes[0]["choices"][0]["finish_reason"] == "stop"
    assert finishes[0]["choices"][0]["delta"] == {}
    usages = [c for c in closing if not c["choices"]]
    assert len(usages) == 1
    assert usages[0]["usage"] == USAGE_SUM
    assert usages[0]["id"] == "chatcmpl-1"
    assert usages[0]["model"] == "m"
    assert stream.usage == USAGE_SUM
    assert stream.first_usage == USAGE_1


def test_chat_stream_finish_without_usage_gives_no_usage_chunk() -> None:
    _, _, closing = two_rounds(with_usage=False)
    assert len(closing) == 1
    assert closing[0]["choices"][0]["finish_reason"] == "stop"
    assert closing[0].get("usage") is None


def test_chat_stream_finish_says_stop_when_only_the_proxys_calls_were_left() -> None:
    # The last round allowed may still call the proxy's tool (its calls then go unanswered).
    stream = ChatStream()
    fed(stream, recall_round())
    stream.end_round()
    closing = stream.finish(with_usage=False)
    assert [c["choices"][0]["finish_reason"] for c in closing] == ["stop"]


def test_chat_stream_relays_what_a_finish_chunk_carried() -> None:
    stream = ChatStream()
    relayed = stream.feed(chunk({"content": "bye"}, finish="stop"))
    assert [c["choices"][0] for c in relayed] == [
        {"index": 0, "delta": {"content": "bye"}, "finish_reason": None}
    ]
    assert stream.finish(with_usage=True)[0]["choices"][0]["finish_reason"] == "stop"


def test_chat_stream_keeps_an_indexless_recall_call_from_the_client() -> None:
    stream = ChatStream()
    opened = {"id": "call_r", "type": "function", "function": {"name": TOOL, "arguments": ""}}
    chunks = [
        chunk({"role": "assistant", "tool_calls": [opened]}),
        chunk({"tool_calls": [{"function": {"arguments": f'{{"id": "{RID}"}}'}}]}),
        chunk({}, finish="stop"),
    ]
    relayed = fed(stream, chunks)
    assert TOOL not in json.dumps(relayed)
    assert stream.end_round() == ([Call("call_r", RID)], False)


def test_chat_stream_relays_an_indexless_client_call() -> None:
    call = {"id": "call_c", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    relayed = ChatStream().feed(chunk({"tool_calls": [call]}))
    assert [c["id"] for c in tool_deltas(relayed)] == ["call_c"]


def test_chat_stream_takes_usage_from_a_chunk_that_has_choices() -> None:
    stream = ChatStream()
    last = {**chunk({}, finish="stop"), "usage": USAGE_1}
    assert stream.feed(last) == []
    closing = stream.finish(with_usage=True)
    assert closing[0].get("usage") is None
    assert closing[-1]["usage"] == USAGE_1


def test_chat_stream_names_the_response_after_the_first_id_it_sees() -> None:
    # A chunk without an id (some compatible servers send one) is relayed without one; the
    # first id that comes names the response every later round continues.
    stream = ChatStream()
    bare = {k: v for k, v in chunk({"role": "assistant", "content": ""}).items() if k != "id"}
    relayed = stream.feed(bare)
    relayed += fed(stream, recall_round()[1:])
    ours, _ = stream.end_round()
    stream.continued({"messages": [user("q")]}, [(ours[0], "TOKEN=42")])
    relayed += fed(stream, answer_round())
    assert "id" not in relayed[0]
    assert {c["id"] for c in relayed[1:]} == {"chatcmpl-1"}
    assert stream.response_id == "chatcmpl-1"


def test_chat_stream_drops_a_malformed_tool_call_delta() -> None:
    stream = ChatStream()
    assert stream.feed(chunk({"tool_calls": ["not a call"]})) == []
    assert stream.end_round() == ([], False)


def test_chat_stream_answers_the_proxys_call_under_an_id_sent_after_its_name() -> None:
    # The call opens with its name only; its id and arguments follow in later deltas.
    opened = {"index": 0, "type": "function", "function": {"name": TOOL}}
    rest = {"index": 0, "id": "call_r", "function": {"arguments": json.dumps({"id": RID})}}
    stream = ChatStream()
    relayed = fed(stream, [chunk({"tool_calls": [opened]}), chunk({"tool_calls": [rest]})])
    assert relayed == []
    assert stream.end_round() == ([Call("call_r", RID)], False)
    asked = stream.continued({"messages": []}, [(Call("call_r", RID), "TOKEN=42")])
    assert asked["messages"][0]["tool_calls"] == [recall_call()]


def test_chat_stream_cut_off_before_its_finish_closes_with_the_usage_alone() -> None:
    stream = ChatStream()
    fed(stream, [chunk({"content": "Half an ans"}), usage_chunk(USAGE_1)])
    closing = stream.finish(with_usage=True)
    assert [(c["id"], c["choices"], c["usage"]) for c in closing] == [("chatcmpl-1", [], USAGE_1)]
    assert stream.finish(with_usage=False) == []


# --- the Responses API -----------------------------------------------------------------------

REASONING: JSON = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc"}
RECALL_ITEM: JSON = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_r",
    "name": TOOL,
    "arguments": json.dumps({"id": RID}),
}
CLIENT_ITEM: JSON = {
    "id": "fc_2",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_c",
    "name": "search",
    "arguments": "{}",
}
MESSAGE: JSON = {
    "id": "msg_2",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It is 42.", "annotations": []}],
}
R_USAGE_1: JSON = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 40},
    "output_tokens": 10,
    "output_tokens_details": {"reasoning_tokens": 6},
    "total_tokens": 110,
}
R_USAGE_2: JSON = {
    "input_tokens": 150,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 155,
}
R_USAGE_SUM: JSON = {
    "input_tokens": 250,
    "input_tokens_details": {"cached_tokens": 140},
    "output_tokens": 15,
    "output_tokens_details": {"reasoning_tokens": 6},
    "total_tokens": 265,
}


def response(*output: JSON, usage: JSON | None = None, response_id: str = "resp_1") -> JSON:
    answer: JSON = {"id": response_id, "object": "response", "output": list(output)}
    if usage is not None:
        answer["usage"] = usage
    return answer


def test_responses_calls_of_an_output_calling_only_the_proxy() -> None:
    assert responses_calls(response(REASONING, RECALL_ITEM)) == ([Call("call_r", RID)], False)


def test_responses_calls_of_an_output_calling_the_client_too() -> None:
    assert responses_calls(response(RECALL_ITEM, CLIENT_ITEM)) == ([Call("call_r", RID)], True)


@pytest.mark.parametrize("kind", ["custom_tool_call", "local_shell_call", "computer_call"])
def test_responses_calls_count_the_clients_other_calls(kind: str) -> None:
    assert responses_calls(response({"type": kind, "call_id": "x"})) == ([], True)


def test_responses_calls_of_an_output_calling_nothing() -> None:
    assert responses_calls(response(MESSAGE)) == ([], False)
    assert responses_calls(response({"type": "web_search_call", "id": "ws_1"})) == ([], False)
    assert responses_calls({}) == ([], False)


def test_responses_continued_makes_a_string_input_a_user_item() -> None:
    body = {"model": "m", "input": "what was the token?", "store": False}
    reasoning = {**REASONING, "status": "completed"}
    asked = responses_continued(body, [reasoning, RECALL_ITEM], [(Call("call_r", RID), "42")])
    assert asked["store"] is False
    assert asked["input"] == [
        {"role": "user", "content": "what was the token?"},
        REASONING,  # an output's status left out: the provider rejects it on input
        RECALL_ITEM,
        {"type": "function_call_output", "call_id": "call_r", "output": "42"},
    ]


def test_responses_continued_keeps_a_list_input_and_carries_every_output_item() -> None:
    given = [{"role": "user", "content": [{"type": "input_text", "text": "q"}]}]
    body = {"input": given}
    output = [MESSAGE, RECALL_ITEM]
    asked = responses_continued(body, output, [(Call("call_r", RID), "42")])
    assert asked["input"][:3] == [*given, MESSAGE, RECALL_ITEM]
    assert asked["input"][3]["type"] == "function_call_output"
    assert body["input"] == given  # not changed


def test_responses_continued_without_input() -> None:
    asked = responses_continued({}, [RECALL_ITEM], [(Call("call_r", RID), "42")])
    assert [i.get("type") for i in asked["input"]] == ["function_call", "function_call_output"]


def test_responses_final_strips_the_proxys_call_and_its_reasoning() -> None:
    answer = response(MESSAGE, REASONING, RECALL_ITEM, usage=R_USAGE_2)
    final = responses_final(answer, [], [R_USAGE_1, R_USAGE_2])
    assert final["output"] == [MESSAGE]
    assert final["usage"] == R_USAGE_SUM


def test_responses_final_puts_earlier_messages_first_and_keeps_the_clients_calls() -> None:
    earlier_message = {**MESSAGE, "id": "msg_1"}
    earlier = earlier_output([REASONING, earlier_message, RECALL_ITEM])
    assert earlier == [earlier_message]
    answer = response(REASONING, CLIENT_ITEM)
    final = responses_final(answer, earlier, [None, None])
    assert final["output"] == [earlier_message, REASONING, CLIENT_ITEM]
    assert "usage" not in final


def test_responses_final_of_a_response_without_output_still_reports_every_rounds_usage() -> None:
    answer = {"id": "resp_2", "object": "response", "status": "failed", "output": None}
    final = responses_final(answer, [MESSAGE], [R_USAGE_1, R_USAGE_2])
    assert final == {**answer, "usage": R_USAGE_SUM}


def test_a_response_echoes_only_the_clients_tools() -> None:
    client = {"type": "function", "name": "search", "parameters": {}}
    ours = {"type": "function", "name": TOOL, "parameters": {}}
    echoed = response(MESSAGE) | {"tools": [client, ours]}
    assert without_our_tool(echoed) == {**echoed, "tools": [client]}
    assert without_our_tool(response(MESSAGE)) == response(MESSAGE)  # it echoed none


# --- the Responses stream --------------------------------------------------------------------


def numbered() -> Iterator[int]:
    return itertools.count()


def event(kind: str, sequence: Iterator[int], **fields: Any) -> JSON:
    return {"type": kind, "sequence_number": next(sequence), **fields}


def state(response_id: str, status: str = "in_progress") -> JSON:
    return {"id": response_id, "object": "response", "status": status, "output": []}


def recall_response_round() -> list[JSON]:
    """Reasoning, then the proxy's call streamed, then the completion with usage."""
    seq = numbered()
    arguments = RECALL_ITEM["arguments"]
    return [
        event("response.created", seq, response=state("resp_1")),
        event("response.in_progress", seq, response=state("resp_1")),
        event(
            "response.output_item.added",
            seq,
            output_index=0,
            item={**REASONING, "status": "in_progress"},
        ),
        event("response.output_item.done", seq, output_index=0, item=REASONING),
        event(
            "response.output_item.added",
            seq,
            output_index=1,
            item={**RECALL_ITEM, "status": "in_progress", "arguments": ""},
        ),
        event(
            "response.function_call_arguments.delta",
            seq,
            output_index=1,
            item_id="fc_1",
            delta=arguments[:7],
        ),
        event(
            "response.function_call_arguments.delta",
            seq,
            output_index=1,
            item_id="fc_1",
            delta=arguments[7:],
        ),
        event(
            "response.function_call_arguments.done",
            seq,
            output_index=1,
            item_id="fc_1",
            arguments=arguments,
        ),
        event("response.output_item.done", seq, output_index=1, item=RECALL_ITEM),
        event(
            "response.completed",
            seq,
            response={
                **state("resp_1", "completed"),
                "output": [REASONING, RECALL_ITEM],
                "usage": R_USAGE_1,
            },
        ),
    ]


def message_response_round() -> list[JSON]:
    """The next round, under the provider's new id: a message streamed, the completion."""
    seq = numbered()
    part = MESSAGE["content"][0]
    at: JSON = {"output_index": 0, "item_id": "msg_2", "content_index": 0}
    return [
        event("response.created", seq, response=state("resp_2")),
        event("response.in_progress", seq, response=state("resp_2")),
        event(
            "response.output_item.added",
            seq,
            output_index=0,
            item={**MESSAGE, "status": "in_progress", "content": []},
        ),
        event("response.content_part.added", seq, **at, part={**part, "text": ""}),
        event("response.output_text.delta", seq, **at, delta="It is "),
        event("response.output_text.delta", seq, **at, delta="42."),
        event("response.output_text.done", seq, **at, text="It is 42."),
        event("response.content_part.done", seq, **at, part=part),
        event("response.output_item.done", seq, output_index=0, item=MESSAGE),
        event(
            "response.completed",
            seq,
            response={
                **state("resp_2", "completed"),
                "output": [MESSAGE],
                "usage": R_USAGE_2,
            },
        ),
    ]


def fed_responses(stream: ResponsesStream, events: list[JSON]) -> list[JSON]:
    return [out for e in events for out in stream.feed(e)]


def test_responses_stream_relays_only_the_opening_of_a_recall_round() -> None:
    stream = ResponsesStream()
    relayed = fed_responses(stream, recall_response_round())
    assert [e["type"] for e in relayed] == ["response.created", "response.in_progress"]
    assert stream.response_id == "resp_1"


def test_responses_stream_end_round_and_continued() -> None:
    stream = ResponsesStream()
    fed_responses(stream, recall_response_round())
    ours, theirs = stream.end_round()
    assert (ours, theirs) == ([Call("call_r", RID)], False)
    asked = stream.continued({"model": "m", "input": "the token?"}, [(ours[0], "TOKEN=42")])
    assert asked["input"] == [
        {"role": "user", "content": "the token?"},
        REASONING,
        RECALL_ITEM,
        {"type": "function_call_output", "call_id": "call_r", "output": "TOKEN=42"},
    ]
    assert stream.first_usage == R_USAGE_1


def two_response_rounds() -> tuple[ResponsesStream, list[JSON]]:
    stream = ResponsesStream()
    relayed = fed_responses(stream, recall_response_round())
    ours, _ = stream.end_round()
    stream.continued({"input": "the token?"}, [(ours[0], "TOKEN=42")])
    relayed += fed_responses(stream, message_response_round())
    assert stream.end_round() == ([], False)
    return stream, [*relayed, *stream.finish()]


def test_responses_stream_client_sees_one_response_over_two_rounds() -> None:
    _, relayed = two_response_rounds()
    kinds = [e["type"] for e in relayed]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds.count("response.created") == 1
    assert kinds.count("response.in_progress") == 1
    assert kinds.count("response.completed") == 1
    assert kinds[-1] == "response.completed"
    assert relayed[0]["response"]["id"] == "resp_1"
    # Round one's reasoning went with the proxy's call; nothing of it reaches the client.
    assert "rs_1" not in json.dumps(relayed)
    assert TOOL not in json.dumps(relayed)


def test_responses_stream_numbers_indexes_and_sequence_for_the_client() -> None:
    _, relayed = two_response_rounds()
    assert [e["sequence_number"] for e in relayed] == list(range(len(relayed)))
    indexed = [e for e in relayed if "output_index" in e]
    assert indexed
    assert {e["output_index"] for e in indexed} == {0}
    text = "".join(e["delta"] for e in relayed if e["type"] == "response.output_text.delta")
    assert text == "It is 42."


def test_responses_stream_completes_with_the_first_id_the_clients_items_and_all_usage() -> None:
    stream, relayed = two_response_rounds()
    completed = relayed[-1]["response"]
    assert completed["id"] == "resp_1"
    assert completed["status"] == "completed"
    assert completed["output"] == [MESSAGE]
    assert completed["usage"] == R_USAGE_SUM
    assert stream.usage == R_USAGE_SUM


def test_responses_stream_relays_reasoning_before_the_clients_item() -> None:
    seq = numbered()
    events = [
        event("response.created", seq, response=state("resp_1")),
        event("response.output_item.added", seq, output_index=0, item=REASONING),
        event("response.output_item.done", seq, output_index=0, item=REASONING),
        event("response.output_item.added", seq, output_index=1, item=CLIENT_ITEM),
        event("response.output_item.done", seq, output_index=1, item=CLIENT_ITEM),
        event(
            "response.completed",
            seq,
            response={**state("resp_1", "completed"), "output": [REASONING, CLIENT_ITEM]},
        ),
    ]
    stream = ResponsesStream()
    relayed = fed_responses(stream, events)
    assert stream.end_round() == ([], True)
    relayed += stream.finish()
    assert [(e["type"], e.get("output_index")) for e in relayed] == [
        ("response.created", None),
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.output_item.done", 1),
        ("response.completed", None),
    ]
    assert relayed[-1]["response"]["output"] == [REASONING, CLIENT_ITEM]
    assert "usage" not in relayed[-1]["response"]


def test_responses_stream_finish_releases_a_reasoning_item_still_held() -> None:
    seq = numbered()
    stream = ResponsesStream()
    fed_responses(
        stream,
        [
            event("response.created", seq, response=state("resp_1")),
            event("response.output_item.added", seq, output_index=0, item=REASONING),
            event("response.output_item.done", seq, output_index=0, item=REASONING),
        ],
    )
    closing = stream.finish()
    assert [e["type"] for e in closing] == [
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert [e["sequence_number"] for e in closing] == [1, 2]


def test_responses_stream_relays_an_event_of_no_output_item_in_sequence() -> None:
    seq = numbered()
    stream = ResponsesStream()
    events = [
        event("response.created", seq, response=state("resp_1")),
        event("response.output_item.added", seq, output_index=0, item=RECALL_ITEM),
        event("error", seq, code="server_error", message="the model stopped"),
    ]
    relayed = fed_responses(stream, events)
    assert [(e["type"], e["sequence_number"]) for e in relayed] == [
        ("response.created", 0),
        ("error", 1),
    ]
    assert relayed[1]["message"] == "the model stopped"


def test_responses_stream_without_sequence_numbers_or_opening_keeps_the_providers_own() -> None:
    # A compatible server that numbers no events and opens with no `response.created`: none
    # is made up, and the completion keeps the id the provider gave it.
    events: list[JSON] = [
        {"type": "response.output_item.added", "output_index": 0, "item": MESSAGE},
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
        {"type": "response.completed", "response": state("resp_9", "completed")},
    ]
    stream = ResponsesStream()
    relayed = fed_responses(stream, events)
    assert stream.end_round() == ([], False)
    relayed += stream.finish()
    assert all("sequence_number" not in e for e in relayed)
    assert [e["type"] for e in relayed] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert relayed[-1]["response"]["id"] == "resp_9"
    assert relayed[-1]["response"]["output"] == [MESSAGE]


def test_responses_stream_cut_off_before_its_completion_still_names_the_proxys_call() -> None:
    stream = ResponsesStream()
    fed_responses(stream, recall_response_round()[:-1])
    assert stream.end_round() == ([Call("call_r", RID)], False)
    assert stream.first_usage is None
    assert stream.finish() == []


def test_responses_stream_relays_a_closing_event_without_a_response_numbered() -> None:
    seq = numbered()
    stream = ResponsesStream()
    relayed = fed_responses(stream, [event("response.created", seq, response=state("resp_1"))])
    fed_responses(stream, [event("response.failed", seq)])
    stream.end_round()
    relayed += stream.finish()
    assert [(e["type"], e["sequence_number"]) for e in relayed] == [
        ("response.created", 0),
        ("response.failed", 1),
    ]
    assert "response" not in relayed[-1]


def test_a_refusal_with_no_round_asked_changes_nothing() -> None:
    chat, responses = ChatStream(), ResponsesStream()
    chat.refused()
    responses.refused()
    assert chat.finish(with_usage=True) == []
    assert responses.finish() == []


def test_a_chat_streams_text_and_role_chunks_go_on_as_the_very_chunks_received() -> None:
    """The relay then sends the provider's own bytes for them; their text is still kept for
    a round that goes on."""
    stream = ChatStream()
    role = {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    words = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
        for w in ("Port ", "8080.")
    ]
    for chunk in (role, *words):
        assert stream.feed(chunk)[0] is chunk
    body = {"messages": [user("which port?")]}
    asked = stream.continued(body, [])
    assert asked["messages"][-1]["content"] == "Port 8080."
