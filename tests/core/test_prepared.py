"""Prepared summaries: found again by the span they cover, used in part, folded in later."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.prepared import covered, note_key, preparing, span_keys
from proxy.core.summary import SUMMARY_PREFIX
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER, TOOLS

POLICY = ContextPolicy(keep_recent=6, cooldown_turns=0, summary_max_tokens=120)
WINDOW = 4000
TARGET = Budget(context_window=WINDOW, output_reserve=0).tokens_at(POLICY.compaction_target)


def turn(i: int) -> list[Message]:
    """One agent turn: the user asks, a tool answers at length, the assistant replies."""
    return [
        user(f"step {i}: look at src/mod_{i}.py and never touch port {8000 + i} " + "so " * 60),
        assistant_calls(f"c{i}"),
        tool_result(f"c{i}", " ".join(f"line{i}_{n}" for n in range(30))),
        assistant(f"done with step {i} " + "and " * 80),
    ]


def agent(turns: int, start: list[Message] | None = None) -> list[Message]:
    messages = start or [system("be brief"), user("the task: port the service")]
    for i in range(turns):
        messages = [*messages, *turn(len(messages) + i)]
    return messages


def situation(
    messages: list[Message], *, force: bool = False, notes: frozenset[str] = frozenset()
) -> Situation:
    budget = Budget(context_window=WINDOW, output_reserve=0)
    return Situation(messages, {"model": "m", **TOOLS}, POLICY, budget, force=force, notes=notes)


def pressure(messages: list[Message]) -> float:
    budget = Budget(context_window=WINDOW, output_reserve=0)
    return budget.pressure(COUNTER.messages(messages) + COUNTER.tools(TOOLS))


def prepared_then_triggered() -> tuple[NeedsSummary, NeedsSummary, list[Message]]:
    """The plan a preparation makes (forced, below the trigger) and the plan at the trigger
    a few turns later, on the same conversation."""
    early = agent(1)
    while not preparing(pressure(early), POLICY):
        early = [*early, *turn(len(early))]
    late = early
    while pressure(late) < POLICY.compression_trigger:
        late = [*late, *turn(len(late))]
    ahead = plan_compaction(situation(early, force=True), COUNTER)
    due = plan_compaction(situation(late), COUNTER)
    assert isinstance(ahead, NeedsSummary)
    assert isinstance(due, NeedsSummary)
    return ahead, due, late


def test_keys_name_each_prefix_of_a_span_after_its_anchor() -> None:
    span = [user("a"), assistant("b"), user("c")]
    keys = span_keys(None, span)
    assert len(set(keys)) == 3
    assert span_keys(None, span[:2]) == keys[:2]
    assert span_keys("[3 earlier messages omitted]", span)[0] != keys[0]
    assert note_key("a note", "s1") != note_key("another", "s1")
    assert note_key("a note", "s1") != note_key("a note", "s2")
    assert note_key("x", "s1").startswith("n:")
    assert covered(keys, [keys[1], "s:other"]) == 2
    assert covered(keys, [keys[0], keys[2]]) == 3
    assert covered(keys, []) == 0


def test_preparation_starts_below_the_trigger_when_a_compaction_would_summarize() -> None:
    assert POLICY.preparation_level == 0.70
    assert preparing(0.71, POLICY)
    assert not preparing(0.69, POLICY)
    assert not preparing(0.9, POLICY.replace(strategy="truncate"))
    assert not preparing(0.9, POLICY.replace(auto_compact=False))
    assert POLICY.replace(prepare_at=0.5).preparation_level == 0.5
    assert POLICY.replace(prepare_at=0.95).preparation_level == 0.85
    assert POLICY.replace(compression_trigger=0.2, compaction_target=0.1).preparation_level == 0.1


def test_a_summary_prepared_below_the_trigger_is_found_by_the_span_at_the_trigger() -> None:
    ahead, due, _ = prepared_then_triggered()
    assert len(due.span) > len(ahead.span)
    assert due.span[: len(ahead.span)] == ahead.span
    assert covered(due.keys, [ahead.keys[-1]]) == len(ahead.span)


def test_a_summary_of_the_span_s_start_is_used_and_the_rest_kept_when_it_fits() -> None:
    ahead, due, _ = prepared_then_triggered()
    k = len(ahead.span)
    result = due.complete("- prepared summary of the start", covered=k)
    assert result.tokens_after <= TARGET
    assert result.steps == ("clear_tool_results", "summarize")
    assert "48 messages were replaced" in str(result.messages)
    assert k == 48
    # The rest of the span stays as it was: the next compaction's span starts with it.
    assert result.dropped is None
    assert result.note is not None
    assert "prepared summary of the start" in result.note
    nxt = plan_compaction(
        situation(agent(6, [*result.messages]), force=True, notes=result.notes), COUNTER
    )
    assert isinstance(nxt, NeedsSummary)
    assert nxt.anchor == result.note
    assert nxt.span[: len(due.span) - k] == due.span[k:]


def test_a_summary_of_the_span_s_start_is_used_and_the_rest_left_to_fold_in_later() -> None:
    ahead, _, late = prepared_then_triggered()
    k = len(ahead.span)
    # The conversation went far past the trigger before it was compacted (a burst of tool
    # calls): the rest no longer fits after the summary of the start.
    due = plan_compaction(situation(agent(8, late)), COUNTER)
    assert isinstance(due, NeedsSummary)
    result = due.complete("- prepared summary of the start", covered=k)
    assert result.tokens_after <= TARGET
    assert "prepared summary of the start" in str(result.messages)
    assert result.dropped is not None
    # What the summary did not cover was dropped after it, to be summarized over it later.
    assert result.dropped.span == due.span[k:]
    assert result.dropped.previous is not None
    assert result.dropped.previous.startswith(SUMMARY_PREFIX)
    assert "prepared summary of the start" in result.dropped.previous
    assert result.covers == due.keys[-1]
    assert result.note is not None
    assert "prepared summary of the start" in result.note
    nxt = plan_compaction(
        situation(agent(6, [*result.messages]), force=True, notes=result.notes), COUNTER
    )
    assert isinstance(nxt, NeedsSummary)
    assert nxt.anchor == result.note


def test_a_whole_span_covered_needs_nothing_later() -> None:
    _, due, _ = prepared_then_triggered()
    result = due.complete("- the whole span", covered=len(due.span))
    assert result.dropped is None
    assert result.covers is None
    assert result.strategy == "summarize"


def test_a_fallback_drops_the_span_whose_summary_is_folded_into_the_next_compaction() -> None:
    _, due, _ = prepared_then_triggered()
    result = due.fallback()
    assert result.dropped is not None
    assert result.dropped.span == due.span
    assert result.dropped.previous == due.previous
    assert result.covers == due.keys[-1]
    assert result.note is not None
    assert result.note.startswith(f"[{len(due.span)} earlier")
    folded = result.dropped.note("- what the dropped turns said")
    nxt = plan_compaction(
        situation(agent(6, [*result.messages]), force=True, notes=result.notes), COUNTER
    )
    assert isinstance(nxt, NeedsSummary)
    assert nxt.anchor == result.note
    assert nxt.previous == result.note
    rolled = nxt.rolled(folded)
    assert rolled.previous == folded
    assert rolled.anchor == result.note
    assert rolled.keys == nxt.keys  # found by what the conversation holds, not by the fold
    assert rolled.task().previous == folded
    # Truncated again, the marker keeps the folded summary.
    again = rolled.fallback()
    assert again.note is not None
    assert "what the dropped turns said" in again.note
    # Summarized, the summary request folds it in.
    assert "what the dropped turns said" in str(rolled.request_for(rolled.span, rolled.previous))


def test_a_cover_that_does_not_end_on_a_unit_falls_back() -> None:
    _, due, _ = prepared_then_triggered()
    calls = next(i for i, m in enumerate(due.span) if m.get("tool_calls"))
    result = due.complete("- cut inside a tool call", covered=calls + 1)
    assert "cut inside a tool call" not in str(result.messages)
    assert result.strategy == "truncate"
    _, nothing, _ = prepared_then_triggered()
    assert nothing.complete("- covers nothing", covered=0).strategy == "truncate"


def test_a_task_after_a_covered_start_folds_in_the_summary_of_it() -> None:
    _, due, _ = prepared_then_triggered()
    task = due.task(2, "- the first two")
    assert task.span == due.span[2:]
    assert task.previous == "- the first two"
    assert due.task().previous == due.previous
    assert due.task().span == due.span
    assert task.request_for(task.span, task.previous) == due.request_for(
        due.span[2:], "- the first two"
    )


@given(st.integers(min_value=1, max_value=40))
def test_every_prefix_covered_lands_on_target_or_falls_back(k: int) -> None:
    _, due, _ = prepared_then_triggered()
    result = due.complete("- a summary", covered=min(k, len(due.span)))
    assert isinstance(result, Compacted)
    assert result.tokens_after <= TARGET
    assert result.covers is None or result.dropped is not None
