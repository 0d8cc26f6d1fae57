"""The turn budget: old turns shrink to their question and answer."""

from __future__ import annotations

from proxy.core.messages import Message
from proxy.core.turn_budget import shrink_old_turns
from proxy.core.units import Pins, group_units, pins
from tests.builders import assistant, assistant_calls, system, tool_result, user


def pinned(messages: list[Message], keep_recent: int = 0) -> Pins:
    return pins(messages, group_units(messages), keep_recent=keep_recent, pin_first_user=True)


def turn(question: str, *calls: str) -> list[Message]:
    exchanges = [m for c in calls for m in (assistant_calls(c), tool_result(c))]
    return [user(question), *exchanges, assistant(f"answer to {question}")]


def test_old_turns_keep_question_and_answer() -> None:
    messages = [system(), *turn("q1", "a", "b"), *turn("q2", "c"), *turn("q3", "d")]
    shrunk = shrink_old_turns(messages, 1, pinned(messages))
    assert shrunk == [
        system(),
        user("q1"),
        assistant("answer to q1"),
        user("q2"),
        assistant("answer to q2"),
        *turn("q3", "d"),
    ]


def test_within_budget_nothing_changes() -> None:
    messages = [*turn("q1", "a"), *turn("q2", "b")]
    assert shrink_old_turns(messages, 2, pinned(messages)) == messages


def test_turn_without_plain_answer_is_kept_whole() -> None:
    messages = [user("q1"), assistant_calls("a"), tool_result("a"), *turn("q2")]
    assert shrink_old_turns(messages, 1, pinned(messages)) == messages


def test_recent_window_and_instructions_survive() -> None:
    messages = [*turn("q1", "a"), system("reminder"), *turn("q2", "b")]
    messages.insert(2, system("mid-turn note"))
    shrunk = shrink_old_turns(messages, 1, pinned(messages, keep_recent=len(messages)))
    assert shrunk == messages
    shrunk = shrink_old_turns(messages, 1, pinned(messages))
    assert system("mid-turn note") in shrunk
    assert system("reminder") in shrunk
