"""The prompt's size from a Messages response's usage, whole or streamed: uncached input
plus what the cache read and wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.anthropic_usage import (
    StreamUsage,
    calibration_usage,
    prompt_tokens,
    response_usage,
    stream_usage,
)
from proxy.core.sse import event_data

USAGE = {
    "input_tokens": 120,
    "cache_creation_input_tokens": 2_000,
    "cache_read_input_tokens": 30_000,
    "output_tokens": 55,
}


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        (USAGE, 32_120),
        ({"input_tokens": 9}, 9),
        ({"input_tokens": 9, "cache_read_input_tokens": None}, 9),
        ({"input_tokens": 9, "cache_creation_input_tokens": -1}, 9),
        ({"output_tokens": 5}, None),
        ({"input_tokens": True}, None),
        ({"input_tokens": "9"}, None),
    ],
)
def test_the_prompt_is_input_plus_cache_reads_and_writes(usage: Any, tokens: int | None) -> None:
    assert prompt_tokens(usage) == tokens


def test_calibration_usage_adds_the_prompt_and_keeps_every_field() -> None:
    assert calibration_usage(USAGE) == {**USAGE, "prompt_tokens": 32_120}
    assert calibration_usage({"output_tokens": 5}) == {"output_tokens": 5}


def test_a_response_s_usage() -> None:
    response = {"type": "message", "role": "assistant", "content": [], "usage": USAGE}
    assert response_usage(response) == {**USAGE, "prompt_tokens": 32_120}
    assert response_usage({"type": "error", "error": {}}) is None
    assert response_usage([1]) is None


def sse(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


START_USAGE = {**USAGE, "output_tokens": 1}
STREAM = b"".join(
    [
        sse("message_start", message={"id": "msg_1", "role": "assistant", "usage": START_USAGE}),
        sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        sse("ping"),
        sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        sse("content_block_stop", index=0),
        sse(
            "message_delta",
            delta={"stop_reason": "end_turn"},
            usage={"output_tokens": 55, "cache_read_input_tokens": None},
        ),
        sse("message_stop"),
    ]
)


def events() -> list[dict[str, Any]]:
    parsed = [event_data(chunk) for chunk in STREAM.split(b"\n\n")]
    return [event for event in parsed if event is not None]


def test_a_stream_s_usage_is_its_start_updated_by_its_delta() -> None:
    assert stream_usage(events()) == {**USAGE, "prompt_tokens": 32_120}


def test_newer_servers_give_the_input_in_the_delta_too() -> None:
    start = {
        "type": "message_start",
        "message": {"usage": {"input_tokens": 10, "output_tokens": 1}},
    }
    delta = {"type": "message_delta", "usage": {"input_tokens": 12, "output_tokens": 40}}
    assert stream_usage([start, delta]) == {
        "input_tokens": 12,
        "output_tokens": 40,
        "prompt_tokens": 12,
    }


def test_a_stream_with_no_usage_has_none() -> None:
    tap = StreamUsage()
    assert tap.usage is None
    tap.feed({"type": "message_start", "message": "odd"})
    tap.feed({"type": "message_delta", "usage": None})
    tap.feed({"type": "error", "error": {"type": "overloaded_error"}})
    assert tap.usage is None
