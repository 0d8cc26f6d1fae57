"""The plan's floors, over every client shape (tests/core/client_shapes.py): what it never
does, whatever the window, the strategy, the summary or the landing.

- The running turn's user message (the last user message: what the model answers now) is
  forwarded as the user sent it, as the last user message: whole, never cut, folded into the
  block or followed by it (where the block must be merged into it, the block opens it).
- The client's working set (aider's files message, re-sent on every request) is forwarded
  whole, in place, whenever the request can hold it whole: cut only when, put back whole, the
  request would not fit the usable input.
- Every call the running turn made is forwarded, or listed in the block (its name, its
  arguments, the id that recalls its result), however short the block had to be made.
- No round of the running turn is folded while the request could hold them all, each older
  result as its placeholder (or whole, when short) and the newest as forwarded.
- The block's ledger is the user's words, in the order first said: no line of a paste is a
  statement of it (a paste is named in one line, with its recall id).

The properties run the profile's number of examples (tests/conftest.py); before a change to
the plan is resolved, over many seeds: `pytest tests/core/test_plan_floors.py
--hypothesis-profile=thorough --hypothesis-seed=N`. A case they find becomes an example test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core import artifacts, pastes, turn_calls
from proxy.core import statements as ledger
from proxy.core.budget import Budget, request_budget
from proxy.core.digests import digest
from proxy.core.messages import Message, role, text, tool_calls
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction, plan_emergency
from proxy.core.plan.layers import WORTH_SHARE
from proxy.core.plan.situation import Allowances
from proxy.core.policy import STRATEGIES, ContextPolicy
from proxy.core.room import in_room
from proxy.core.statements import Statement
from proxy.core.summary import detach_notes, note_digest, notes_in
from proxy.core.tool_results import clear
from tests.core.client_shapes import SHAPES
from tests.core.test_plan_properties import SUMMARIES, finish
from tests.core.words import COUNTER

LEAST_RESULT = 128
"""A result no longer than this (our count) is left whole: a placeholder would save little."""


@dataclass(frozen=True)
class Case:
    shape: str
    messages: list[Message]
    situation: Situation
    working: frozenset[bytes] = frozenset()
    """The client's working set (whether or not the situation could tell it)."""


@st.composite
def case(draw: st.DrawFn) -> Case:
    shape = draw(st.sampled_from(SHAPES))
    messages = draw(shape.messages())
    window = draw(st.sampled_from([2048, 4096, 8192, 16_384, 32_768, 131_072]))
    policy = ContextPolicy(
        strategy=draw(st.sampled_from(STRATEGIES)),
        keep_recent=draw(st.sampled_from([1, 4, 10, 40])),
        pin_first_user=draw(st.booleans()),
    )
    reserve = draw(st.sampled_from([1024, 4096]))
    budget = request_budget(window, {}, output_reserved=reserve, margin_share=0.03)
    body = shape.body(budget.tokens_at(1.0))
    force, working = draw(st.booleans()), shape.working(messages)
    # A client's first request: nothing before it tells its working set apart.
    told = working if draw(st.booleans()) else frozenset()
    situation = Situation(messages, body, policy, budget, force=force, working=told)
    return Case(shape.name, messages, situation, working)


def running_ask(messages: list[Message]) -> Message | None:
    return next((m for m in reversed(messages) if role(m) == "user"), None)


def forwarded_as_sent(ask: Message, forwarded: list[Message]) -> bool:
    """Whether `ask` is the last user message of `forwarded`, as it was sent: alone, or
    opened by the proxy's block (what a merge must do), never cut or followed by a note."""
    last = running_ask(forwarded)
    if last is None:
        return False
    if last == ask:
        return True
    restored, notes = detach_notes(last)
    return restored == ask and bool(notes) and text(last).endswith(text(ask))


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_the_running_ask_is_forwarded_as_sent(case: Case, how: str) -> None:
    ask = running_ask(case.messages)
    plan = plan_compaction(case.situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if ask is None or not isinstance(result, Compacted):
        return
    assert forwarded_as_sent(ask, result.messages), (case.shape, result.steps)


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case())
def test_the_running_ask_is_forwarded_as_sent_after_an_overflow(case: Case) -> None:
    ask = running_ask(case.messages)
    result = plan_emergency(case.situation, COUNTER)
    if ask is None or not isinstance(result, Compacted):
        return
    assert forwarded_as_sent(ask, result.messages), (case.shape, result.steps)


def block_ledger(result: Compacted) -> list[Statement]:
    """The ledger of the newest block the proxy wrote in `result` ([] if none)."""
    ours = [note for note in notes_in(result.messages) if note_digest(note) in result.notes]
    return ledger.without_ledger(ours[-1])[1] if ours else []


def pasted_lines(messages: list[Message]) -> set[str]:
    """Every line the users pasted (`proxy.core.pastes`), less what they also said in words."""
    found: set[str] = set()
    for message in messages:
        if role(message) == "user":
            body = text(message)
            found.update(
                line.strip()
                for span in pastes.spans(body)
                for line in body[span.start : span.end].split("\n")
            )
    said = {s.text for m in messages for s in ledger.message_statements(m, False)}
    return found - said


def check_the_ledger(messages: list[Message], result: Compacted) -> None:
    kept = block_ledger(result)
    words = [s for s in kept if s.rank != ledger.PASTE]
    # No line of a paste is a statement: a paste is named in one line of its own.
    assert not {s.text for s in words} & pasted_lines(messages)
    assert len(kept) - len(words) <= sum(role(m) == "user" for m in messages)
    # In the order first said: as every statement merged at once lists them.
    order = {s.text: i for i, s in enumerate(ledger.merged([], ledger.statements_of(messages)))}
    places = [order[s.text] for s in words]
    assert places == sorted(places), [s.text for s in words]


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_the_ledger_is_the_user_s_words_in_first_said_order(case: Case, how: str) -> None:
    plan = plan_compaction(case.situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if isinstance(result, Compacted):
        check_the_ledger(case.messages, result)


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case())
def test_the_ledger_is_the_user_s_words_in_first_said_order_after_an_overflow(case: Case) -> None:
    result = plan_emergency(case.situation, COUNTER)
    if isinstance(result, Compacted):
        check_the_ledger(case.messages, result)


def check_the_working_set(case: Case, result: Compacted) -> None:
    working = [m for m in case.messages if digest(m) in case.working]
    if not working:
        return
    latest = working[-1]
    forwarded = [detach_notes(m)[0] for m in result.messages]
    if latest in forwarded:
        return
    # Never folded into the block; cut only when the request could not hold it whole.
    opening = text(latest).split("\n", 1)[0]
    found = [i for i, m in enumerate(forwarded) if text(m).startswith(opening)]
    assert len(found) == 1, (result.steps, [text(m)[:50] for m in forwarded])
    at = found[0]
    restored = list(result.messages)
    restored[at] = latest
    tools = COUNTER.tools(case.situation.body)
    assert COUNTER.messages(restored) + tools > case.situation.budget.tokens_at(1.0), result.steps


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_the_working_set_is_forwarded_whole_while_it_fits(case: Case, how: str) -> None:
    plan = plan_compaction(case.situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if isinstance(result, Compacted):
        check_the_working_set(case, result)


def check_the_turn_calls(case: Case, result: Compacted) -> None:
    ask = running_ask(case.messages)
    if ask is None:
        return
    start = max(i for i, m in enumerate(case.messages) if m is ask)
    made = [c for m in case.messages[start:] for c in tool_calls(m)]
    kept = {c.get("id") for m in result.messages for c in tool_calls(m)}
    folded = [c for c in made if c.get("id") not in kept]
    if not folded:
        return
    ours = [note for note in notes_in(result.messages) if note_digest(note) in result.notes]
    rest, _ = ledger.without_ledger(ours[-1])
    _, listed = turn_calls.without_calls(artifacts.without_trail(rest)[0])
    for call in folded:
        function = call["function"]
        assert any(line.startswith(f"{function['name']}(") for line in listed), listed
    assert len(listed) >= len(folded)


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_every_call_of_the_running_turn_is_forwarded_or_listed(case: Case, how: str) -> None:
    plan = plan_compaction(case.situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if isinstance(result, Compacted):
        check_the_turn_calls(case, result)


def check_the_turn_rounds(case: Case, result: Compacted) -> None:
    ask = running_ask(case.messages)
    if ask is None:
        return
    start = max(i for i, m in enumerate(case.messages) if m is ask)
    kept = {c.get("id") for m in result.messages for c in tool_calls(m)}
    turn = case.messages[start + 1 :]
    if all(c.get("id") in kept for m in turn for c in tool_calls(m)):
        return
    # The request with every round back at its least: the forwarded head and block, the ask,
    # each call, each older result as its placeholder (whole when short), the newest as sent.
    at = max(i for i, m in enumerate(result.messages) if role(m) == "user")
    least = [*result.messages[: at + 1]]
    results = [i for i, m in enumerate(turn) if role(m) == "tool"]
    for index, message in enumerate(turn):
        if role(message) == "tool" and index != results[-1]:
            size = COUNTER.message(message)
            if size > LEAST_RESULT:
                message = clear(message, None, size, recall="rc_0123456789abcdef")
        least.append(message)
    tools = COUNTER.tools(case.situation.body)
    limit = case.situation.budget.tokens_at(1.0)
    assert COUNTER.messages(least) + tools > limit, (result.steps, len(turn))


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(case(), SUMMARIES)
def test_no_round_of_the_running_turn_is_folded_while_they_fit_at_their_least(
    case: Case, how: str
) -> None:
    plan = plan_compaction(case.situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if isinstance(result, Compacted):
        check_the_turn_rounds(case, result)


@st.composite
def fitting_case(draw: st.DrawFn) -> Case:
    """A case whose request, not forced, lies between its trigger and the usable input: the
    usable input chosen for it (from the head's size, so that the trigger is of the room
    the head leaves, as the plan reckons it)."""
    drawn = draw(case())
    situation = drawn.situation
    tokens = COUNTER.messages(drawn.messages) + COUNTER.tools(situation.body)
    head = situation.fixed(COUNTER) * situation.budget.available
    trigger = situation.policy.compression_trigger
    # At `usable` tokens, the request's pressure is `where` of the way from the trigger in
    # room, t + (1 - t) x head / usable, to 1.
    where = draw(st.floats(0.0, 0.999))
    usable = (tokens - (1 - trigger) * (1 - where) * head) / (trigger + where * (1 - trigger))
    usable = max(int(usable), 1)
    reserve, margin = situation.budget.output_reserve, math.ceil(usable * 0.03)
    budget = Budget(usable + reserve + margin, reserve, margin=margin)
    return replace(drawn, situation=replace(situation, budget=budget, force=False))


@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(fitting_case(), SUMMARIES)
def test_a_request_that_fits_is_compacted_to_its_target_or_by_enough_to_be_worth_it(
    case: Case, how: str
) -> None:
    # A compaction costs the prompt cache from its first change on: one that lands short of
    # the target freeing a result's worth would be followed by another a request later.
    situation = case.situation
    budget, policy = situation.budget, situation.policy
    before = COUNTER.messages(case.messages) + COUNTER.tools(situation.body)
    plan = plan_compaction(situation, COUNTER)
    result = finish(plan, how) if isinstance(plan, NeedsSummary) else plan
    if not isinstance(result, Compacted) or not budget.fits(before):
        return
    fixed = situation.fixed(COUNTER)
    allowances = Allowances.of(budget, policy, fixed)
    if result.tokens_after <= allowances.target:
        return
    gap = in_room(policy.compression_trigger, fixed) - in_room(policy.compaction_target, fixed)
    freed = budget.pressure(before) - budget.pressure(result.tokens_after)
    # A summary is asked for where truncating the span would free enough: the summary, and
    # the facts it lost, take at the most their allowances more.
    written = allowances.summary + allowances.facts if isinstance(plan, NeedsSummary) else 0
    least = gap * WORTH_SHARE - written / budget.available
    assert freed >= least, (case.shape, result.steps, freed, gap)
