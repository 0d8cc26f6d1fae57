"""The plan of a compaction the client asked for (`Situation.whole`): everything after the
instructions and the pinned task goes into the one block, from the original messages, the
running turn and its tool exchange too, however small the span; the ledger and the trail
still carry what the user said and what the results named."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.budget import Budget
from proxy.core.messages import Message, text
from proxy.core.plan import Compacted, NeedsSummary, Situation, Unchanged, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import note_digest
from proxy.core.units import group_units, is_well_formed
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.conversations import conversation
from tests.core.words import COUNTER, TOOLS

POLICY = ContextPolicy(keep_recent=4, summary_max_tokens=100)


def whole(messages: list[Message], window: int = 4000, **policy: Any) -> Situation:
    return Situation(
        messages=messages,
        body={"model": "m", **TOOLS},
        policy=POLICY.replace(**policy),
        budget=Budget(context_window=window, output_reserve=0),
        force=True,
        whole=True,
    )


def mid_turn() -> list[Message]:
    """An agent's conversation cut in the middle of its running turn, after a tool result."""
    return [
        system("be brief"),
        user("Fix ticket ABC-123. Never touch main."),
        assistant("Looking."),
        user("Also run the tests in tests/unit."),
        assistant_calls("c1", name="read_file", arguments={"path": "src/app.py"}),
        tool_result("c1", "def app(): ... build 4f2a9c1 " + "code " * 40),
        assistant_calls("c2", name="run_tests"),
        tool_result("c2", "2 failed: E1042 in tests/unit/test_app.py"),
    ]


def test_everything_after_the_task_is_summarized_the_running_turn_too() -> None:
    messages = mid_turn()
    plan = plan_compaction(whole(messages), COUNTER)
    assert isinstance(plan, NeedsSummary)
    assert list(plan.span) == messages[2:]  # the task stays; all else, to the last result
    result = plan.complete("- the summary")
    assert result.messages[:2] == messages[:2]
    assert len(result.messages) == 3
    assert result.block == text(result.messages[2])
    assert note_digest(result.block) in result.notes
    # What the user said after the task, and what the results named, are in the block.
    assert "- Also run the tests in tests/unit." in result.block
    assert "4f2a9c1" in result.block
    assert "tests/unit/test_app.py" in result.block


def test_the_summary_reads_the_original_results_none_cleared_first() -> None:
    plan = plan_compaction(whole(mid_turn()), COUNTER)
    assert isinstance(plan, NeedsSummary)
    assert "code code" in plan.request["messages"][-1]["content"]
    assert "cleared" not in plan.request["messages"][-1]["content"]


def test_without_a_pinned_task_the_block_stands_first_as_the_users() -> None:
    plan = plan_compaction(whole(mid_turn(), pin_first_user=False), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- the summary")
    assert [m["role"] for m in result.messages] == ["system", "user"]
    assert "- Never touch main." in (result.block or "")  # the task, in the ledger


def test_a_strategy_that_does_not_summarize_truncates_everything() -> None:
    for strategy in ("truncate", "trim_tool_results", "clear_tool_results"):
        plan = plan_compaction(whole(mid_turn(), strategy=strategy), COUNTER)
        assert isinstance(plan, Compacted), strategy
        assert plan.steps == ("truncate",)
        assert len(plan.messages) == 3
        assert (plan.block or "").startswith("[6 earlier messages omitted]")


def test_a_span_smaller_than_its_note_is_condensed_all_the_same() -> None:
    messages = [user("Do it."), assistant("ok")]
    plan = plan_compaction(whole(messages, strategy="truncate"), COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.tokens_after > plan.tokens_before  # a note bigger than "ok": still written
    assert plan.messages[0] == messages[0]
    assert plan.block is not None
    assert all(text(m) != "ok" for m in plan.messages)


def test_a_summary_of_a_short_span_is_used_though_it_is_longer() -> None:
    messages = [user("Do it."), assistant("ok")]
    plan = plan_compaction(whole(messages), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- the assistant said ok " * 5)
    assert result.steps == ("summarize",)
    assert result.block is not None
    assert "the assistant said ok" in result.block


def test_nothing_but_the_task_is_nothing_to_condense() -> None:
    plan = plan_compaction(whole([system(), user("Do it.")]), COUNTER)
    assert isinstance(plan, Unchanged)
    assert plan.reason == "nothing_to_remove"


def test_an_earlier_block_is_folded_into_the_new_one() -> None:
    first = plan_compaction(whole(mid_turn()), COUNTER)
    assert isinstance(first, NeedsSummary)
    earlier = first.complete("- fixed the lexer")
    assert earlier.block is not None
    later = [*earlier.messages, user("Now the docs, in docs/guide.md."), assistant("Done.")]
    situation = whole(later)
    plan = plan_compaction(
        Situation(**{**_fields(situation), "notes": frozenset(earlier.notes)}), COUNTER
    )
    assert isinstance(plan, NeedsSummary)
    assert plan.previous is not None
    assert "- fixed the lexer" in plan.previous
    result = plan.complete("- wrote the docs")
    assert result.block is not None
    # The earlier ledger carried on, the new statement added; one block in the end.
    assert "- Also run the tests in tests/unit." in result.block
    assert "- Now the docs, in docs/guide.md." in result.block
    assert len(result.messages) == 3


def test_a_malformed_conversation_is_not_condensed() -> None:
    plan = plan_compaction(whole([user("x"), tool_result("nobody")]), COUNTER)
    assert isinstance(plan, Unchanged)
    assert plan.reason == "malformed"


def _fields(situation: Situation) -> dict[str, Any]:
    return {name: getattr(situation, name) for name in Situation.__dataclass_fields__}


@settings(max_examples=60, deadline=None)
@given(conversation(), st.booleans())
def test_whatever_the_conversation_only_the_head_the_task_and_one_block_remain(
    messages: list[Message], summarized: bool
) -> None:
    plan = plan_compaction(whole(messages, window=200_000), COUNTER)
    if isinstance(plan, NeedsSummary):
        plan = plan.complete("- a summary") if summarized else plan.fallback()
    if isinstance(plan, Unchanged):
        return
    assert plan.block is not None
    notes = [m for m in plan.messages if plan.block in text(m)]
    assert len(notes) == 1
    rest = [m for m in plan.messages if m is not notes[0]]
    assert all(m in messages for m in rest)  # nothing else changed, nothing else made
    assert all(m["role"] in ("system", "developer", "user") for m in rest)
    assert is_well_formed(group_units(plan.messages))
