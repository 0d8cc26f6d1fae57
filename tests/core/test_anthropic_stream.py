"""The Messages stream tap: every event relayed unchanged, the usage of two read."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.anthropic_stream import MessagesTap
from proxy.core.sse import opening_error
from tests.core.splits import ends_an_event, splits


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


START = event(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 2000,
            "output_tokens": 1,
        },
    },
)
STREAM = b"".join(
    [
        START,
        event("ping"),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        event("content_block_stop", index=0),
        event(
            "message_delta",
            delta={"stop_reason": "end_turn"},
            usage={"output_tokens": 7, "input_tokens": None},
        ),
        event("message_stop"),
    ]
)


def test_every_event_is_relayed_and_the_prompt_is_input_plus_the_cache() -> None:
    tap = MessagesTap()
    assert tap.usage is None
    out = tap.feed(STREAM) + tap.flush()
    assert out == STREAM
    assert tap.usage is not None
    assert tap.usage["prompt_tokens"] == 12 + 300 + 2000
    assert tap.usage["output_tokens"] == 7


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=6))
def test_any_split_gives_the_same_bytes_and_usage(cuts: list[int]) -> None:
    tap = MessagesTap()
    bounds = [0, *sorted(cuts), len(STREAM)]
    out = b"".join(tap.feed(STREAM[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + tap.flush() == STREAM
    assert tap.usage is not None
    assert tap.usage["prompt_tokens"] == 2312


def test_an_unterminated_tail_and_a_usage_word_in_text_are_carried() -> None:
    tap = MessagesTap()
    text = event(
        "content_block_delta", index=0, delta={"type": "text_delta", "text": '"message_delta"'}
    )
    odd = b'event: message_delta\ndata: "message_delta" is no object\n\n'
    assert tap.feed(text + odd + b"event: message_stop") == text + odd
    assert tap.flush() == b"event: message_stop"
    assert tap.usage is None


def test_an_opening_error_event_is_told_as_a_chat_streams() -> None:
    error = event("error", error={"type": "overloaded_error", "message": "Overloaded"})
    assert opening_error(error, responses=False) is True
    assert opening_error(START, responses=False) is False


@given(st.lists(st.integers(min_value=0, max_value=400), max_size=8), st.booleans())
def test_text_deltas_alone_go_on_whole_and_event_by_event(cuts: list[int], crlf: bool) -> None:
    """Reads that hold no usage event are passed on up to their last complete event."""
    deltas = [
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": f"w{n} "})
        for n in range(8)
    ]
    stream = b"".join(deltas).replace(b"\n", b"\r\n") if crlf else b"".join(deltas)
    bounds = [0, *sorted(c for c in cuts if c <= len(stream)), len(stream)]
    tap = MessagesTap()
    relayed = [tap.feed(stream[a:b]) for a, b in itertools.pairwise(bounds)]
    assert b"".join(relayed) + tap.flush() == stream
    assert all(out.endswith((b"\n\n", b"\n\r\n")) for out in relayed if out)
    assert tap.usage is None


DELTAS = b"".join(
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": f"w{n} "})
    for n in range(3)
)


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize(
    "stream",
    [STREAM, START + DELTAS + STREAM[len(START) :], DELTAS],
    ids=["usage-events", "deltas-between-them", "deltas-only"],
)
def test_every_split_relays_the_same_events_and_usage(stream: bytes, crlf: bool) -> None:
    # Each split of the reads a socket could make, fed by hand: a read of text deltas only
    # (after `message_start`, or with no usage event at all), a usage event cut in two, ...
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    whole = MessagesTap()
    expected = whole.feed(stream) + whole.flush()
    assert expected == stream
    for pieces in splits(stream):
        tap = MessagesTap()
        relayed = [tap.feed(piece) for piece in pieces]
        assert b"".join(relayed) + tap.flush() == stream
        assert all(ends_an_event(out) for out in relayed if out)
        assert tap.usage == whole.usage
