"""Reading a relayed stream: events kept whole, usage found, the usage chunk dropped."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import jsoncodec
from proxy.core.sse import (
    StreamTap,
    event_data,
    opening_error,
    usage_requested_in,
    with_usage_requested,
)
from tests.core.splits import ends_an_event, splits

USAGE = {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125}


def event(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


CHUNKS = [
    event({"choices": [{"delta": {"role": "assistant"}}], "usage": None}),
    b": keep-alive\n\n",
    event({"choices": [{"delta": {"content": "hi"}}], "usage": None}),
    event({"choices": [], "usage": USAGE}),
    b"data: [DONE]\n\n",
]
STREAM = b"".join(CHUNKS)


def relay(tap: StreamTap, pieces: list[bytes]) -> bytes:
    return b"".join(tap.feed(piece) for piece in pieces) + tap.flush()


def test_usage_chunk_dropped_and_usage_kept() -> None:
    tap = StreamTap(strip_usage_chunk=True)
    assert relay(tap, [STREAM]) == STREAM.replace(CHUNKS[3], b"")
    assert tap.usage == USAGE


def test_usage_chunk_kept_when_the_client_asked() -> None:
    tap = StreamTap(strip_usage_chunk=False)
    assert relay(tap, [STREAM]) == STREAM
    assert tap.usage == USAGE


def test_usage_on_a_content_chunk_is_read_but_kept() -> None:
    last = event({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": USAGE})
    tap = StreamTap(strip_usage_chunk=True)
    assert relay(tap, [last]) == last
    assert tap.usage == USAGE


def test_crlf_events_and_unterminated_tail() -> None:
    stream = b'data: {"choices": [], "usage": {"prompt_tokens": 1}}\r\n\r\ndata: [DONE]'
    tap = StreamTap(strip_usage_chunk=True)
    assert relay(tap, [stream]) == b"data: [DONE]"
    assert tap.usage == {"prompt_tokens": 1}


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_bytes(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    for strip in (True, False):
        tap = StreamTap(strip_usage_chunk=strip)
        expected = STREAM.replace(CHUNKS[3], b"") if strip else STREAM
        assert relay(tap, pieces) == expected
        assert tap.usage == USAGE


def test_event_data() -> None:
    assert event_data(event({"a": 1})) == {"a": 1}
    assert event_data(b"data: [DONE]\n\n") is None
    assert event_data(b": comment\n\n") is None
    assert event_data(b"data: [1]\n\n") is None
    assert event_data(b"data: \xff\n\n") is None
    assert event_data(b'event: x\ndata: {"a":\ndata: 2}\n\n') == {"a": 2}


def typed(kind: str, **data: object) -> bytes:
    """A Responses API event: an `event:` line and its JSON."""
    body = json.dumps({"type": kind, "sequence_number": 0, **data}).encode()
    return b"event: " + kind.encode() + b"\ndata: " + body + b"\n\n"


OVERFLOW = {"code": "context_length_exceeded", "message": "Your input exceeds the context window"}


def test_a_chat_stream_opens_with_an_error_in_its_first_event() -> None:
    assert opening_error(b"data: {}", responses=False) is None  # not complete yet
    assert opening_error(event({"error": OVERFLOW}) + b"data: x", responses=False) is True
    assert opening_error(CHUNKS[0], responses=False) is False
    assert opening_error(b": keep-alive\n\n", responses=False) is False


def test_a_responses_stream_tells_after_its_opening_events() -> None:
    opening = typed("response.created") + typed("response.in_progress") + b": ping\n\n"
    assert opening_error(opening, responses=True) is None
    failed = typed("response.failed", response={"status": "failed", "error": OVERFLOW})
    assert opening_error(opening + failed, responses=True) is True
    assert opening_error(opening + typed("error", **OVERFLOW), responses=True) is True
    assert opening_error(opening + event({"error": OVERFLOW}), responses=True) is True
    started = typed("response.output_item.added", item={"type": "message"})
    assert opening_error(opening + started, responses=True) is False


def test_the_tap_keeps_a_responses_streams_usage_and_relays_every_event() -> None:
    usage = {"input_tokens": 120, "output_tokens": 5, "total_tokens": 125}
    events = [
        typed("response.created", response={"status": "in_progress", "usage": None}),
        typed("response.output_text.delta", delta='the "usage" field'),
        typed("response.completed", response={"status": "completed", "usage": usage}),
    ]
    tap = StreamTap(strip_usage_chunk=True)
    relayed = b"".join(tap.feed(chunk) for chunk in events) + tap.flush()
    assert relayed == b"".join(events)
    assert tap.usage == usage


def test_usage_requested_only_when_absent() -> None:
    body = {"stream": True}
    asked, added = with_usage_requested(body)
    assert (asked["stream_options"], added) == ({"include_usage": True}, True)
    assert body == {"stream": True}  # the client's dict is not changed
    kept = {"stream_options": {"include_usage": True}}
    assert with_usage_requested(kept) == (kept, False)
    merged, added = with_usage_requested({"stream_options": {"include_obfuscation": False}})
    assert merged["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert added


def test_the_word_usage_in_content_is_not_usage() -> None:
    chunk = event({"choices": [{"delta": {"content": 'say "usage": 5'}}]})
    odd = event({"choices": [], "usage": 7})
    tap = StreamTap(strip_usage_chunk=True)
    assert relay(tap, [chunk, odd]) == chunk + odd
    assert tap.usage is None


def test_an_event_that_only_mentions_usage_is_relayed_and_not_read() -> None:
    broken = b'data: {"usage": {"prompt_tokens": \n\n'  # cut off: not JSON
    tap = StreamTap(strip_usage_chunk=True)
    assert tap.feed(broken) == broken
    assert tap.usage is None


_EVENTS = st.sampled_from(
    [
        event({"choices": [{"delta": {"content": "hi"}}], "usage": None}),
        event({"choices": [{"delta": {"content": 'say "usage": 5'}}]}),
        b'data: {"choices":[{"delta":{"content":"x"}}],"usage" : null}\r\n\r\n',
        b": keep-alive\n\n",
        b"\n",  # a stray line break between events
        b"data: [DONE]\n\n",
    ]
)


@given(st.lists(_EVENTS, max_size=10), st.lists(st.integers(min_value=0, max_value=400)))
def test_a_stream_without_a_usage_chunk_goes_on_whole_and_event_by_event(
    events: list[bytes], cuts: list[int]
) -> None:
    """Whatever the reads, the bytes relayed are the stream's, and a read's relay ends where
    an event does (a partial event waits for its end)."""
    stream = b"".join(events)
    points = sorted({cut for cut in cuts if cut <= len(stream)})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    tap = StreamTap(strip_usage_chunk=True)
    relayed = [tap.feed(piece) for piece in pieces]
    assert b"".join(relayed) + tap.flush() == stream
    for out in relayed:
        assert not out or out.endswith((b"\n\n", b"\n\r\n"))
    assert tap.usage is None


def test_a_usage_chunk_after_plain_events_is_still_dropped() -> None:
    plain = event({"choices": [{"delta": {"content": "hi"}}], "usage": None})
    tap = StreamTap(strip_usage_chunk=True)
    assert tap.feed(plain + plain) == plain + plain
    assert tap.feed(CHUNKS[3][:10]) == b""
    assert tap.feed(CHUNKS[3][10:] + CHUNKS[4]) == CHUNKS[4]
    assert tap.usage == USAGE


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@given(
    st.dictionaries(st.text(max_size=8), _JSON_VALUES, max_size=5),
    st.sampled_from(["", " ", "\n", "\r\n\t "]),
    st.booleans(),
)
def test_the_usage_option_written_into_the_clients_bytes_reads_as_the_merged_body(
    body: dict[str, object], space: str, indent: bool
) -> None:
    body.pop("stream_options", None)
    raw = json.dumps(body, indent=2 if indent else None).encode() + space.encode()
    spliced = usage_requested_in(raw, body)
    assert spliced is not None
    assert jsoncodec.loads(spliced) == with_usage_requested(body)[0]
    assert spliced.startswith(raw.rstrip()[:-1].rstrip())  # the client's bytes, as they were


def test_the_usage_option_is_not_written_in_where_options_are_set() -> None:
    body = {"stream": True, "stream_options": {"include_obfuscation": False}}
    assert usage_requested_in(json.dumps(body).encode(), body) is None
    assert usage_requested_in(b"[1]", {}) is None


RESPONSES_STREAM = b"".join(
    [
        typed("response.created", response={"status": "in_progress", "usage": None}),
        typed("response.output_text.delta", delta='the "usage" field'),
        typed(
            "response.completed",
            response={"status": "completed", "usage": {"input_tokens": 120, "output_tokens": 5}},
        ),
    ]
)
PLAIN_STREAM = CHUNKS[0] + CHUNKS[1] + CHUNKS[2] + CHUNKS[4]


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("strip", [True, False], ids=["strip", "keep"])
@pytest.mark.parametrize(
    "stream",
    [STREAM, PLAIN_STREAM + STREAM, PLAIN_STREAM, RESPONSES_STREAM],
    ids=["chat-usage-chunk", "plain-reads-then-usage", "no-usage", "responses"],
)
def test_every_split_relays_the_same_events_and_usage(
    stream: bytes, strip: bool, crlf: bool
) -> None:
    # Each split a socket could make, fed by hand: reads with no usage value (relayed whole),
    # the usage chunk cut in two, a read ending inside an event, ...
    usage_chunk = CHUNKS[3] in stream
    if crlf:
        stream = stream.replace(b"\n\n", b"\r\n\r\n")
    whole = StreamTap(strip_usage_chunk=strip)
    expected = whole.feed(stream) + whole.flush()
    for pieces in splits(stream):
        tap = StreamTap(strip_usage_chunk=strip)
        relayed = [tap.feed(piece) for piece in pieces]
        assert b"".join(relayed) + tap.flush() == expected
        assert all(ends_an_event(out) for out in relayed if out)
        assert tap.usage == whole.usage
    assert (expected == stream) is not (strip and usage_chunk)  # only the usage chunk is dropped
