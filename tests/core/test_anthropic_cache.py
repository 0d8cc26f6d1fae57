"""The request's cache breakpoints on the forwarded body: where the client put them, on the
blocks kept, and never more than four."""

from __future__ import annotations

import json
from typing import Any

from proxy.core.anthropic import chat_view, messages_body
from proxy.core.anthropic_cache import MAX_BREAKPOINTS, Marks, breakpoints, limited
from proxy.core.summary import marker
from proxy.core.tool_results import clear
from tests.core.test_anthropic import (
    CACHE,
    assistant,
    body_of,
    image,
    result,
    text,
    use,
    user,
)

LATER = {"type": "ephemeral", "ttl": "1h"}


def test_a_marker_on_a_kept_block_comes_back_where_it_was() -> None:
    body = body_of(
        user(text("go")),
        assistant(text("ok", cache_control=CACHE), use("a")),
        user(result("a", cache_control=CACHE)),
        system=[text("rules"), text("more", cache_control=CACHE)],
        tools=[{"name": "read", "input_schema": {}, "cache_control": CACHE}],
    )
    view = chat_view(body)
    sent = messages_body(view, view["messages"])
    assert sent == body
    assert sent["messages"][2]["content"][0] is body["messages"][2]["content"][0]
    assert len(breakpoints(sent)) == 4


def test_a_marker_on_a_dropped_block_goes_with_it() -> None:
    body = body_of(
        user(text("task")),
        assistant(text("old", cache_control=CACHE)),
        user(text("now", cache_control=CACHE)),
    )
    view = chat_view(body)
    task, _, now = view["messages"]
    note = {"role": "assistant", "content": marker(1)}
    sent = messages_body(view, [task, note, now])
    assert breakpoints(sent) == [("messages", 0, "content", 2)]
    assert sent["messages"][0]["content"][2] is body["messages"][2]["content"][0]


def test_a_trimmed_result_keeps_its_marker() -> None:
    body = body_of(
        user(text("go")), assistant(use("a")), user(result("a", "x" * 500, cache_control=LATER))
    )
    view = chat_view(body)
    cleared = clear(view["messages"][2], "read", 500)
    sent = messages_body(view, [*view["messages"][:2], cleared])
    assert sent["messages"][2]["content"][0] == result("a", cleared["content"], cache_control=LATER)


def test_a_changed_result_marked_only_inside_has_no_marker_left() -> None:
    body = body_of(
        user(text("go")), assistant(use("a")), user(result("a", [text("in", cache_control=CACHE)]))
    )
    view = chat_view(body)
    cleared = clear(view["messages"][2], "read", 500)
    sent = messages_body(view, [*view["messages"][:2], cleared])
    assert sent["messages"][2]["content"][0] == result("a", cleared["content"])
    assert breakpoints(sent) == []


def test_a_checkpoint_copy_gets_the_marker_of_the_latest_equal_block() -> None:
    # The client marks its second "continue": the checkpoint's copies are equal blocks, so
    # the marker goes to the latest of them, once.
    body = body_of(
        user(text("continue")),
        assistant(text("a")),
        user(text("continue", cache_control=CACHE)),
        assistant(text("b")),
        user(text("go on")),
    )
    view = chat_view(body)
    stored = json.loads(json.dumps(view["messages"]))
    sent = messages_body(view, stored)
    assert breakpoints(sent) == [("messages", 2, "content", 0)]


def test_an_unchanged_result_from_a_checkpoint_gets_its_marker_back() -> None:
    body = body_of(
        user(text("go")), assistant(use("a")), user(result("a", [text("in", cache_control=CACHE)]))
    )
    view = chat_view(body)
    stored = json.loads(json.dumps(view["messages"]))
    assert messages_body(view, stored) == body


def test_past_four_the_earliest_breakpoints_go() -> None:
    body = body_of(
        user(text("a", cache_control=CACHE)),
        assistant(text("b", cache_control=CACHE)),
        user(result("x", [text("c", cache_control=CACHE)], cache_control=CACHE), image()),
        system=[text("s", cache_control=CACHE)],
        tools=[{"name": "t", "cache_control": CACHE}, {"name": "u", "cache_control": None}],
    )
    assert len(breakpoints(body)) == 6
    view = chat_view(body)
    sent = messages_body(view, view["messages"])
    assert breakpoints(sent) == [
        ("messages", 0, "content", 0),
        ("messages", 1, "content", 0),
        ("messages", 2, "content", 0, "content", 0),
        ("messages", 2, "content", 0),
    ]
    assert sent["tools"] == [{"name": "t"}, {"name": "u", "cache_control": None}]
    assert sent["system"] == [text("s")]
    assert body["tools"][0] == {"name": "t", "cache_control": CACHE}  # the client's untouched


def test_limited_leaves_a_body_within_the_limit_as_it_is() -> None:
    body = body_of(user(text("a", cache_control=CACHE)))
    assert limited(body) is body
    assert limited(body, 0)["messages"] == [user(text("a"))]
    assert MAX_BREAKPOINTS == 4


def test_breakpoints_read_any_shape() -> None:
    odd: dict[str, Any] = {"tools": "x", "system": "s", "messages": ["odd", {"content": "s"}]}
    assert breakpoints(odd) == []
    assert breakpoints({"messages": "x"}) == []


def test_marks_place_each_marker_once() -> None:
    stripped, original = text("a"), text("a", cache_control=CACHE)
    source = {"type": "tool_result", "content": None}
    marks = Marks([[stripped, original, None]])
    body = {"messages": [user(stripped, stripped)]}
    restored = marks.restored(body)
    assert restored["messages"][0]["content"] == [original, stripped]
    assert marks.restored(body) == body  # used up
    # A source nobody recorded, or a block of the same id slot that is not the recorded one.
    assert marks.rebuilt(source, {"x": 1}) == {"x": 1}
    assert Marks([[stripped, original, source]]).rebuilt({**source}, {"x": 1}) == {"x": 1}
