"""The proxy's answers to a compaction request, in OpenAI's shapes (read back by the SDK's
types), and the event stream of a triggered one."""

from __future__ import annotations

import json

from openai.types.responses import CompactedResponse, Response, ResponseCompactionItem

from proxy.core.compaction_replies import (
    Usage,
    compacted_response,
    sse,
    triggered_events,
    triggered_response,
)

ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "x", "created_by": "p"}
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def test_usage_counts_the_summary_written_for_it() -> None:
    assert Usage(100, 40, 30).to_json() == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 130,
    }
    assert Usage().to_json()["total_tokens"] == 0


def test_the_compacted_response_is_the_sdks() -> None:
    body = compacted_response("resp_1", 1700000000, [USER, ITEM], Usage(10, 0, 5))
    # The SDK's output union has no user message (OpenAI's answer has them all the same, and
    # the client reads them leniently): the rest is checked strictly.
    parsed = CompactedResponse.model_validate({**body, "output": body["output"][1:]})
    assert parsed.object == "response.compaction"
    assert parsed.output == [ResponseCompactionItem.model_validate(ITEM)]
    assert parsed.usage.total_tokens == 15
    assert body["output"][0] is USER


def test_the_triggered_response_echoes_the_request_and_holds_the_item_alone() -> None:
    request = {"model": "m", "instructions": "Be brief.", "tools": [], "store": False}
    body = triggered_response(request, "resp_1", 1700000000, ITEM, Usage())
    parsed = Response.model_validate(body)
    assert [item.type for item in parsed.output] == ["compaction"]
    assert (parsed.model, parsed.instructions, parsed.status) == ("m", "Be brief.", "completed")
    assert body["store"] is False
    assert body["reasoning"] == {"effort": None}
    reasoned = triggered_response({"reasoning": {"effort": "high"}}, "r", 0, ITEM, Usage())
    assert reasoned["reasoning"] == {"effort": "high"}


def test_the_stream_is_openais_sequence_numbered_from_zero() -> None:
    response = triggered_response({"model": "m"}, "resp_1", 0, ITEM, Usage())
    events = list(triggered_events(response))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(6))
    assert events[0]["response"]["output"] == []
    assert events[0]["response"]["usage"] is None
    assert events[3] == {
        "type": "response.compaction.compacting",
        "item_id": "cmp_1",
        "output_index": 0,
        "sequence_number": 3,
    }
    assert events[4]["item"] == ITEM
    assert events[-1]["response"] == response


def test_an_event_is_framed_as_the_responses_api_frames_it() -> None:
    framed = sse({"type": "response.created", "sequence_number": 0})
    name, data, end = framed.split(b"\n", 2)
    assert name == b"event: response.created"
    assert json.loads(data.removeprefix(b"data: ")) == {
        "type": "response.created",
        "sequence_number": 0,
    }
    assert end == b"\n"
