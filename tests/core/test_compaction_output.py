"""An automatic compaction's item put first in the model's answer: a whole response, and a
stream rewritten as it is relayed, however its bytes are cut."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.compaction_output import ItemFirst, with_item
from proxy.core.compaction_replies import sse
from tests.core.splits import ends_an_event, splits

ITEM: Any = {"type": "compaction", "id": "cmp_1", "encrypted_content": "compaction-proxy.1.x"}
MESSAGE: Any = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}


def response(output: list[Any], status: str = "completed") -> Any:
    return {"id": "resp_1", "object": "response", "status": status, "output": output}


def stream() -> bytes:
    """A model's answer as the Responses API streams it (comment and all)."""
    events: list[Any] = [
        {"type": "response.created", "response": response([], "in_progress")},
        {"type": "response.in_progress", "response": response([], "in_progress")},
        {"type": "response.output_item.added", "output_index": 0, "item": MESSAGE},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"},
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
        {"type": "response.completed", "response": response([MESSAGE])},
    ]
    numbered = [sse({**event, "sequence_number": i}) for i, event in enumerate(events)]
    return numbered[0] + b": keep-alive\n\n" + b"".join(numbered[1:])


def events(raw: bytes) -> list[Any]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def rewritten(raw: bytes, cuts: list[int]) -> bytes:
    rewriter = ItemFirst(ITEM)
    out, start = b"", 0
    for cut in sorted(cuts):
        out += rewriter.feed(raw[start:cut])
        start = max(start, cut)
    return out + rewriter.feed(raw[start:]) + rewriter.flush()


def test_a_whole_response_lists_the_item_first() -> None:
    raw = json.dumps(response([MESSAGE])).encode()
    assert json.loads(with_item(raw, ITEM))["output"] == [ITEM, MESSAGE]


def test_what_is_no_response_is_left_alone() -> None:
    for raw in (b"not json", b'{"error": {"message": "no"}}', b"[1]"):
        assert with_item(raw, ITEM) == raw


def test_a_stream_gets_the_items_events_after_its_opening_and_moves_the_rest_on() -> None:
    out = events(rewritten(stream(), []))
    assert [(e["type"], e.get("output_index")) for e in out] == [
        ("response.created", None),
        ("response.in_progress", None),
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_item.done", 1),
        ("response.completed", None),
    ]
    assert [e["sequence_number"] for e in out] == list(range(8))
    assert out[2]["item"] == out[3]["item"] == ITEM
    assert out[-1]["response"]["output"] == [ITEM, MESSAGE]
    assert out[0]["response"]["output"] == []  # the opening events as they came
    assert b": keep-alive\n\n" in rewritten(stream(), [])


def test_events_without_numbers_or_type_and_an_unterminated_tail_go_as_they_came() -> None:
    raw = b'data: {"delta": 1}\n\ndata: {"type": "response.output_text.delta"}\n\ndata: {"ty'
    out = rewritten(raw, [])
    assert out.startswith(b'data: {"delta": 1}\n\n')
    assert out.endswith(b'data: {"ty')
    added, done, delta = events(out.removesuffix(b'data: {"ty'))[1:]
    assert (added["sequence_number"], done["sequence_number"]) == (0, 1)
    assert delta == {"type": "response.output_text.delta"}


@given(st.lists(st.integers(0, len(stream())), max_size=12))
def test_however_the_bytes_are_cut_the_stream_is_the_same(cuts: list[int]) -> None:
    assert rewritten(stream(), cuts) == rewritten(stream(), [])


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_every_split_gives_the_same_stream(crlf: bool) -> None:
    # Each split a socket could make, fed by hand: the opening events apart from the first
    # one the item goes before, an event cut in two, a byte at a time, ...
    raw = stream().replace(b"\n\n", b"\r\n\r\n") if crlf else stream()
    expected = rewritten(raw, [])
    assert expected != raw  # the item's events went in
    for pieces in splits(raw):
        rewriter = ItemFirst(ITEM)
        out = [rewriter.feed(piece) for piece in pieces]
        assert b"".join(out) + rewriter.flush() == expected
        assert all(ends_an_event(piece) for piece in out if piece)
