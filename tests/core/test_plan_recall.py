"""The plan with recall on (`Situation.recall`): every placeholder, cut and note names the id of
what it stands for, and `Compacted.recalls` holds what each id names; with recall off the
texts say nothing of it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from proxy.core.messages import Message, text
from proxy.core.plan import (
    Compacted,
    NeedsSummary,
    Situation,
    plan_compaction,
    plan_emergency,
)
from proxy.core.policy import ContextPolicy
from proxy.core.recall import TOOL, ids_in, reference
from proxy.core.summary import SUMMARY_PREFIX, detach_note, note_of
from proxy.core.tool_results import is_cleared, is_trimmed
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.test_plan import (
    ROOMY,
    agent,
    agent_situation,
    budget_8k,
    chat,
    coding_agent,
    run,
    situation,
    target_of,
    words,
)
from tests.core.test_plan_properties import SUMMARIES, Case, case, compacted
from tests.core.words import COUNTER

SCOPE = "tenant-1/session-1"


def recalling(asked: Situation, scope: str = SCOPE) -> Situation:
    return replace(asked, recall=scope)


def named_ids(messages: list[Message]) -> list[str]:
    return [rid for m in messages for rid in ids_in(text(m))]


def the_note(result: Compacted) -> str:
    """The text of the proxy's note in `result` (standalone, or opening a message)."""
    for message in result.messages:
        note = note_of(message) or detach_note(message)[1]
        if note is not None:
            return note
    raise AssertionError("no note")


def answered(calls: int) -> list[Message]:
    """`agent(calls)` and the user's next ask: the chain is an earlier turn's, whose results
    are cleared (a running turn's are cut, never cleared)."""
    return [*agent(calls), user("and the docs?")]


def cleared(result: Compacted) -> list[tuple[int, Message]]:
    return [(i, m) for i, m in enumerate(result.messages) if is_cleared(m)]


# --- recall off ------------------------------------------------------------------------------


def test_recall_off_placeholders_ask_for_the_tool_again() -> None:
    result = plan_compaction(situation(answered(9)), COUNTER)
    assert isinstance(result, Compacted)
    placeholders = [str(m["content"]) for _, m in cleared(result)]
    assert placeholders
    assert all(p.endswith("; call it again if needed]") for p in placeholders)
    assert TOOL not in json.dumps(result.messages)
    assert result.recalls == {}


@pytest.mark.parametrize("how", ["summary", "fallback"])
def test_recall_off_notes_say_nothing_of_it(how: str) -> None:
    plan = plan_compaction(situation(chat(10), **ROOMY), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.complete("- the summary") if how == "summary" else plan.fallback()
    assert TOOL not in json.dumps(result.messages)
    assert result.recalls == {}


def test_recall_off_a_cut_result_says_nothing_of_it() -> None:
    messages = [
        user("task"),
        assistant_calls("c1"),
        tool_result("c1", words(900, "r")),
        assistant(),
    ]
    result = plan_compaction(situation(messages, tool_result_max_share=0.3), COUNTER)
    assert isinstance(result, Compacted)
    assert is_trimmed(result.messages[2])
    assert TOOL not in json.dumps(result.messages)
    assert result.recalls == {}


# --- placeholders and cuts -------------------------------------------------------------------


def test_every_cleared_placeholder_names_the_id_of_its_original() -> None:
    messages = answered(9)
    result = plan_compaction(recalling(situation(messages)), COUNTER)
    assert isinstance(result, Compacted)
    assert result.strategy == "clear_tool_results"
    placeholders = cleared(result)
    assert placeholders
    for index, placeholder in placeholders:
        body = str(placeholder["content"])
        (rid,) = ids_in(body)
        assert body.endswith(f"; {reference(rid)} returns it]")
        assert "call it again" not in body
        found = result.recalls[rid]
        assert found == (messages[index],)
        assert found[0] is messages[index]  # the client's own object, as it came
    assert len({rid for _, m in placeholders for rid in ids_in(text(m))}) == len(placeholders)


def test_every_id_the_result_names_is_a_key_of_its_recalls() -> None:
    result = plan_compaction(recalling(situation(agent(9))), COUNTER)
    assert isinstance(result, Compacted)
    assert set(named_ids(result.messages)) == set(result.recalls)


def test_a_result_kept_whole_gets_no_recall() -> None:
    # A short result is not cleared (its placeholder would be no smaller): no id stands for it.
    messages = answered(9)
    messages[3] = tool_result("c0", "ok")
    result = plan_compaction(recalling(situation(messages)), COUNTER)
    assert isinstance(result, Compacted)
    assert result.messages[3] == messages[3]
    assert (messages[3],) not in result.recalls.values()


def test_a_cut_result_names_the_id_of_its_whole_text() -> None:
    messages = [
        user("task"),
        assistant_calls("c1"),
        tool_result("c1", words(900, "r")),
        assistant(),
    ]
    result = plan_compaction(recalling(situation(messages, tool_result_max_share=0.3)), COUNTER)
    assert isinstance(result, Compacted)
    cut = result.messages[2]
    assert is_trimmed(cut)
    (rid,) = ids_in(text(cut))
    assert f"{reference(rid)} returns the whole search result" in text(cut)
    assert result.recalls == {rid: (messages[2],)}


def test_a_result_cut_and_cleared_in_one_plan_keeps_the_cuts_id() -> None:
    messages = [system(), user("task"), assistant_calls("c1"), tool_result("c1", words(900, "r"))]
    for i in range(2, 12):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(150, "s"))]
    messages += [assistant("done"), user("and the docs?")]
    asked = recalling(situation(messages, window=3000, tool_result_max_share=0.2))
    result = run(plan_compaction(asked, COUNTER))
    assert result.steps[:2] == ("trim_tool_results", "clear_tool_results")
    placeholder = result.messages[3]
    assert is_cleared(placeholder)
    (rid,) = ids_in(text(placeholder))
    # The id stands for the original, not for the cut the placeholder replaced.
    assert result.recalls[rid] == (messages[3],)


def test_a_result_cut_earlier_and_cleared_later_keeps_the_cuts_id() -> None:
    messages = [system(), user("task"), assistant_calls("c1"), tool_result("c1", words(900, "r"))]
    first = plan_compaction(
        recalling(situation([*messages, assistant()], tool_result_max_share=0.3)), COUNTER
    )
    assert isinstance(first, Compacted)
    (rid,) = ids_in(text(first.messages[3]))
    assert first.recalls[rid] == (messages[3],)
    grown = list(first.messages)
    for i in range(2, 8):
        grown += [user(f"q{i}"), assistant_calls(f"c{i}"), tool_result(f"c{i}", words(60, "s"))]
        grown.append(assistant("ok"))
    asked = recalling(situation(grown, strategy="clear_tool_results", force=True))
    second = run(plan_compaction(asked, COUNTER))
    assert is_cleared(second.messages[3])
    assert ids_in(text(second.messages[3])) == [rid]
    # The store has the original under `rid` from the first compaction; the second never
    # makes it stand for the cut.
    assert second.recalls.get(rid, first.recalls[rid]) == first.recalls[rid]


def test_a_result_cut_before_recall_was_on_gets_the_id_of_the_cut() -> None:
    """A result cut when recall was off names no id of its original, which the proxy never
    kept: when a later compaction with recall on clears it, its id stands for the cut, the
    most the archive can give back."""
    messages = [system(), user("task"), assistant_calls("c1"), tool_result("c1", words(900, "r"))]
    first = plan_compaction(situation([*messages, assistant()], tool_result_max_share=0.3), COUNTER)
    assert isinstance(first, Compacted)
    cut = first.messages[3]
    assert is_trimmed(cut)
    assert not ids_in(text(cut))
    grown = list(first.messages)
    for i in range(2, 8):
        grown += [user(f"q{i}"), assistant_calls(f"c{i}"), tool_result(f"c{i}", words(60, "s"))]
        grown.append(assistant("ok"))
    asked = recalling(situation(grown, strategy="clear_tool_results", force=True))
    second = run(plan_compaction(asked, COUNTER))
    assert is_cleared(second.messages[3])
    (rid,) = ids_in(text(second.messages[3]))
    assert second.recalls[rid] == (cut,)


def test_a_cut_json_array_names_the_id_that_returns_every_item() -> None:
    items = [{"id": i, "title": f"result number {i}"} for i in range(300)]
    messages = [
        user("task"),
        assistant_calls("c1"),
        tool_result("c1", json.dumps(items)),
        assistant(),
    ]
    result = plan_compaction(recalling(situation(messages, tool_result_max_share=0.3)), COUNTER)
    assert isinstance(result, Compacted)
    cut = text(result.messages[2])
    assert "items (the first" in cut
    (rid,) = ids_in(cut)
    assert f"{reference(rid)} returns every item; or ask for the rest" in cut
    assert result.recalls == {rid: (messages[2],)}


# --- notes -----------------------------------------------------------------------------------


def test_a_truncation_marker_names_one_id_for_the_evicted_span() -> None:
    messages = chat(10)
    plan = plan_compaction(recalling(situation(messages, **ROOMY)), COUNTER)
    assert isinstance(plan, NeedsSummary)
    result = plan.fallback()
    note = the_note(result)
    (rid,) = ids_in(note)
    assert note.startswith(f"[{len(plan.span)} earlier messages omitted] {reference(rid)}")
    assert "returns them word for word" in note
    span = result.recalls[rid]
    assert len(span) == len(plan.span)
    start = messages.index(span[0])
    assert list(span) == messages[start : start + len(span)]
    assert set(result.recalls) == {rid}


def test_a_summary_names_the_same_id_as_the_truncation_would() -> None:
    asked = recalling(situation(chat(10), **ROOMY))
    plan = plan_compaction(asked, COUNTER)
    assert isinstance(plan, NeedsSummary)
    summarized = plan.complete("- the summary")
    note = the_note(summarized)
    assert note.startswith(SUMMARY_PREFIX)
    (rid,) = ids_in(note)
    assert f"if something you need is missing, {reference(rid)} returns them" in note
    assert "ask the user" not in note
    again = plan_compaction(asked, COUNTER)
    assert isinstance(again, NeedsSummary)
    assert set(again.fallback().recalls) == {rid}
    assert summarized.recalls[rid] == tuple(plan.span)


def test_the_truncate_strategy_names_the_span_in_the_marker() -> None:
    messages = agent(40)  # more rounds than the window holds as placeholders
    result = plan_compaction(recalling(situation(messages, strategy="truncate")), COUNTER)
    assert isinstance(result, Compacted)
    block = text(result.messages[1])
    # The marker's own id first (the running turn's calls it lists name their results').
    rid = ids_in(block)[0]
    assert f"earlier messages omitted] {reference(rid)}" in block
    assert all(m in messages for m in result.recalls[rid])


def test_ids_depend_on_the_conversations_scope() -> None:
    one = plan_compaction(recalling(situation(agent(9)), "tenant-1/a"), COUNTER)
    other = plan_compaction(recalling(situation(agent(9)), "tenant-1/b"), COUNTER)
    assert isinstance(one, Compacted)
    assert isinstance(other, Compacted)
    assert not set(one.recalls) & set(other.recalls)
    assert sorted(map(str, one.recalls.values())) == sorted(map(str, other.recalls.values()))


# --- stability and landing -------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["auto", "clear_tool_results", "summarize", "truncate"])
def test_the_same_situation_compacts_to_the_same_bytes(strategy: str) -> None:
    asked = recalling(agent_situation(coding_agent(8), budget_8k(), strategy=strategy))
    first = run(plan_compaction(asked, COUNTER), "- the summary")
    second = run(plan_compaction(asked, COUNTER), "- the summary")
    assert named_ids(first.messages)
    assert json.dumps(first.messages) == json.dumps(second.messages)
    assert first.recalls == second.recalls


@pytest.mark.parametrize("strategy", ["auto", "clear_tool_results", "summarize", "truncate"])
def test_recall_lands_at_or_below_the_target_as_without_it(strategy: str) -> None:
    without = agent_situation(coding_agent(4), budget_8k(calibration=1.1), strategy=strategy)
    asked = recalling(without)
    result = run(plan_compaction(asked, COUNTER), "- useless")
    plain = run(plan_compaction(without, COUNTER), "- useless")
    target = target_of(asked)
    assert plain.tokens_after <= target
    assert result.tokens_after <= target
    assert result.tokens_after <= budget_8k(1.1).tokens_at(ContextPolicy().compaction_target)
    assert result.steps == plain.steps
    assert named_ids(result.messages)


def test_an_emergency_names_what_it_removed() -> None:
    messages = coding_agent(6)
    result = plan_emergency(recalling(agent_situation(messages, budget_8k())), COUNTER)
    assert isinstance(result, Compacted)
    named = set(named_ids(result.messages))
    assert named
    assert named == set(result.recalls)
    for found in result.recalls.values():
        assert all(m in messages for m in found)


def test_a_span_evicted_after_clearing_leads_to_the_originals() -> None:
    """The span's id stands for the span as the plan had it (its results cleared); each
    placeholder in it names an id of its own, which `recalls` holds too: a recall of the span,
    then of one of its results, gets the client's original result."""
    messages = coding_agent(12)
    asked = recalling(agent_situation(messages, budget_8k(), strategy="auto"))
    result = run(plan_compaction(asked, COUNTER), "- useless")
    assert result.steps == ("clear_tool_results", "summarize")
    assert _leads_to_originals(result, messages)


def _leads_to_originals(result: Compacted, messages: list[Message]) -> bool:
    """Whether every message a recall returns is the client's, or names ids `recalls` holds."""
    for found in result.recalls.values():
        for message in found:
            if message in messages:
                continue
            if not set(ids_in(text(message))) <= set(result.recalls):
                return False
    return True


# --- properties ------------------------------------------------------------------------------


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_every_id_a_compaction_names_can_be_recalled(case: Case, how: str) -> None:
    result = compacted(recalling(case.situation), how)
    if not isinstance(result, Compacted):
        assert not isinstance(result, NeedsSummary)
        return
    assert set(named_ids(result.messages)) <= set(result.recalls)
    assert all(found for found in result.recalls.values())


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_what_an_id_stands_for_leads_to_the_clients_own_messages(case: Case, how: str) -> None:
    result = compacted(recalling(case.situation), how)
    if not isinstance(result, Compacted):
        return
    assert all(isinstance(found, tuple) for found in result.recalls.values())
    assert _leads_to_originals(result, list(case.messages))


@pytest.mark.parametrize("how", ["good", "useless", "fails"])
def test_a_later_compaction_leads_back_through_the_earlier_ones(how: str) -> None:
    """The second compaction folds the first one's note: the id it names for its span leads
    to that note (standalone in the span, or taken out of the message it was merged into),
    whose own id leads to what the first compaction removed."""
    whole = coding_agent(20)
    first = compacted(recalling(agent_situation(whole[:62], budget_8k())), how)
    assert isinstance(first, Compacted)
    earlier = set(named_ids(first.messages))
    assert earlier
    grown = [*first.messages, *whole[62:]]
    asked = replace(recalling(agent_situation(grown, budget_8k())), notes=first.notes)
    second = compacted(asked, how)
    assert isinstance(second, Compacted)
    reachable = set(named_ids(second.messages))
    for found in second.recalls.values():
        reachable.update(named_ids(list(found)))
    assert earlier <= reachable


def test_the_summary_written_later_of_a_truncation_names_the_markers_id() -> None:
    """A truncation's dropped span is summarized afterwards and folded into the next
    compaction in the marker's place: it names the marker's id, so the chain of recalls
    through the compactions is not cut there."""
    messages = coding_agent(12)
    result = compacted(recalling(agent_situation(messages, budget_8k())), "fails")
    assert isinstance(result, Compacted)
    assert result.dropped is not None
    marker_id = ids_in(the_note(result))[0]
    assert result.dropped.recall == marker_id
    assert reference(marker_id) in result.dropped.note("- the summary")
    assert marker_id in result.recalls
