"""Grouping conversations into units, and which messages are pinned."""

from __future__ import annotations

from hypothesis import given

from proxy.core.messages import Message
from proxy.core.units import UnitKind, group_units, is_well_formed, pins
from tests.builders import (
    assistant,
    assistant_calls,
    developer,
    function_call,
    function_result,
    system,
    tool_result,
    user,
)
from tests.core.conversations import conversation


def kinds(messages: list[Message]) -> list[tuple[UnitKind, int]]:
    return [(unit.kind, len(unit)) for unit in group_units(messages)]


def test_each_role_is_its_own_unit() -> None:
    assert kinds([system(), developer(), user(), assistant()]) == [
        (UnitKind.INSTRUCTION, 1),
        (UnitKind.INSTRUCTION, 1),
        (UnitKind.USER, 1),
        (UnitKind.ASSISTANT, 1),
    ]


def test_parallel_calls_and_answers_in_any_order_are_one_unit() -> None:
    messages = [user(), assistant_calls("a", "b"), tool_result("b"), tool_result("a"), assistant()]
    assert kinds(messages) == [
        (UnitKind.USER, 1),
        (UnitKind.TOOL_EXCHANGE, 3),
        (UnitKind.ASSISTANT, 1),
    ]
    assert is_well_formed(group_units(messages))


def test_legacy_function_call_pairs_with_its_result() -> None:
    messages = [user(), function_call(), function_result(), assistant()]
    assert kinds(messages)[1] == (UnitKind.FUNCTION_EXCHANGE, 2)


def test_function_call_without_result_is_a_plain_assistant_unit() -> None:
    assert kinds([user(), function_call(), user()])[1] == (UnitKind.ASSISTANT, 1)


def test_unanswered_call_is_incomplete() -> None:
    units = group_units([user(), assistant_calls("a", "b"), tool_result("a"), user()])
    assert units[1].kind is UnitKind.TOOL_EXCHANGE
    assert not units[1].complete
    assert not is_well_formed(units)


def test_orphan_tool_result_is_stray() -> None:
    units = group_units([user(), tool_result("nobody"), assistant()])
    assert units[1].kind is UnitKind.STRAY
    assert not is_well_formed(units)


def test_answer_to_another_exchange_ends_the_unit() -> None:
    messages = [assistant_calls("a"), tool_result("a"), tool_result("zzz")]
    assert kinds(messages) == [(UnitKind.TOOL_EXCHANGE, 2), (UnitKind.STRAY, 1)]


def test_unknown_role_is_stray() -> None:
    assert kinds([{"role": "critic", "content": "x"}, {"content": "no role"}]) == [
        (UnitKind.STRAY, 1),
        (UnitKind.STRAY, 1),
    ]


def test_recent_window_rounds_out_to_whole_units() -> None:
    messages = [
        system(),
        user(),
        assistant_calls("a", "b"),
        tool_result("a"),
        tool_result("b"),
        user(),
    ]
    pinned = pins(messages, group_units(messages), keep_recent=2, pin_first_user=True)
    # The last 2 messages start inside the tool exchange: the whole exchange is recent.
    assert pinned.recent == 2
    assert (pinned.head, pinned.first_user) == (1, 1)


def test_nothing_recent_with_keep_recent_zero() -> None:
    messages = [user(), assistant()]
    pinned = pins(messages, group_units(messages), keep_recent=0, pin_first_user=False)
    assert pinned.recent == 2
    assert pinned.first_user is None
    assert not pinned.is_pinned(0)


def test_mid_conversation_instructions_are_pinned() -> None:
    messages = [user(), assistant(), system("reminder"), user(), assistant()]
    pinned = pins(messages, group_units(messages), keep_recent=1, pin_first_user=False)
    assert pinned.is_pinned(2)
    assert not pinned.is_pinned(1)


def test_conversation_without_user_has_no_first_user() -> None:
    messages = [system(), assistant()]
    assert (
        pins(messages, group_units(messages), keep_recent=0, pin_first_user=True).first_user is None
    )


@given(conversation())
def test_units_cover_every_message_once_in_order(messages: list[Message]) -> None:
    units = group_units(messages)
    assert [i for unit in units for i in unit.indices()] == list(range(len(messages)))
    assert is_well_formed(units)


@given(conversation())
def test_recent_window_never_splits_a_unit(messages: list[Message]) -> None:
    units = group_units(messages)
    for keep in (0, 1, 3, 7, len(messages)):
        recent = pins(messages, units, keep_recent=keep, pin_first_user=True).recent
        assert recent in {unit.start for unit in units} | {len(messages)}
        assert len(messages) - recent >= min(keep, len(messages))
