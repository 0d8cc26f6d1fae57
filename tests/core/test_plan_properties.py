"""Properties of the compaction plan over generated agent conversations.

The conversations are what real agents send: a system prompt, a task, then turns of a user
message (often a rule, a fact or a preference), rounds of tool calls (parallel ones too)
whose results have log-normal sizes, and replies; now and then an instruction mid-way, and
now and then a broken one (an orphaned result, an unanswered call), which must be left alone.
Every strategy, windows from 2k to 200k, our count right or off by 10 % (calibration),
summaries good, useless, oversized or failed.

Each property runs the profile's number of examples: 100 in the suite (derandomized wherever
it runs, the `suite` Hypothesis profile), 600 in the `thorough` profile (tests/conftest.py),
which draws new ones each run. Before a change to the plan is resolved they run that way over
many seeds: `pytest tests/core/test_plan_properties.py --hypothesis-profile=thorough
--hypothesis-seed=N`. A case they find becomes an example test: the coverage gate counts
example tests alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core import statements as ledger
from proxy.core.budget import request_budget
from proxy.core.messages import Message, is_instruction, role
from proxy.core.plan import (
    Allowances,
    Compacted,
    NeedsSummary,
    Situation,
    Unchanged,
    plan_compaction,
)
from proxy.core.policy import STRATEGIES, ContextPolicy
from proxy.core.summary import SUMMARY_PREFIX, detach_note, note_of
from proxy.core.tool_results import is_tool_result
from proxy.core.units import group_units, is_well_formed
from tests import builders
from tests.core.alternation import matches, same_role_pairs, subsequence_plus_notes
from tests.core.words import COUNTER, TOOLS

STATEMENTS = (
    "Never open port {n} on the bastion.",
    "The budget is ${n}.",
    "Use ticket OPS-{n} for this work.",
    "I prefer answers without em-dashes.",
    "My timezone is America/Los_Angeles.",
    "The config lives at /srv/app{n}/settings.toml.",
    "Always run the migrations with --dry-run first.",
    "Deploy to region eu-west-{n}.",
    "The release is v4.{n}.2.",
    "Ask Priya before merging anything.",
    "Thanks, carry on.",
    "Next step please.",
)
_ids = itertools.count()


def lognormal_words(median: int) -> st.SearchStrategy[str]:
    """Text of a log-normal number of words around `median` (tool output sizes are)."""
    return st.floats(min_value=-2.0, max_value=2.0).map(
        lambda z: "data " * max(1, int(median * math.exp(0.8 * z)))
    )


@st.composite
def statement(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(STATEMENTS))
    return template.format(n=draw(st.integers(min_value=1, max_value=60)))


@st.composite
def tool_round(draw: st.DrawFn, median: int) -> list[Message]:
    count = draw(st.integers(min_value=1, max_value=3))
    ids = [f"call_{next(_ids)}" for _ in range(count)]
    results = [builders.tool_result(i, draw(lognormal_words(median))) for i in ids]
    return [builders.assistant_calls(*ids), *draw(st.permutations(results))]


@st.composite
def turn(draw: st.DrawFn, median: int) -> list[Message]:
    said = " ".join(draw(st.lists(statement(), min_size=1, max_size=3)))
    messages = [builders.user(said)]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        messages += draw(tool_round(median))
    if draw(st.booleans()) or len(messages) == 1:
        messages.append(builders.assistant("Done: " + "word " * draw(st.integers(0, 200))))
    if draw(st.integers(min_value=0, max_value=20)) == 0:
        messages.append(builders.system("Reminder: stay on the task."))
    return messages


@st.composite
def agent_conversation(draw: st.DrawFn) -> list[Message]:
    median = draw(st.sampled_from([30, 150, 600, 2500]))
    turns = draw(st.lists(turn(median), min_size=1, max_size=25))
    messages = [builders.system("You are a coding agent."), builders.user("The task: fix it.")]
    messages += list(itertools.chain.from_iterable(turns))
    if draw(st.integers(min_value=0, max_value=15)) == 0:
        messages.append(builders.tool_result("nobody"))  # an orphan: malformed
    return messages


@dataclass(frozen=True)
class Case:
    messages: list[Message]
    situation: Situation


@st.composite
def case(draw: st.DrawFn) -> Case:
    messages = draw(agent_conversation())
    window = draw(st.sampled_from([2048, 4096, 8192, 32_768, 131_072, 200_000]))
    policy = ContextPolicy(
        strategy=draw(st.sampled_from(STRATEGIES)),
        keep_recent=draw(st.sampled_from([1, 4, 10, 40])),
        pin_first_user=draw(st.booleans()),
    )
    budget = request_budget(
        window,
        {},
        output_reserved=4096,
        margin_share=0.03,
        calibration=draw(st.sampled_from([0.9, 1.0, 1.1])),
    )
    force = draw(st.booleans())
    return Case(messages, Situation(messages, TOOLS, policy, budget, force=force))


def finish(plan: NeedsSummary, how: str) -> Compacted:
    if how == "fails":
        return plan.fallback()
    if how == "useless":
        return plan.complete("The user wanted help.")
    if how == "oversized":
        return plan.complete("\n".join(f"- line {i} " + "x " * 30 for i in range(400)))
    return plan.complete("\n".join(f"- {m.get('content')}"[:200] for m in plan.span[:20]))


SUMMARIES = st.sampled_from(["good", "useless", "oversized", "fails"])


def compacted(situation: Situation, how: str) -> Compacted | Unchanged:
    plan = plan_compaction(situation, COUNTER)
    return finish(plan, how) if isinstance(plan, NeedsSummary) else plan


def total(messages: list[Message]) -> int:
    return COUNTER.messages(messages) + COUNTER.tools(TOOLS)


def _least_possible(
    messages: list[Message], allowances: Allowances, *, cut_text: bool = False
) -> int:
    """An upper bound of what the plan can always reach: the leading instructions, the
    tools, the whole compaction block's allowance, and what must stay of the running turn
    (its user message whole, its rounds with their tool results cut) or, without one, the
    newest unit so cut (its text too with `cut_text`: text is cut to fit, never to reach a
    target)."""
    head = list(itertools.takewhile(is_instruction, messages))
    newest = group_units(messages)[-1]
    users = [i for i, m in enumerate(messages) if role(m) == "user" and i >= len(head)]
    start = min(users[-1], newest.start) if users else newest.start
    kept = messages[start:]
    least = sum(
        min(COUNTER.message(m), 220)
        if is_tool_result(m)
        or (cut_text and isinstance(m.get("content"), str) and m is not messages[start])
        else COUNTER.message(m)
        for m in kept
    )
    block = allowances.ledger + allowances.artifacts + allowances.summary + allowances.facts + 64
    return COUNTER.messages(head) + COUNTER.tools(TOOLS) + block + least


def _words_outside_notes(messages: list[Message]) -> str:
    kept = [detach_note(m)[0] for m in messages if note_of(m) is None]
    return "\n".join(str(m.get("content")) for m in kept)


def _ledger_of(messages: list[Message]) -> list[str]:
    for message in messages:
        note = note_of(message) or detach_note(message)[1]
        if note is not None:
            return [s.text for s in ledger.without_ledger(note)[1]]
    return []


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_every_compaction_keeps_the_rules(case: Case, how: str) -> None:
    messages, situation = case.messages, case.situation
    result = compacted(situation, how)
    if not is_well_formed(group_units(messages)):
        assert result == Unchanged("malformed", total(messages))
        return
    if isinstance(result, Unchanged):
        return
    out = result.messages
    # No orphaned call or result, no new same-role pair for strict templates.
    assert is_well_formed(group_units(out))
    assert same_role_pairs(out) <= same_role_pairs(messages)
    # Leading instructions first, order kept, the newest unit present at the end.
    head = list(itertools.takewhile(is_instruction, messages))
    assert out[: len(head)] == head
    assert subsequence_plus_notes(messages, out)
    newest = group_units(messages)[-1]
    kept = out[len(out) - len(newest) :]
    assert all(matches(a, b) for a, b in zip(messages[newest.start :], kept, strict=True))
    # Honest numbers, and never bigger.
    assert result.tokens_after == total(out)
    assert result.fits == situation.budget.fits(result.tokens_after)
    assert result.tokens_after <= result.tokens_before
    assert result.steps or result.messages == messages  # none: a summary no smaller
    # Landing: at or below the target (in the room the head leaves, as the plan aims)
    # whenever that is possible at all.
    allowances = Allowances.of(situation.budget, situation.policy, situation.fixed(COUNTER))
    if _least_possible(messages, allowances) <= allowances.target:
        assert result.tokens_after <= allowances.target, result.steps
    # Fit: never above the usable input when cutting the newest messages could make it fit.
    if _least_possible(messages, allowances, cut_text=True) <= allowances.limit:
        assert result.tokens_after <= allowances.limit, result.steps


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_what_the_user_said_and_left_is_in_the_ledger(case: Case, how: str) -> None:
    messages, situation = case.messages, case.situation
    result = compacted(situation, how)
    if not isinstance(result, Compacted):
        return
    out = result.messages
    carried = _ledger_of(out)
    remaining = _words_outside_notes(out)
    allowances = Allowances.of(situation.budget, situation.policy, situation.fixed(COUNTER))
    everything = ledger.merged([], ledger.statements_of(messages))
    used = ledger.cost([ledger.Statement(t, 0) for t in carried], COUNTER.text)
    fitted = "fit_block" in result.steps
    for statement in everything:  # the latest value of each, deduplicated
        if statement.text in remaining or statement.text in carried:
            continue
        if fitted and statement.rank == ledger.OTHER:
            continue  # chatter the block gave up to land on its target
        # Left out only when the ledger had no room for it.
        assert used + COUNTER.text(statement.text) + 2 > allowances.ledger, statement
    # The user's specifics may take half the allowance again; chatter never.
    assert used <= max(allowances.ledger * 3 // 2, 0)


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_compacting_twice_changes_nothing(case: Case, how: str) -> None:
    first = compacted(case.situation, how)
    if not isinstance(first, Compacted):
        return
    # Nothing depends on time or chance: the same request compacts to the same bytes.
    assert compacted(case.situation, how) == first
    situation = Situation(
        first.messages, TOOLS, case.situation.policy, case.situation.budget, notes=first.notes
    )
    again = compacted(situation, how)
    assert isinstance(again, Unchanged) or again.messages == first.messages, again


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), st.lists(turn(150), min_size=1, max_size=12), SUMMARIES)
def test_the_ledger_survives_recompaction(case: Case, more: list[list[Message]], how: str) -> None:
    first = compacted(case.situation, how)
    if not isinstance(first, Compacted):
        return
    carried = _ledger_of(first.messages)
    grown = [*first.messages, *itertools.chain.from_iterable(more)]
    situation = Situation(
        grown, TOOLS, case.situation.policy, case.situation.budget, force=True, notes=first.notes
    )
    second = compacted(situation, how)
    if not isinstance(second, Compacted):
        return
    allowances = Allowances.of(situation.budget, situation.policy)
    everything = ledger.merged([], ledger.statements_of(grown))
    # One compaction block, never two, never one inside another.
    everything_said = "\n".join(str(m.get("content")) for m in second.messages)
    assert everything_said.count(ledger.LEDGER_HEADING) <= 1
    assert everything_said.count(SUMMARY_PREFIX) <= 1
    if ledger.cost(everything, COUNTER.text) > allowances.ledger:
        return  # a full ledger drops by priority; only the room for all promises all
    remaining = _words_outside_notes(second.messages)
    again = _ledger_of(second.messages)
    updated = {s.text for s in everything}
    for text in carried:
        if text in updated:
            assert text in again or text in remaining, text
