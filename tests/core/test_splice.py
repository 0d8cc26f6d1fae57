"""Splicing a note in place of a span without breaking role alternation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.messages import Message
from proxy.core.splice import merge_text, splice
from proxy.core.summary import NOTE_END, detach_note
from proxy.core.units import group_units
from tests.builders import assistant, assistant_calls, image_user, system, tool_result, user
from tests.core.alternation import same_role_pairs
from tests.core.conversations import conversation

NOTE = "[2 earlier messages omitted]"


@pytest.mark.parametrize(
    ("messages", "start", "stop", "expected_roles", "resume"),
    [
        # user | span | user: the note is the assistant's
        ([user(), assistant(), user(), user("now")], 1, 3, ["user", "assistant", "user"], 3),
        # assistant | span | assistant: the note is the user's
        (
            [user(), assistant(), user(), assistant()],
            2,
            3,
            ["user", "assistant", "user", "assistant"],
            3,
        ),
        # tool result | span | assistant: the user's
        (
            [user(), assistant_calls("a"), tool_result("a"), user(), assistant()],
            3,
            4,
            ["user", "assistant", "tool", "user", "assistant"],
            4,
        ),
        # to the end: whichever role differs from the one before
        ([user(), assistant(), user()], 1, 3, ["user", "assistant"], 3),
        # instructions only before, assistant after: the user opens
        ([system(), user(), assistant()], 1, 2, ["system", "user", "assistant"], 2),
    ],
)
def test_note_takes_the_role_that_fits(
    messages: list[Message], start: int, stop: int, expected_roles: list[str], resume: int
) -> None:
    result = splice(messages, start, stop, NOTE)
    assert [m["role"] for m in result.messages] == expected_roles
    assert NOTE in [m["content"] for m in result.messages]
    assert result.resume == resume


def test_merges_into_previous_user_when_no_role_fits() -> None:
    messages = [system(), user("task"), user("more"), assistant("reply")]
    result = splice(messages, 2, 3, NOTE)
    assert result.messages == [system(), user(f"task\n\n{NOTE}"), assistant("reply")]
    assert result.resume == 3
    assert messages[1] == user("task")  # the input is never mutated


def test_merges_into_previous_user_across_an_instruction() -> None:
    messages = [user("task"), system("reminder"), user("x"), assistant("reply")]
    result = splice(messages, 2, 3, NOTE)
    assert result.messages == [user(f"task\n\n{NOTE}"), system("reminder"), assistant("reply")]


def test_opens_next_user_message_after_instructions() -> None:
    messages = [system(), assistant("old"), user("next"), assistant()]
    result = splice(messages, 1, 2, NOTE)
    opened = user(f"{NOTE}\n\n{NOTE_END}\n\nnext")
    assert result.messages == [system(), opened, assistant()]
    assert result.resume == 3
    # The note that opens a message is closed, so it can be taken out again exactly.
    assert detach_note(opened) == (user("next"), NOTE)


def test_opens_next_user_message_across_an_instruction() -> None:
    messages = [system(), system("second"), user("next")]
    result = splice(messages, 1, 1, NOTE)
    assert result.messages == [system(), system("second"), user(f"{NOTE}\n\n{NOTE_END}\n\nnext")]
    assert result.resume == 3


def test_merge_keeps_other_fields_and_parts() -> None:
    message = {**image_user("look"), "name": "ana"}
    merged = merge_text(message, NOTE, first=True)
    assert merged["name"] == "ana"
    assert merged["content"][0] == {"type": "text", "text": NOTE}
    assert merged["content"][1:] == message["content"]
    assert merge_text({"role": "user", "content": None}, NOTE, first=False)["content"] == NOTE
    tail = merge_text(message, NOTE, first=False)["content"][-1]
    assert tail == {"type": "text", "text": NOTE}


@given(conversation(), st.data())
def test_never_creates_same_role_pairs(messages: list[Message], data: st.DataObject) -> None:
    boundaries = sorted({unit.start for unit in group_units(messages)} | {len(messages)})
    start = data.draw(st.sampled_from(boundaries[1:] or [len(messages)]))
    stop = data.draw(st.sampled_from([b for b in boundaries if b >= start]))
    result = splice(messages, start, stop, NOTE)
    assert same_role_pairs(result.messages) <= same_role_pairs(messages)
    assert result.messages[len(result.messages) - (len(messages) - result.resume) :] == list(
        messages[result.resume :]
    )
    texts = str(result.messages)
    assert NOTE in texts
