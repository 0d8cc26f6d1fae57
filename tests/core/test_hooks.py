"""Hooks: which actions are due for a turn."""

from __future__ import annotations

import pytest

from proxy.core.hooks import (
    Always,
    CompactContext,
    ContextPressure,
    Hook,
    InjectMessage,
    Log,
    MessageCount,
    ToolCalls,
    TurnCount,
    TurnFacts,
    due_actions,
    render_template,
    with_default_hook,
)

FACTS = TurnFacts(turn=6, tokens=9000, messages=40, pressure=0.82, tool_calls=12)


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        (ContextPressure(0.8), True),
        (ContextPressure(0.9), False),
        (TurnCount(3), True),
        (TurnCount(4), False),
        (ToolCalls(12), True),
        (ToolCalls(13), False),
        (MessageCount(40), True),
        (MessageCount(41), False),
        (Always(), True),
    ],
)
def test_conditions(condition: ContextPressure, holds: bool) -> None:
    assert condition.holds(FACTS) is holds


def test_turn_count_never_fires_on_turn_zero() -> None:
    assert not TurnCount(3).holds(TurnFacts(0, 0, 0, 0.0, 0))


def test_only_hooks_for_the_event_fire() -> None:
    hooks = [
        Hook("turn_start", Always(), Log("start")),
        Hook("turn_end", Always(), Log("end")),
    ]
    assert due_actions(hooks, "turn_end", FACTS, now=0, last_fired={}) == [(1, Log("end"))]


def test_cooldown_in_seconds() -> None:
    hooks = [Hook("turn_start", Always(), Log("x"), cooldown_s=60)]
    assert due_actions(hooks, "turn_start", FACTS, now=100, last_fired={0: 50}) == []
    assert due_actions(hooks, "turn_start", FACTS, now=110, last_fired={0: 50}) == [(0, Log("x"))]


def test_messages_are_rendered() -> None:
    hooks = [
        Hook("turn_start", Always(), InjectMessage("Turn {turn}: {pressure} full", "system")),
        Hook("turn_start", Always(), Log("{tokens} tokens in {messages} messages, {other}")),
    ]
    actions = [
        action for _, action in due_actions(hooks, "turn_start", FACTS, now=0, last_fired={})
    ]
    assert actions == [
        InjectMessage("Turn 6: 82% full", "system"),
        Log("9000 tokens in 40 messages, {other}"),
    ]


def test_compaction_actions_pass_unchanged() -> None:
    action = CompactContext(strategy="summarize", keep_recent=4)
    hooks = [Hook("turn_start", ContextPressure(0.5), action)]
    assert due_actions(hooks, "turn_start", FACTS, now=0, last_fired={}) == [(0, action)]


def test_default_hook_added_only_without_a_compaction_hook() -> None:
    log = Hook("turn_end", Always(), Log("x"))
    with_default = with_default_hook([log], auto_compact=True, trigger=0.75)
    assert with_default[1] == Hook("turn_start", ContextPressure(0.75), CompactContext(force=False))
    compacting = Hook("turn_start", TurnCount(10), CompactContext())
    assert with_default_hook([compacting], auto_compact=True, trigger=0.75) == (compacting,)
    assert with_default_hook([log], auto_compact=False, trigger=0.75) == (log,)


def test_template_without_placeholders_is_unchanged() -> None:
    assert render_template("plain {json: true}", FACTS) == "plain {json: true}"
