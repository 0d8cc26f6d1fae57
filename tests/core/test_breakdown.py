"""Tokens by category."""

from __future__ import annotations

from hypothesis import given

from proxy.core.breakdown import breakdown
from proxy.core.messages import Message
from proxy.core.splice import merge_text
from proxy.core.summary import marker
from proxy.core.tool_results import clear
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.conversations import conversation
from tests.core.words import COUNTER

BODY = {"tools": [{"type": "function", "function": {"name": "grep", "parameters": {}}}]}


def test_each_category() -> None:
    messages = [
        system("rules here"),
        user("task"),
        user(marker(4)),
        assistant_calls("a", "b"),
        clear(tool_result("a", "x " * 50), "grep", 50),
        tool_result("b", "y " * 50),
        assistant("done"),
    ]
    parts = breakdown(messages, BODY, COUNTER)
    assert parts.system == COUNTER.message(messages[0])
    assert parts.summary == COUNTER.message(messages[2])
    assert parts.placeholders == COUNTER.message(messages[4])
    assert parts.tool_results == COUNTER.message(messages[5])
    assert parts.tools == COUNTER.tools(BODY)
    assert parts.as_dict()["total"] == parts.total


@given(conversation())
def test_categories_add_up_to_the_total(messages: list[Message]) -> None:
    total = COUNTER.messages(messages) + COUNTER.tools(BODY)
    assert breakdown(messages, BODY, COUNTER).total == total


def test_a_note_merged_into_a_user_message_counts_as_summary() -> None:
    note = marker(4)
    merged = merge_text(user("the task is to fix it"), note, first=False)
    counted = breakdown([system(), merged], BODY, COUNTER)
    whole = COUNTER.message(merged) - COUNTER.message(user("the task is to fix it"))
    assert counted.summary == whole > 0
    assert counted.total == COUNTER.messages([system(), merged]) + COUNTER.tools(BODY)
