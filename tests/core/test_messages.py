"""Reading the fields compaction cares about, whatever shape a message has."""

from __future__ import annotations

from proxy.core.messages import (
    answers,
    is_text_only,
    leading_instructions,
    role,
    text,
    texts,
    tool_call_ids,
    tool_call_name,
    tool_calls,
    with_texts,
)
from tests.builders import assistant_calls, image_user, tool_result, user


def test_text_of_every_content_shape() -> None:
    assert text(user("hi")) == "hi"
    assert text(image_user("look")) == "look"
    multi = {"role": "user", "content": [{"type": "text", "text": "a"}, "junk", {"text": "b"}]}
    assert text(multi) == "a\nb"
    assert text({"role": "assistant", "content": None}) == ""


def test_tool_calls_read_defensively() -> None:
    message = {"role": "assistant", "tool_calls": [{"id": "a"}, "junk", {"id": 5}]}
    assert tool_calls(message) == [{"id": "a"}, {"id": 5}]
    assert tool_call_ids(message) == ["a"]
    assert tool_calls({"role": "assistant", "tool_calls": "x"}) == []


def test_tool_call_name_by_id() -> None:
    message = assistant_calls("a", "b", name="grep")
    assert tool_call_name(message, "b") == "grep"
    assert tool_call_name(message, "zzz") is None
    nameless = {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": 3}}]}
    assert tool_call_name(nameless, "a") is None


def test_answers_only_for_tool_messages() -> None:
    assert answers(tool_result("c1")) == "c1"
    assert answers({"role": "user", "tool_call_id": "c1"}) is None
    assert role({"role": 3}) == ""


def test_leading_instructions_end_at_the_first_other_message() -> None:
    system = {"role": "system", "content": "rules"}
    developer = {"role": "developer", "content": "more"}
    assert leading_instructions([system, developer, user("task"), system]) == 2
    assert leading_instructions([user("task"), system]) == 0
    assert leading_instructions([system, "not a message", system]) == 1
    assert leading_instructions([]) == 0


def test_a_message_s_texts_are_read_and_replaced_in_place() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, image, {"text": "b"}]}
    assert texts(parts) == ["a", "b"]
    assert with_texts(parts, ["A", "B"])["content"] == [
        {"type": "text", "text": "A"},
        image,
        {"text": "B"},
    ]
    assert texts({"role": "user", "content": "words"}) == ["words"]
    assert with_texts({"role": "user", "content": "words"}, ["new"])["content"] == "new"
    assert texts({"role": "assistant", "content": None}) == []
    assert not is_text_only(parts)
    assert is_text_only({"role": "user", "content": [{"type": "text", "text": "a"}]})
    assert not is_text_only({"role": "user", "content": []})
