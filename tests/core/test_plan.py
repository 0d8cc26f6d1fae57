"""The compaction plan, layer by layer, and its properties over random conversations."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import artifacts
from proxy.core import mentions as mentions_module
from proxy.core import statements as ledger
from proxy.core.budget import Budget, request_budget
from proxy.core.ledger import Ranked, ranked_facts
from proxy.core.mentions import Mentions
from proxy.core.messages import Message, role
from proxy.core.plan import (
    ARTIFACTS_FLOOR,
    Allowances,
    Compacted,
    NeedsSummary,
    Plan,
    Situation,
    Unchanged,
    plan_compaction,
    plan_emergency,
)
from proxy.core.policy import ContextPolicy
from proxy.core.summary import (
    SUMMARY_PREFIX,
    detach_note,
    detach_notes,
    note_digest,
    note_of,
    notes_in,
    stands_for,
)
from proxy.core.tool_results import is_cleared
from proxy.core.units import group_units, is_well_formed
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.alternation import same_role_pairs, subsequence_plus_notes
from tests.core.conversations import conversation
from tests.core.words import COUNTER, TOOLS

POLICY = ContextPolicy(keep_recent=4, cooldown_turns=2, summary_max_tokens=100)


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def situation(
    messages: list[Message],
    window: int = 1000,
    *,
    force: bool = False,
    turns_since_compaction: int | None = None,
    notes: frozenset[str] = frozenset(),
    **policy: Any,
) -> Situation:
    return Situation(
        messages=messages,
        body={"model": "m", **TOOLS},
        policy=POLICY.replace(**policy),
        budget=Budget(context_window=window, output_reserve=0),
        turns_since_compaction=turns_since_compaction,
        force=force,
        notes=notes,
    )


def chat(turns: int, size: int = 60) -> list[Message]:
    """A system prompt, the task, then `turns` user/assistant exchanges of `size` words."""
    messages = [system("be brief"), user("the task: fix ticket ABC-123")]
    for i in range(turns):
        messages += [assistant(f"reply {i} " + words(size)), user(f"next {i} " + words(size))]
    return messages


def agent(calls: int, result_size: int = 100) -> list[Message]:
    """The task, then a long chain of tool calls with big results."""
    messages = [system(), user("the task")]
    for i in range(calls):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(result_size, "r"))]
    return [*messages, assistant("done")]


def target_of(asked: Situation) -> int:
    """Where the plan lands `asked`: `compaction_target` of the room its instructions and
    tools leave."""
    return Allowances.of(asked.budget, asked.policy, asked.fixed(COUNTER)).target


def run(plan: Plan, summary: str = "- the summary") -> Compacted:
    if isinstance(plan, NeedsSummary):
        return plan.complete(summary)
    assert isinstance(plan, Compacted), plan
    return plan


def test_under_trigger_is_unchanged() -> None:
    plan = plan_compaction(situation(chat(2)), COUNTER)
    assert isinstance(plan, Unchanged)
    assert plan.reason == "under_trigger"


def test_auto_compact_off_waits_unless_forced() -> None:
    messages = chat(10)
    assert plan_compaction(situation(messages, auto_compact=False), COUNTER) == Unchanged(
        "auto_compact_off", COUNTER.messages(messages) + COUNTER.tools(TOOLS)
    )
    forced = plan_compaction(situation(messages, auto_compact=False, force=True), COUNTER)
    assert isinstance(forced, NeedsSummary)


def test_cooldown_waits_only_while_the_request_fits() -> None:
    messages = chat(7)  # about 80 % of the window
    cooling = plan_compaction(situation(messages, turns_since_compaction=1), COUNTER)
    assert isinstance(cooling, Unchanged)
    assert cooling.reason == "cooldown"
    over = plan_compaction(situation(chat(12), turns_since_compaction=1), COUNTER)
    assert isinstance(over, NeedsSummary)
    after = plan_compaction(situation(messages, turns_since_compaction=2), COUNTER)
    assert isinstance(after, NeedsSummary)


def test_malformed_conversation_is_forwarded_as_sent() -> None:
    messages = [*chat(12), tool_result("nobody")]
    plan = plan_compaction(situation(messages), COUNTER)
    assert isinstance(plan, Unchanged)
    assert plan.reason == "malformed"


def test_oversized_tool_result_is_trimmed_first() -> None:
    messages = [
        user("task"),
        assistant_calls("c1"),
        tool_result("c1", words(900, "r")),
        assistant(),
    ]
    plan = plan_compaction(situation(messages, tool_result_max_share=0.3), COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.strategy == "trim_tool_results"
    trimmed = plan.messages[2]
    assert trimmed["tool_call_id"] == "c1"
    assert "cut from the middle of this search result" in trimmed["content"]
    assert plan.tokens_after < plan.tokens_before
    assert plan.fits


def test_old_tool_results_are_cleared_oldest_first() -> None:
    # The rounds are an earlier turn's: a running turn's results are cut, never cleared.
    plan = plan_compaction(situation([*agent(9), user("and the docs?")]), COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.strategy == "clear_tool_results"
    results = [m["content"] for m in plan.messages if role(m) == "tool"]
    assert results[0].startswith("[tool result cleared to save context: search returned")
    assert not results[-1].startswith("[tool result cleared")  # recent window untouched
    assert plan.tokens_after <= 500  # the target: half the window


# A window roomy enough for the recent window's message bound (keep_recent) to be the one that
# binds, not its token bound.
ROOMY: dict[str, Any] = {"window": 3000, "compression_trigger": 0.4, "compaction_target": 0.35}


def test_summary_replaces_oldest_turns() -> None:
    messages = chat(10)
    plan = plan_compaction(situation(messages, **ROOMY), COUNTER)
    assert isinstance(plan, NeedsSummary)
    prompt = plan.request["messages"][1]["content"]
    assert "reply 0" in prompt
    assert "the task" not in prompt  # the pinned first message is not summarized
    result = plan.complete("## Goal\n- fix the ticket")
    assert result.strategy == "summarize"
    assert result.messages[:2] == messages[:2]
    assert result.messages[-4:] == messages[-4:]
    note = next(m for m in result.messages if note_of(m))
    assert note["content"].startswith(SUMMARY_PREFIX)
    assert "Tools you can call in this conversation: search." in note["content"]
    assert result.tokens_after <= 1050  # the target: 35 % of the window
    assert is_well_formed(group_units(result.messages))


def test_summary_condenses_everything_before_the_recent_window() -> None:
    # Not just down to the target: the cache is lost from the span's start either way, so
    # one deep summary is cheaper than several shallow ones.
    messages = chat(30)
    plan = plan_compaction(situation(messages, window=4000), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- the summary")
    assert result.messages[1] == messages[1]  # the task stands unchanged: the note is apart
    notes = [i for i, m in enumerate(result.messages) if note_of(m)]
    assert notes == [2]
    # Everything but the pinned task and the recent window.
    assert len(result.messages) - 3 <= POLICY.keep_recent + 1  # rounded to a user message
    assert result.tokens_after < 0.3 * 4000


def test_clearing_takes_every_old_result_at_once() -> None:
    messages = [*agent(12), user("and the docs?")]
    total = COUNTER.messages(messages) + COUNTER.tools(TOOLS)
    # A target that clearing one result would reach.
    window = 2 * (total - 50)
    plan = plan_compaction(
        situation(messages, window=window, strategy="clear_tool_results", force=True), COUNTER
    )
    assert isinstance(plan, Compacted)
    recent = plan.messages[-POLICY.keep_recent :]
    old = plan.messages[: -POLICY.keep_recent]
    assert all(is_cleared(m) for m in old if m.get("role") == "tool")
    assert not any(is_cleared(m) for m in recent)


def test_summary_gets_the_facts_it_lost() -> None:
    messages = chat(10)
    messages[3] = user("never touch /etc/passwd, deploy to https://example.com/x " + words(60))
    result = run(plan_compaction(situation(messages), COUNTER), "- a vague summary")
    note = next(m["content"] for m in result.messages if note_of(m))
    assert "/etc/passwd" in note
    assert "https://example.com/x" in note


def test_fallback_truncates_the_same_span() -> None:
    plan = plan_compaction(situation(chat(10), **ROOMY), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.fallback()
    assert result.strategy == "truncate"
    notes = [note_of(m) for m in result.messages if note_of(m)]
    assert len(notes) == 1
    assert str(notes[0]).startswith(f"[{len(plan.span)} earlier messages omitted]\n\nWhat the user")
    assert result.messages[-4:] == chat(10)[-4:]


def test_truncate_strategy_alone() -> None:
    # Forty rounds: more than the window holds even with their results as placeholders.
    plan = plan_compaction(situation(agent(40), strategy="truncate"), COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.strategy == "truncate"
    # An agent's chain has no user message to end on: the marker joins the task message.
    assert "earlier messages omitted]" in plan.messages[1]["content"]
    assert all(not str(m.get("content")).startswith("[tool result cleared") for m in plan.messages)


def test_truncation_takes_one_unit_more_to_end_right_before_a_user_message() -> None:
    # The first tool round alone reaches the target, but the span would then end before the
    # second round and its note be merged into the task (changing the pinned prefix): one
    # small unit more lets the note stand alone before the user's next message.
    messages = [
        system(),
        user("the task"),
        assistant_calls("c0"),
        tool_result("c0", words(500, "r")),
        assistant_calls("c1"),
        tool_result("c1", words(20, "r")),
        user("next one"),
        assistant("a " + words(40)),
        user("more " + words(40)),
        assistant("b " + words(40)),
        user("last"),
    ]
    plan = plan_compaction(situation(messages, window=800, strategy="truncate"), COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.messages[:2] == messages[:2]  # the task untouched
    assert note_of(plan.messages[2]) == "[4 earlier messages omitted]"
    assert plan.messages[3:] == messages[6:]


def test_rolling_summary_folds_the_previous_one() -> None:
    first = run(plan_compaction(situation(chat(10)), COUNTER), "- first summary")
    grown = [*first.messages, *chat(10)[2:]]
    plan = plan_compaction(situation(grown, notes=first.notes), COUNTER)
    assert isinstance(plan, NeedsSummary)
    prompt = plan.request["messages"][1]["content"]
    assert "to fold into yours" in prompt
    assert "- first summary" in prompt
    second = plan.complete("- second summary")
    notes = [m["content"] for m in second.messages if note_of(m)]
    assert len(notes) == 1
    assert "- second summary" in notes[0]


def test_rolling_summary_keeps_the_facts_of_the_previous_one() -> None:
    # The turns the first summary came from are gone by the second: a fact the second
    # summarizer drops must come back from the first summary, or it is lost for good.
    first = run(plan_compaction(situation(chat(10)), COUNTER), "- keep /srv/data/42.db")
    grown = [*first.messages, *chat(10)[2:]]
    plan = plan_compaction(situation(grown, notes=first.notes), COUNTER)
    assert isinstance(plan, NeedsSummary)
    assert all("/srv/data/42.db" not in str(m.get("content")) for m in plan.span)
    second = plan.complete("- a vague second summary")
    note = next(m["content"] for m in second.messages if note_of(m))
    assert "/srv/data/42.db" in note


def test_note_merged_into_first_user_is_not_piled_up() -> None:
    # In an agent's chain the message after the span is the assistant's: no role fits
    # between it and the task, so the note is merged into the task. The task is the running
    # turn's user message here (the only one), whose rounds overflow the window even with
    # their results as placeholders: the oldest
    # are folded, the note opens the task, the ask stays last. The next compaction must take
    # the note out again rather than pile a second one on.
    result = run(plan_compaction(situation(agent(40), strategy="truncate"), COUNTER))
    assert "release_running" in result.steps
    task = result.messages[1]["content"]
    first = re.match(r"\[(\d+) earlier messages omitted\]", task)
    assert first is not None
    assert task.endswith("\n\nthe task")
    grown = [*result.messages[:-1], *agent(40)[2:]]
    again = run(plan_compaction(situation(grown, strategy="truncate", notes=result.notes), COUNTER))
    task = again.messages[1]["content"]
    assert task.count("earlier messages omitted]") == 1
    assert task.endswith("\n\nthe task")
    second = re.match(r"\[(\d+) earlier messages omitted\]", task)
    assert second is not None
    assert int(second[1]) > int(first[1])  # it stands for both spans


def test_everything_pinned_is_nothing_to_remove() -> None:
    messages = [system(words(500)), user("the task " + words(400))]
    plan = plan_compaction(situation(messages), COUNTER)
    assert plan == Unchanged("nothing_to_remove", plan.tokens)  # type: ignore[union-attr]


def test_compacting_the_output_again_changes_nothing() -> None:
    result = run(plan_compaction(situation(chat(30)), COUNTER))
    again = plan_compaction(situation(result.messages, notes=result.notes), COUNTER)
    assert isinstance(again, Unchanged)
    forced = plan_compaction(situation(result.messages, force=True, notes=result.notes), COUNTER)
    assert isinstance(forced, Unchanged)
    assert forced.reason == "nothing_to_remove"


def test_max_context_turns_shrinks_old_turns_first() -> None:
    messages = [system(), user("q0")]
    for i in range(6):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(80)), assistant("a")]
        messages.append(user(f"q{i + 1}"))
    plan = plan_compaction(
        situation(
            messages,
            window=800,
            max_context_turns=2,
            keep_recent=2,
            compression_trigger=0.7,
            compaction_target=0.6,
        ),
        COUNTER,
    )
    assert isinstance(plan, Compacted)
    assert plan.strategy == "max_context_turns"
    assert sum(1 for m in plan.messages if role(m) == "tool") == 1  # the last two turns: q5, q6


# Properties over random conversations -----------------------------------------------------


@pytest.mark.parametrize("strategy", ["auto", "truncate"])
@settings(max_examples=300, deadline=None)
@given(messages=conversation())
def test_compacting_twice_changes_nothing(messages: list[Message], strategy: str) -> None:
    first = plan_compaction(situation(messages, window=500, strategy=strategy), COUNTER)
    if isinstance(first, Unchanged):
        return
    result = first.fallback() if isinstance(first, NeedsSummary) else first
    if not result.fits:
        return
    again = plan_compaction(
        situation(result.messages, window=500, strategy=strategy, notes=result.notes), COUNTER
    )
    assert isinstance(again, Unchanged)


# The emergency plan ------------------------------------------------------------------------


def test_emergency_halves_the_rejected_request_without_llm() -> None:
    messages = chat(6)  # well under the trigger: the provider's window was smaller
    result = plan_emergency(situation(messages), COUNTER)
    assert isinstance(result, Compacted)
    assert result.strategy == "emergency"
    assert result.tokens_after <= result.tokens_before // 2
    assert result.messages[:2] == messages[:2]
    assert is_well_formed(group_units(result.messages))


def test_emergency_fits_the_stated_limit() -> None:
    messages = chat(6)
    result = plan_emergency(situation(messages), COUNTER, stated_limit=200)
    assert isinstance(result, Compacted)
    assert result.tokens_after <= 200


def test_emergency_keeps_half_the_recent_window() -> None:
    messages = chat(6)
    result = plan_emergency(situation(messages, keep_recent=4, window=3000), COUNTER)
    assert isinstance(result, Compacted)
    assert result.messages[-2:] == messages[-2:]


def test_emergency_caps_a_huge_user_message_but_never_the_running_ask() -> None:
    earlier = [system(), user("task"), assistant(), user(words(3000)), assistant("ok")]
    messages = [*earlier, user("and now?")]
    result = plan_emergency(situation(messages, window=4000), COUNTER)
    assert isinstance(result, Compacted)
    assert any("cut from the middle of this message" in str(m["content"]) for m in result.messages)
    assert result.messages[0] == system()
    assert result.messages[-1] == user("and now?")
    # The ask the model answers now is the one the request overflows with: it goes as the
    # user sent it, and the provider's overflow reaches the client.
    asked = [system(), user("task"), assistant(), user(words(3000))]
    whole = plan_emergency(situation(asked, window=4000), COUNTER)
    forwarded = whole.messages if isinstance(whole, Compacted) else asked
    assert forwarded[-1] == asked[-1]


@pytest.mark.parametrize("parts", [1, 2])
def test_emergency_caps_a_huge_message_of_text_parts_as_it_caps_a_string(parts: int) -> None:
    # The Messages and Responses APIs carry a user's words as text parts.
    huge = words(3000)
    texts = [huge] if parts == 1 else [huge[: len(huge) // 2], huge[len(huge) // 2 :]]
    message = {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}
    messages = [system(), user("task"), assistant(), message, assistant("ok"), user("and now?")]
    result = plan_emergency(situation(messages, window=4000), COUNTER)
    assert isinstance(result, Compacted)
    assert any("cut from the middle of this message" in str(m["content"]) for m in result.messages)
    assert result.messages[-1] == user("and now?")
    # An image beside the words: the message is not flattened to text.
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    mixed = {**message, "content": [*message["content"], image]}
    kept = plan_emergency(situation([*messages[:3], mixed, *messages[4:]], window=4000), COUNTER)
    forwarded = kept.messages if isinstance(kept, Compacted) else messages
    assert not any("cut from the middle of this message" in str(m) for m in forwarded)


def test_emergency_with_nothing_to_remove_says_so() -> None:
    messages = [system(words(500)), user("task")]
    assert plan_emergency(situation(messages), COUNTER) == Unchanged(
        "nothing_to_remove", COUNTER.messages(messages) + COUNTER.tools(TOOLS)
    )
    malformed = [user(), tool_result("x")]
    assert plan_emergency(situation(malformed), COUNTER).reason == "malformed"  # type: ignore[union-attr]


@settings(max_examples=500, deadline=None)
@given(conversation(), st.integers(min_value=50, max_value=5000) | st.none())
def test_emergency_properties(messages: list[Message], limit: int | None) -> None:
    result = plan_emergency(situation(messages, window=100_000), COUNTER, stated_limit=limit)
    if isinstance(result, Unchanged):
        return
    assert is_well_formed(group_units(result.messages))
    assert same_role_pairs(result.messages) <= same_role_pairs(messages)
    assert subsequence_plus_notes(messages, result.messages) or any(
        "cut from the middle" in str(m.get("content")) for m in result.messages
    )
    assert result.tokens_after < result.tokens_before


def test_without_first_user_pin_the_task_can_go() -> None:
    messages = chat(10)
    result = run(plan_compaction(situation(messages, pin_first_user=False), COUNTER))
    assert messages[1] not in result.messages
    assert result.messages[0] == messages[0]


def test_turn_budget_not_enough_goes_on_to_the_next_layers() -> None:
    messages = [system(), user("q0")]
    for i in range(6):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(80)), assistant("a")]
        messages.append(user(f"q{i + 1} " + words(100)))
    plan = plan_compaction(situation(messages, window=800, max_context_turns=5), COUNTER)
    assert isinstance(plan, Compacted | NeedsSummary)
    assert run(plan).strategy != "max_context_turns"


def test_emergency_never_trims_a_result_into_something_bigger() -> None:
    messages = [user("the task"), assistant_calls("c1"), tool_result("c1", words(10, "data"))]
    result = plan_emergency(situation(messages, window=100_000), COUNTER)
    out = result.messages if isinstance(result, Compacted) else messages
    assert all("cut from the middle" not in str(m.get("content")) for m in out)


def test_summary_in_parts_folds_each_into_the_next() -> None:
    plan = plan_compaction(situation(chat(10)), COUNTER)
    assert isinstance(plan, NeedsSummary)
    assert plan.previous is None
    first = plan.request_for(plan.span[:2], None)
    second = plan.request_for(plan.span[2:], "- summary of part one")
    assert "reply 0" in first["messages"][1]["content"]
    assert "- summary of part one" in second["messages"][1]["content"]
    assert first["model"] == "m"


# Budgets in tokens, landing, the ledger ---------------------------------------------------


def budget_8k(calibration: float = 1.0) -> Budget:
    return request_budget(
        8192, {}, output_reserved=4096, margin_share=0.03, calibration=calibration
    )


def coding_agent(turns: int, result_size: int = 900) -> list[Message]:
    """A tool-heavy coding agent: each turn a user message, two calls with big results, a
    reply; facts stated in the first turns."""
    facts = ["Never open port 22.", "The budget is $500.", "Use ticket OPS-4821."]
    messages = [system("You are a coding agent."), user("The task: fix the parser.")]
    for i in range(turns):
        said = facts[i] if i < len(facts) else "Next step."
        messages += [
            user(said + " " + words(100, "please")),
            assistant_calls(f"a{i}"),
            tool_result(f"a{i}", words(result_size, f"r{i}")),
            assistant_calls(f"b{i}"),
            tool_result(f"b{i}", words(result_size, f"s{i}")),
            assistant(f"Done {i}. " + words(150, "ok")),
        ]
    return messages


def agent_situation(messages: list[Message], budget: Budget, **policy: Any) -> Situation:
    return Situation(messages, {"model": "m", **TOOLS}, ContextPolicy(**policy), budget)


@pytest.mark.parametrize("strategy", ["auto", "clear_tool_results", "summarize", "truncate"])
def test_every_strategy_lands_at_or_below_the_target(strategy: str) -> None:
    budget = budget_8k(calibration=1.1)
    situation = agent_situation(coding_agent(4), budget, strategy=strategy)
    result = run(plan_compaction(situation, COUNTER), "- useless")
    target = budget.tokens_at(ContextPolicy().compaction_target)
    assert result.tokens_after <= target
    assert result.steps
    assert result.strategy in result.steps
    assert result.messages[-1] == situation.messages[-1]
    assert is_well_formed(group_units(result.messages))


def test_the_recent_window_is_bounded_in_tokens_not_messages() -> None:
    # Ten messages of this agent are ~4,000 tokens: more than the target. The cut moves
    # forward over whole units; the newest exchange stays whole.
    messages = [*coding_agent(4)[:-1]]  # ends with a tool result
    result = run(plan_compaction(agent_situation(messages, budget_8k(), keep_recent=10), COUNTER))
    assert result.messages[-2:] == messages[-2:]
    assert result.tokens_after <= budget_8k().tokens_at(ContextPolicy().compaction_target)


def test_what_the_user_said_is_carried_verbatim_whatever_the_summary() -> None:
    result = run(plan_compaction(agent_situation(coding_agent(12), budget_8k()), COUNTER), "- x")
    block = next(str(m["content"]) for m in result.messages if note_of(m) or detach_note(m)[1])
    for fact in ("Never open port 22.", "The budget is $500.", "Use ticket OPS-4821."):
        assert fact in block


def test_the_newest_results_are_cut_to_head_and_tail_when_they_alone_are_too_big() -> None:
    messages = [system(), user("the task"), assistant_calls("c1"), tool_result("c1", words(9000))]
    budget = request_budget(8192, {}, output_reserved=4096, margin_share=0.03)
    asked = agent_situation(messages, budget)
    result = run(plan_compaction(asked, COUNTER))
    assert "trim_recent" in result.steps or "trim_tool_results" in result.steps
    assert result.messages[-1]["tool_call_id"] == "c1"
    assert "cut from the middle of this search result" in result.messages[-1]["content"]
    assert result.tokens_after <= target_of(asked)


def test_the_pinned_task_goes_to_the_ledger_when_it_keeps_the_target_out_of_reach() -> None:
    task = user("Never delete the prod database. " + "Some background here. " * 800)
    messages = [system(), task, assistant("ok"), user("go"), assistant("done " + words(200))]
    budget = request_budget(4096, {}, output_reserved=1024, margin_share=0.03)
    result = run(plan_compaction(agent_situation(messages, budget), COUNTER))
    assert "release_task" in result.steps
    block = next(str(m["content"]) for m in result.messages if note_of(m) or detach_note(m)[1])
    assert "- Never delete the prod database." in block
    assert result.tokens_after <= budget.tokens_at(ContextPolicy().compaction_target)


def test_the_newest_words_are_cut_only_to_fit_and_the_running_ask_never() -> None:
    budget = request_budget(4096, {}, output_reserved=1024, margin_share=0.03)
    limit = budget.tokens_at(1.0)
    fitting = [system(), user("the task"), assistant("ok"), user(words(limit - 200))]
    result = plan_compaction(agent_situation(fitting, budget), COUNTER)
    last = result.messages[-1] if isinstance(result, Compacted) else fitting[-1]
    assert last == fitting[-1]
    # An answer too big for the window is cut to fit (never just to reach the target)...
    too_big = [system(), user("the task"), user("go on"), assistant(words(2 * limit))]
    capped = run(plan_compaction(agent_situation(too_big, budget), COUNTER))
    assert "cap_recent" in capped.steps
    assert "cut from the middle of this message" in capped.messages[-1]["content"]
    assert capped.fits
    # ...but what the model answers now goes as the user sent it: a request that its running
    # ask alone overflows does not fit (the provider's overflow, or the proxy's, says so).
    asked = [system(), user("the task"), assistant("ok"), user(words(2 * limit))]
    kept = plan_compaction(agent_situation(asked, budget), COUNTER)
    forwarded = kept.messages if isinstance(kept, Compacted) else asked
    assert forwarded[-1] == asked[-1]
    assert not isinstance(kept, Compacted) or not kept.fits


def test_a_summary_longer_than_its_allowance_is_clipped() -> None:
    plan = plan_compaction(agent_situation(coding_agent(12), budget_8k()), COUNTER)
    assert isinstance(plan, NeedsSummary)
    allowed = plan.request["max_tokens"]
    result = plan.complete("\n".join(f"- line {i} " + words(20) for i in range(200)))
    block = next(str(m["content"]) for m in result.messages if note_of(m) or detach_note(m)[1])
    assert "- line 0 " in block
    assert "- line 199 " not in block
    assert COUNTER.text(block) < 3 * allowed
    assert result.tokens_after <= budget_8k().tokens_at(ContextPolicy().compaction_target)


def test_the_facts_a_summary_lost_are_bounded_by_their_allowance() -> None:
    messages = coding_agent(12)
    many = " ".join(f"/srv/data/file{i}.db" for i in range(400))
    messages[4] = tool_result("a0", many)
    plan = plan_compaction(agent_situation(messages, budget_8k()), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- nothing specific")
    block = next(str(m["content"]) for m in result.messages if note_of(m) or detach_note(m)[1])
    assert "/srv/data/file0.db" in block
    assert "/srv/data/file399.db" not in block


def test_a_cleared_result_keeps_the_names_it_mentioned() -> None:
    messages = coding_agent(4)
    messages[4] = tool_result("a0", "see src/app/main.py and v4.19.2 " + words(900))
    result = run(plan_compaction(agent_situation(messages, budget_8k()), COUNTER))
    cleared = [str(m["content"]) for m in result.messages if is_cleared(m)]
    text = "\n".join(cleared) + "\n".join(str(m["content"]) for m in result.messages)
    assert "src/app/main.py" in text


def test_an_appendix_of_lost_facts_too_long_for_its_allowance_keeps_the_first() -> None:
    messages = coding_agent(12)
    figures = " ".join(f"{i} ms" for i in range(2000))
    messages[7] = assistant(figures)
    plan = plan_compaction(agent_situation(messages, budget_8k()), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- nothing specific")
    block = next(str(m["content"]) for m in result.messages if note_of(m) or detach_note(m)[1])
    allowance = plan.request["max_tokens"] // 2
    appended = block[block.index("Details kept verbatim") :]
    assert "- 0 ms" in appended
    assert COUNTER.text(appended) <= allowance + COUNTER.text(block[block.rindex("Tools") :])


def test_a_conversation_whose_only_user_message_is_its_newest_can_still_be_compacted() -> None:
    # After the task went to the ledger, the newest request is the only real user message:
    # it is the pinned task and the recent window at once, and everything before it may go.
    note = "[1 earlier messages omitted]\n\nWhat the user said in those turns, verbatim:\n- x"
    messages = [
        system(),
        user(note),
        assistant_calls("c1"),
        tool_result("c1", "short"),
        assistant("done " + words(900)),
        user("next " + words(450)),
    ]
    budget = request_budget(2048, {}, output_reserved=1024, margin_share=0.03)
    result = run(plan_compaction(agent_situation(messages, budget), COUNTER))
    assert result.tokens_after <= budget.tokens_at(ContextPolicy().compaction_target)
    assert detach_note(result.messages[-1])[0] == messages[-1]  # the note opens it


def test_a_note_that_would_open_the_recent_window_is_folded_into_the_new_one() -> None:
    # An earlier note standing where the recent window would start stands for what is before
    # it: the new note folds it in (one block, its ledger in the order first said), where a
    # block written before it gave two, the newer holding the older words.
    earlier = "[2 earlier messages omitted]"
    messages = [
        system(),
        user("the task"),
        assistant("old " + words(300)),
        user("older question " + words(300)),
        assistant(earlier),
        user("the latest question"),
    ]
    ours = frozenset({note_digest(earlier)})
    forced = situation(messages, window=3000, keep_recent=2, force=True, notes=ours)
    result = run(plan_compaction(forced, COUNTER))
    assert result.messages[-1] == messages[-1]
    (note,) = [note_of(m) for m in result.messages if note_of(m)]
    assert note is not None
    assert stands_for(note) == 4  # the earlier note's two, and the two before it (the task stays)


def test_a_note_inside_the_recent_window_stays_where_it_is() -> None:
    # An earlier note standing inside the recent window (not opening it) is kept whole there;
    # the new note covers only what is evicted before the window.
    earlier = "[2 earlier messages omitted]"
    messages = [
        system(),
        user("the task"),
        assistant("old " + words(300)),
        user("older question " + words(30)),
        assistant(earlier),
        user("the latest question"),
    ]
    ours = frozenset({note_digest(earlier)})
    forced = situation(messages, window=3000, keep_recent=3, force=True, notes=ours)
    result = run(plan_compaction(forced, COUNTER))
    assert result.messages[-3:] == messages[-3:]
    assert sum(1 for m in result.messages if note_of(m)) == 2


def test_a_request_with_no_message_to_cut_is_left_as_it_is() -> None:
    # Found by the fuzz suite: an output reserve that leaves less usable input than the tools
    # take, and no message at all; with no unit to cut, the plan ends instead of indexing
    # nothing.
    budget = Budget(context_window=1000, output_reserve=995)
    situation = Situation(messages=[], body={"model": "m", **TOOLS}, policy=POLICY, budget=budget)
    plan = plan_compaction(situation, COUNTER)
    assert not isinstance(plan, Compacted) or plan.messages == []


# The artifact trail ----------------------------------------------------------------------------

BUILD = "7f3a9c2e41"
CHECKSUM = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def later_turns(first: int, count: int) -> list[Message]:
    """`coding_agent`'s turns from turn `first` on (its call ids go on), saying nothing."""
    messages: list[Message] = []
    for i in range(first, first + count):
        messages += [
            user("Next step. " + words(100, "please")),
            assistant_calls(f"a{i}"),
            tool_result(f"a{i}", words(900, f"r{i}")),
            assistant_calls(f"b{i}"),
            tool_result(f"b{i}", words(900, f"s{i}")),
            assistant(f"Done {i}. " + words(150, "ok")),
        ]
    return messages


def block_of(result: Compacted) -> str:
    """The compaction block of `result` (the notes the proxy wrote, without the task)."""
    return next(
        note
        for m in result.messages
        for note in ([note_of(m)] if note_of(m) else detach_notes(m)[1])
        if note is not None
    )


def test_what_only_an_early_tool_result_said_outlives_useless_summaries_and_emergencies() -> None:
    messages = coding_agent(12)
    messages[4] = tool_result("a0", f"build {BUILD} ok\nartifact {CHECKSUM}\n" + words(900))
    budget = budget_8k()
    body = {"model": "m", **TOOLS}
    situation = agent_situation(messages, budget)
    for turn in (12, 18, 24):  # the first compaction, then two re-compactions
        result = run(plan_compaction(situation, COUNTER), "- none")
        assert "summarize" in result.steps
        block = block_of(result)
        assert {BUILD, CHECKSUM} <= set(artifacts.read_trail(block))
        assert block.count(BUILD) == block.count(CHECKSUM) == 1
        grown = [*result.messages, *later_turns(turn, 6)]
        situation = Situation(grown, body, ContextPolicy(), budget, notes=result.notes)
    # The provider says the request overflowed a smaller window than it was told of.
    emergency = plan_emergency(situation, COUNTER, stated_limit=5000)
    assert isinstance(emergency, Compacted)
    assert "truncate" in emergency.steps
    block = block_of(emergency)
    assert block.startswith("[")
    assert " earlier messages omitted]" in block
    assert {BUILD, CHECKSUM} <= set(artifacts.read_trail(block))


def test_a_truncation_lists_what_its_calls_and_results_mentioned_newest_first() -> None:
    messages = [system(), user("the task")]
    for i in range(6):
        call = assistant_calls(f"c{i}", arguments={"path": f"src/mod_{i}.py"})
        messages += [call, tool_result(f"c{i}", f"PAY-{i} " + words(100, "r"))]
    messages += [assistant("done"), user("and the docs?")]  # the rounds are history now
    result = run(plan_compaction(situation(messages, window=800, strategy="truncate"), COUNTER))
    assert result.strategy == "truncate"
    block = block_of(result)
    assert block.startswith("[")
    trail = artifacts.read_trail(block)
    evicted = len(trail) // 2
    assert trail == [
        name for i in reversed(range(evicted)) for name in (f"PAY-{i}", f"src/mod_{i}.py")
    ]
    assert evicted >= 2


def test_an_identifier_the_trail_lists_is_not_appended_to_the_summary_again() -> None:
    messages = coding_agent(12)
    messages[4] = tool_result("a0", "wrote /srv/data/42.db and ABC-77 " + words(900))
    result = run(plan_compaction(agent_situation(messages, budget_8k()), COUNTER), "- vague")
    block = block_of(result)
    assert "/srv/data/42.db" in artifacts.read_trail(block)
    assert block.count("/srv/data/42.db") == block.count("ABC-77") == 1


def test_the_trail_keeps_the_newest_names_within_its_allowance() -> None:
    messages = [system(), user("the task")]
    for i in range(40):
        names = " ".join(f"ABC-{i}{j}" for j in range(6))
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", names + words(60, " r"))]
    messages.append(assistant("done"))
    plan = plan_compaction(situation(messages, window=3000, strategy="truncate"), COUNTER)
    result = run(plan)
    trail = artifacts.read_trail(block_of(result))
    allowance = Allowances.of(situation(messages, window=3000).budget, POLICY).artifacts
    assert 0 < artifacts.cost(trail, COUNTER.text) <= allowance
    # The newest removed result leads; the oldest had no room left.
    newest = max(int(name[4:-1]) for name in trail)
    assert trail[:6] == [f"ABC-{newest}{j}" for j in range(6)]
    assert "ABC-00" not in trail


def test_a_recompaction_puts_what_its_span_mentioned_before_the_trail_it_carries() -> None:
    messages = coding_agent(12)
    messages[4] = tool_result("a0", f"build {BUILD} " + words(900))
    budget, body = budget_8k(), {"model": "m", **TOOLS}
    first = run(plan_compaction(agent_situation(messages, budget), COUNTER), "- none")
    grown = [*first.messages, *later_turns(12, 6)]
    grown[-2] = tool_result("b17", "see v9.1.0 " + words(900))
    grown[len(first.messages) + 2] = tool_result("a12", "release v2.0.1 " + words(900))
    grown_situation = Situation(grown, body, ContextPolicy(), budget, notes=first.notes)
    second = run(plan_compaction(grown_situation, COUNTER), "- none")
    trail = artifacts.read_trail(block_of(second))
    assert trail == ["v2.0.1", BUILD]  # v9.1.0 is in the recent window, still said
    # Compacting the output again, forced, changes nothing: the trail reads back as written.
    again = replace(grown_situation, messages=second.messages, force=True, notes=second.notes)
    assert isinstance(plan_compaction(again, COUNTER), Unchanged)


def test_a_conversations_next_plans_find_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    found: list[str] = []

    def names(message: Message) -> tuple[str, ...]:
        found.append("names")
        return artifacts.names_of(message)

    def facts(message: Message) -> tuple[Ranked, ...]:
        found.append("facts")
        return ranked_facts(message)

    monkeypatch.setattr(mentions_module, "names_of", names)
    monkeypatch.setattr(mentions_module, "ranked_facts", facts)
    messages = coding_agent(12)
    cache = Mentions()
    first = run(plan_compaction(agent_situation(messages, budget_8k()), COUNTER, cache))
    assert "names" in found
    assert "facts" in found
    found.clear()
    again = run(plan_compaction(agent_situation(messages, budget_8k()), COUNTER, cache))
    assert again == first
    assert found == []  # every result's names and facts, every placeholder's, remembered
    grown = [*messages, *later_turns(12, 1)]
    run(plan_compaction(agent_situation(grown, budget_8k()), COUNTER, cache))
    # The new messages alone (and what the plan made of them).
    assert 0 < found.count("names") <= len(later_turns(12, 1)) + 2
    found.clear()
    emergency = plan_emergency(agent_situation(grown, budget_8k()), COUNTER, mentions=cache)
    assert isinstance(emergency, Compacted)
    assert found.count("names") <= 2


# The artifact trail over random agents ---------------------------------------------------------

NAMED = [
    *(f"PAY-{n}" for n in range(1, 5)),
    *(f"src/mod_{n}.py" for n in range(4)),
    *(f"v1.{n}.0" for n in range(4)),
    *(f"{n:04d}abcdef" for n in range(4)),
]


@st.composite
def naming_agent(draw: st.DrawFn, first: int = 0) -> list[Message]:
    """Tool rounds whose calls and results name files, tickets, versions and hashes."""
    messages: list[Message] = []
    for i in range(first, first + draw(st.integers(min_value=4, max_value=24))):
        said = " ".join(draw(st.lists(st.sampled_from(NAMED), max_size=3)))
        path = draw(st.sampled_from(NAMED))
        size = draw(st.integers(min_value=10, max_value=300))
        messages += [
            assistant_calls(f"n{i}", arguments={"path": path}),
            tool_result(f"n{i}", f"{said} {words(size, 'r')}"),
        ]
        if draw(st.booleans()):
            messages += [assistant(f"ok {i}"), user(f"next {i}")]
    return [*messages, assistant("done")]


def trail_of(result: Compacted) -> list[str]:
    notes = [block for block in (note_of(m) or detach_note(m)[1] for m in result.messages) if block]
    return artifacts.read_trail(notes[-1]) if notes else []


@settings(max_examples=60, deadline=None)
@given(
    naming_agent(),
    naming_agent(first=100),
    st.sampled_from([1500, 3000, 8000]),
    st.sampled_from(["auto", "truncate", "summarize"]),
)
def test_the_trail_lists_what_was_said_once_within_its_allowance_and_survives(
    agent: list[Message], more: list[Message], window: int, strategy: str
) -> None:
    messages = [system(), user("the task"), *agent]
    first = plan_compaction(situation(messages, window, strategy=strategy, force=True), COUNTER)
    if not isinstance(first, Compacted | NeedsSummary):
        return
    result = run(first, "- none")
    trail = trail_of(result)
    allowance = Allowances.of(situation(messages, window).budget, POLICY).artifacts
    assert set(trail) <= set(NAMED)
    assert len(trail) == len(set(trail))
    assert artifacts.cost(trail, COUNTER.text) <= allowance
    # Compacting the output again leaves it as it is.
    again = plan_compaction(situation(result.messages, window, notes=result.notes), COUNTER)
    assert isinstance(again, Unchanged) or run(again, "- none").messages == result.messages
    # Grown and compacted again (and in an emergency, whose trail has at least an eighth of
    # its target up to the floor), the trail carries what it listed as long as its allowance
    # holds all that was named.
    grown = [*result.messages, user("more"), *more]
    forced = situation(grown, window, strategy=strategy, force=True, notes=result.notes)
    recompacted = plan_compaction(forced, COUNTER)
    emergency = plan_emergency(forced, COUNTER)
    before = COUNTER.messages(grown) + COUNTER.tools(TOOLS)
    emergency_room = min(allowance, ARTIFACTS_FLOOR, before // 2 // 8)
    for later, room in (
        (
            recompacted if isinstance(recompacted, Unchanged) else run(recompacted, "- none"),
            allowance,
        ),
        (emergency, emergency_room),
    ):
        if not isinstance(later, Compacted):
            continue
        kept = trail_of(later)
        assert set(kept) <= set(NAMED)
        remaining = "\n".join(str(detach_note(m)[0]) for m in later.messages if not note_of(m))
        if artifacts.cost(NAMED, COUNTER.text) <= room:
            assert all(name in kept or name in remaining for name in trail)


def _stated(kind: str) -> list[Message]:
    """Twenty rounds, each opened by a user statement of `kind`: specific (a server, its
    rack) or chatter (nothing a later turn could need verbatim)."""
    messages = [system(), user("the task")]
    for i, letter in enumerate("abcdefghijklmnopqrst"):
        said = (
            f"Server {i} lives in rack R{i}-{i * 7} of hall B and serves billing."
            if kind == "specific"
            else f"I think the {letter} part went fine and we should move on."
        )
        messages += [user(said), assistant_calls(f"c{i}"), tool_result(f"c{i}", words(60))]
        messages.append(assistant("ok"))
    return [*messages, user("go on")]


def test_the_user_s_specifics_may_take_half_the_ledger_allowance_again_chatter_never() -> None:
    for kind in ("specific", "chatter"):
        asked = situation(_stated(kind), window=2000)
        allowance = Allowances.of(asked.budget, asked.policy, asked.fixed(COUNTER)).ledger
        result = run(plan_compaction(asked, COUNTER))
        kept = ledger.without_ledger(notes_in(result.messages)[-1])[1]
        cost = ledger.cost(kept, COUNTER.text)
        if kind == "specific":
            # Every server the evicted turns named is in the ledger, past its allowance.
            assert allowance < cost <= allowance * 3 // 2
            said = [s.text for s in kept]
            assert all(f"Server {i} lives in rack R{i}-{i * 7}" in str(said) for i in range(19))
        else:
            assert cost <= allowance
