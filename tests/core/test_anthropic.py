"""Messages API bodies as chat messages and back: lossless, cut only between turns, and
written back as the API requires (alternating roles, a user first, pairs kept)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from proxy.core.anthropic import (
    CONTINUED,
    FIELDS,
    MARKS,
    SOURCE,
    SYSTEM,
    chat_view,
    messages_body,
    provider_compacts,
    readable,
    to_messages,
    to_wire,
)
from proxy.core.anthropic_count import BLOCK
from proxy.core.splice import merge_text
from proxy.core.summary import marker, opening_note
from proxy.core.tokens import ApproximateEncoder, TokenCounter
from proxy.core.tool_results import clear
from proxy.core.units import UnitKind, group_units, is_well_formed
from proxy.errors import InvalidRequestError

Block = dict[str, Any]
CACHE = {"type": "ephemeral"}


def text(words: str, **extra: Any) -> Block:
    return {"type": "text", "text": words, **extra}


def thinking(n: int = 0) -> Block:
    return {"type": "thinking", "thinking": f"plan {n}", "signature": f"EqQBCkYIBxgCKkB{n}=="}


def use(call_id: str, name: str = "read") -> Block:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"path": f"{call_id}.py"}}


def result(call_id: str, content: Any = "out", **extra: Any) -> Block:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def image() -> Block:
    return {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def body_of(*messages: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, **fields, "messages": list(messages)}


def round_trip(body: dict[str, Any]) -> dict[str, Any]:
    view = chat_view(body)
    return messages_body(view, view["messages"])


def public(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in (SOURCE, FIELDS, SYSTEM)}


# --- Reading a body ---------------------------------------------------------------------------


def test_tool_results_answer_their_calls_and_the_text_after_them_is_a_user_message() -> None:
    body = body_of(
        {"role": "user", "content": "fix the bug"},
        assistant(thinking(), text("Reading both."), use("a"), use("b")),
        user(result("a"), result("b", [text("B"), image()], is_error=True), text("also this")),
    )
    messages = chat_view(body)["messages"]

    assert [public(m) for m in messages] == [
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": [{"type": BLOCK, "block": thinking()}, text("Reading both.")],
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "read", "arguments": arg}}
                for i, arg in (("a", '{"path":"a.py"}'), ("b", '{"path":"b.py"}'))
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "out"},
        {
            "role": "tool",
            "tool_call_id": "b",
            "content": [text("B"), {"type": BLOCK, "block": image()}],
        },
        {"role": "user", "content": [text("also this")]},
    ]
    kinds = [unit.kind for unit in group_units(messages)]
    assert kinds == [UnitKind.USER, UnitKind.TOOL_EXCHANGE, UnitKind.USER]
    # The result keeps its other fields, its content's place marked for the new content.
    assert messages[3][SOURCE] == {
        "type": "tool_result",
        "tool_use_id": "b",
        "content": None,
        "is_error": True,
    }


def test_a_user_message_of_results_only_makes_no_user_message() -> None:
    messages = to_messages([user(text("go")), assistant(use("a")), user(result("a"))])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    # A turn of calls alone has no content besides its calls.
    assert messages[1]["content"] is None


def test_consecutive_assistant_messages_are_one_turn_so_thinking_keeps_its_follower() -> None:
    turn = [assistant(thinking()), assistant(text("then"), use("a"))]
    messages = to_messages([user(text("go")), *turn, user(result("a"))])

    assert len(messages) == 3
    assert messages[1][SOURCE] == turn
    assert all(a is b for a, b in zip(messages[1][SOURCE], turn, strict=True))
    assert is_well_formed(group_units(messages))


def test_a_turn_of_one_string_keeps_its_string() -> None:
    messages = to_messages([user(text("hi")), {"role": "assistant", "content": "hello"}])
    assert public(messages[1]) == {"role": "assistant", "content": "hello"}


def test_strings_of_a_merged_turn_become_text_parts() -> None:
    turn = [{"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two"}]
    messages = to_messages([user(text("hi")), *turn])
    assert messages[1]["content"] == [text("one"), text("two")]


def test_a_result_after_text_stays_in_place_and_the_call_is_unanswered() -> None:
    messages = to_messages([user(text("go")), assistant(use("a")), user(text("x"), result("a"))])
    assert messages[2]["content"] == [text("x"), {"type": BLOCK, "block": result("a")}]
    assert not is_well_formed(group_units(messages))


def test_system_messages_inside_messages_are_instructions() -> None:
    inside = {"role": "system", "content": [text("agents: a, b")]}
    messages = to_messages([user(text("go")), inside])
    assert messages[1] == {"role": "system", "content": [text("agents: a, b")]}
    assert group_units(messages)[1].kind is UnitKind.INSTRUCTION


@pytest.mark.parametrize(
    "stray",
    [
        "not a message",
        {"role": "tool", "content": "x"},
        {"role": "user", "content": None},
        {"role": "assistant", "content": 3},
        {"content": "no role"},
    ],
)
def test_anything_else_is_a_stray_carried_whole(stray: Any) -> None:
    messages = to_messages([user(text("go")), stray])
    assert messages[1] == {"content": [{"type": BLOCK, "block": stray}], SOURCE: stray}
    assert not is_well_formed(group_units(messages))
    assert to_wire(messages) == [user(text("go")), stray]


def test_other_message_fields_ride_on_the_first_message_made_of_it() -> None:
    odd = {"role": "user", "content": [result("a"), text("x")], "id": "m1"}
    messages = to_messages([user(text("go")), assistant(use("a")), odd])
    assert messages[2][FIELDS] == {"id": "m1"}
    assert FIELDS not in messages[3]
    string = to_messages([{"role": "user", "content": "go", "name": "ann"}])
    assert string[0] == {"role": "user", "content": "go", FIELDS: {"name": "ann"}}


def test_an_empty_user_message_stays_one() -> None:
    assert to_messages([user()]) == [{"role": "user", "content": []}]


def test_system_becomes_the_marked_head_as_a_string_or_as_blocks() -> None:
    string = chat_view(body_of(user(text("go")), system="rules"))
    assert string["messages"][0] == {"role": "system", "content": "rules", SYSTEM: True}
    blocks = chat_view(body_of(user(text("go")), system=[text("a"), text("b")]))
    assert blocks["messages"][0] == {
        "role": "system",
        "content": [text("a"), text("b")],
        SYSTEM: True,
    }
    assert "system" not in blocks


def test_an_odd_system_is_carried_along_untouched() -> None:
    body = body_of(user(text("go")), system=3)
    view = chat_view(body)
    assert view["system"] == 3
    assert messages_body(view, view["messages"]) == body


@pytest.mark.parametrize(("messages", "said"), [(None, "missing"), ("x", "not an array")])
def test_a_body_without_a_messages_array_is_refused(messages: Any, said: str) -> None:
    body = {"model": "m"} if messages is None else {"model": "m", "messages": messages}
    with pytest.raises(InvalidRequestError, match=said):
        chat_view(body)


def test_the_private_keys_are_not_counted_and_blocks_are() -> None:
    counter = TokenCounter(ApproximateEncoder())
    view = chat_view(body_of(user(text("go")), assistant(thinking(), use("a")), user(result("a"))))
    plain = [public(m) for m in view["messages"]]
    assert counter.messages(view["messages"]) == counter.messages(plain)
    without_thinking = [plain[0], {**plain[1], "content": None}, plain[2]]
    assert counter.messages(plain) > counter.messages(without_thinking)


# --- Breakpoints are kept apart -----------------------------------------------------------------


def test_a_moved_breakpoint_changes_no_message_of_the_view() -> None:
    first = body_of(user(text("go")), assistant(use("a")), user(result("a", cache_control=CACHE)))
    later = body_of(
        user(text("go")),
        assistant(use("a")),
        user(result("a")),
        assistant(text("done")),
        user(text("next", cache_control=CACHE)),
    )
    before, after = chat_view(first)["messages"], chat_view(later)["messages"]
    assert after[: len(before)] == before


def test_stripping_never_touches_the_client_dicts() -> None:
    body = body_of(
        user(text("go", cache_control=CACHE)),
        assistant(text("ok", cache_control=CACHE)),
        user(result("x", [text("in", cache_control=CACHE)])),
        system=[text("rules", cache_control=CACHE)],
    )
    kept = copy.deepcopy(body)
    view = chat_view(body)
    assert body == kept
    assert len(view[MARKS]) == 4
    assert round_trip(body) == kept


def test_a_body_without_breakpoints_has_no_marks() -> None:
    assert MARKS not in chat_view(body_of(user(text("go"))))


# --- Writing back -------------------------------------------------------------------------------


def test_round_trip_gives_the_same_body_and_the_same_blocks() -> None:
    body = body_of(
        user(text("go")),
        assistant(thinking(), {"type": "redacted_thinking", "data": "abc"}, use("a")),
        user(result("a", [text("A", citations=None)]), text("and")),
        {"role": "assistant", "content": "done"},
        system=[text("rules", cache_control=CACHE)],
        tools=[{"name": "read", "input_schema": {"type": "object"}}],
    )
    back = round_trip(body)
    assert back == body
    assert back["messages"][1] is body["messages"][1]
    assert back["messages"][2]["content"][1] is body["messages"][2]["content"][1]


def test_a_kept_message_is_found_unchanged_without_identity_too() -> None:
    body = body_of(user(text("go")), assistant(thinking(), use("a")), user(result("a")))
    view = chat_view(body)
    copies = json.loads(json.dumps(view["messages"]))  # a checkpoint's copy
    assert messages_body(view, copies) == body


def test_adjacent_messages_of_one_role_are_merged_as_the_api_merges_them() -> None:
    body = body_of(user(text("a")), {"role": "user", "content": "b"}, assistant(text("c")))
    assert round_trip(body)["messages"] == [
        user(text("a"), text("b")),
        assistant(text("c")),
    ]


def test_a_note_in_either_role_is_user_text_merged_with_its_user_neighbours() -> None:
    view = chat_view(body_of(user(text("task")), assistant(text("x")), user(text("now"))))
    note = {"role": "assistant", "content": marker(1)}
    task, _, now = view["messages"]
    sent = messages_body(view, [task, note, now])["messages"]
    assert sent == [user(text("task"), text(marker(1)), text("now"))]


def test_a_note_after_results_joins_their_user_message_after_them() -> None:
    view = chat_view(body_of(user(text("go")), assistant(use("a")), user(result("a"))))
    note = {"role": "user", "content": marker(3)}
    sent = messages_body(view, [*view["messages"], note, {"role": "assistant", "content": "k"}])
    assert sent["messages"][2] == user(result("a"), text(marker(3)))


def test_a_note_merged_into_a_user_message_keeps_its_blocks() -> None:
    view = chat_view(body_of(user(image(), text("look")), assistant(text("ok"))))
    first = view["messages"][0]
    merged = merge_text(first, opening_note(marker(2)), first=True)
    sent = messages_body(view, [merged, view["messages"][1]])["messages"]
    assert sent[0] == user(text(opening_note(marker(2))), image(), text("look"))
    assert sent[0]["content"][1] is view["messages"][0]["content"][0]["block"]


def test_a_cleared_result_keeps_its_fields_and_key_order() -> None:
    original = result("a", [text("big"), image()], is_error=False)
    view = chat_view(body_of(user(text("go")), assistant(use("a")), user(original)))
    cleared = clear(view["messages"][2], "read", 5000)
    sent = messages_body(view, [*view["messages"][:2], cleared])["messages"]
    block = sent[2]["content"][0]
    assert block == {**original, "content": cleared["content"]}
    assert list(block) == list(original)


def test_a_result_with_no_content_gets_the_content_the_core_gave_it() -> None:
    bare = {"type": "tool_result", "tool_use_id": "a"}
    view = chat_view(body_of(user(text("go")), assistant(use("a")), user(bare)))
    assert round_trip(body_of(user(text("go")), assistant(use("a")), user(bare)))["messages"][
        2
    ] == user(bare)
    cleared = clear(view["messages"][2], "read", 10)
    sent = messages_body(view, [*view["messages"][:2], cleared])["messages"]
    assert sent[2] == user({**bare, "content": cleared["content"]})


def test_a_changed_string_turn_stays_a_string() -> None:
    view = chat_view(body_of(user(text("go")), {"role": "assistant", "content": "long"}))
    cut = {**view["messages"][1], "content": "lo[cut]ng"}
    sent = messages_body(view, [view["messages"][0], cut])["messages"]
    assert sent[1] == {"role": "assistant", "content": "lo[cut]ng"}


def test_a_changed_turn_gives_back_its_original_calls_and_writes_new_ones() -> None:
    view = chat_view(body_of(user(text("go")), assistant(text("x"), use("a")), user(result("a"))))
    turn = view["messages"][1]
    extra = {"id": "z", "type": "function", "function": {"name": "grep", "arguments": '{"q":1}'}}
    changed = {**turn, "content": "short", "tool_calls": [*turn["tool_calls"], extra]}
    sent = messages_body(view, [view["messages"][0], changed, view["messages"][2]])["messages"]
    written = sent[1]["content"]
    assert written == [
        text("short"),
        use("a"),
        {"type": "tool_use", "id": "z", "name": "grep", "input": {"q": 1}},
    ]
    assert written[1] is view["messages"][1][SOURCE][0]["content"][1]


def test_a_changed_merged_turn_keeps_the_fields_of_its_first_message() -> None:
    turn = [{"role": "assistant", "content": "a", "id": "m"}, {"role": "assistant", "content": "b"}]
    view = chat_view(body_of(user(text("go")), *turn))
    assert messages_body(view, view["messages"])["messages"][1] == {
        "role": "assistant",
        "id": "m",
        "content": [text("a"), text("b")],
    }
    cut = {**view["messages"][1], "content": "ab"}
    sent = messages_body(view, [view["messages"][0], cut])["messages"]
    assert sent[1] == {"role": "assistant", "id": "m", "content": "ab"}


@pytest.mark.parametrize(
    ("arguments", "given"),
    [('{"q": "x"}', {"q": "x"}), ("[1]", {}), ("not json", {}), (None, {})],
)
def test_calls_the_core_made_become_tool_use_blocks(arguments: Any, given: Any) -> None:
    made = {
        "role": "assistant",
        "content": "Recalling.",
        "tool_calls": [
            {"id": "r1", "type": "function", "function": {"name": "recall", "arguments": arguments}}
        ],
    }
    answer = {"role": "tool", "tool_call_id": "r1", "content": "the text"}
    sent = to_wire([{"role": "user", "content": "go"}, made, answer])
    assert sent == [
        {"role": "user", "content": "go"},
        assistant(
            text("Recalling."), {"type": "tool_use", "id": "r1", "name": "recall", "input": given}
        ),
        user({"type": "tool_result", "tool_use_id": "r1", "content": "the text"}),
    ]


def test_made_messages_of_every_other_shape() -> None:
    odd_call = {"role": "assistant", "content": None, "tool_calls": [{"id": "q", "function": "?"}]}
    plain = {"role": "assistant", "content": "plain"}
    empty_answer = {"role": "tool", "tool_call_id": "q", "content": None}
    sent = to_wire(
        [
            {"role": "user", "content": "go"},
            plain,
            {"role": "user", "content": "more"},
            odd_call,
            empty_answer,
        ]
    )
    assert sent[1] == plain
    assert sent[3] == assistant({"type": "tool_use", "id": "q", "name": None, "input": {}})
    assert sent[4] == user({"type": "tool_result", "tool_use_id": "q"})
    assert to_wire([{"role": "developer", "content": "x"}]) == [{"role": "user", "content": "x"}]


def test_fields_that_are_no_object_are_ignored() -> None:
    assert to_wire([{"role": "user", "content": "x", FIELDS: "odd"}]) == [
        {"role": "user", "content": "x"}
    ]


def test_a_conversation_that_would_open_with_the_assistant_gets_a_user_first() -> None:
    view = chat_view(body_of(user(text("go")), assistant(text("a")), user(text("b"))))
    sent = messages_body(view, view["messages"][1:])["messages"]
    assert sent[0] == user(text(CONTINUED))
    assert sent[1:] == [assistant(text("a")), user(text("b"))]
    inside = {"role": "system", "content": "s"}
    assert to_wire([inside, {"role": "assistant", "content": "a"}])[:2] == [
        inside,
        user(text(CONTINUED)),
    ]
    assert to_wire([inside]) == [inside]


def test_system_messages_are_never_merged_across() -> None:
    inside = {"role": "system", "content": "s"}
    sent = to_wire([{"role": "user", "content": "a"}, inside, {"role": "user", "content": "b"}])
    assert sent == [{"role": "user", "content": "a"}, inside, {"role": "user", "content": "b"}]


def test_a_second_system_head_goes_to_messages() -> None:
    view = chat_view(body_of(user(text("go")), system=[text("a")]))
    head = view["messages"][0]
    sent = messages_body(view, [head, head, view["messages"][1]])
    assert sent["system"] == [text("a")]
    assert sent["messages"][0] == {"role": "system", "content": [text("a")]}


# --- Around the conversation ----------------------------------------------------------------


def test_readable_drops_the_private_keys_only() -> None:
    view = chat_view(body_of(user(text("go")), assistant(use("a")), user(result("a")), system="s"))
    shown = readable(view["messages"])
    assert shown[0] == {"role": "system", "content": "s"}
    assert all(SOURCE not in m for m in shown)
    plain = [{"role": "user", "content": "x"}]
    assert readable(plain)[0] is plain[0]


@pytest.mark.parametrize(
    ("management", "provider"),
    [
        (None, False),
        ({"edits": "all"}, False),
        ({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}, False),
        ({"edits": ["odd", {"type": 3}, {"type": "clear_tool_uses_20250919"}]}, True),
        ({"edits": [{"type": "compact_20260112"}]}, True),
    ],
)
def test_the_provider_compacts_when_an_edit_clears_tool_uses_or_compacts(
    management: Any, provider: bool
) -> None:
    body = body_of(user(text("go")))
    if management is not None:
        body["context_management"] = management
    assert provider_compacts(body) is provider


def test_blocks_that_are_no_object_and_empty_conversations_pass_through() -> None:
    body = body_of(user("odd", text("go")))
    assert round_trip(body) == body
    assert to_wire([]) == []
