"""The plan's floors, over every client shape (tests/core/client_shapes.py): what it never
does, whatever the window, the strategy, the summary or the landing.

- The running turn's user message (the last user message: what the model answers now) is
  forwarded as the user sent it, as the last user message: whole, never cut, folded into the
  block or followed by it (where the block must be merged into it, the block opens it).

The properties run the profile's number of examples (tests/conftest.py); before a change to
the plan is resolved, over many seeds: `pytest tests/core/test_plan_floors.py
--hypothesis-profile=thorough --hypothesis-seed=N`. A case they find becomes an example test.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.budget import request_budget
from proxy.core.messages import Message, role, text
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction, plan_emergency
from proxy.core.policy import STRATEGIES, ContextPolicy
from proxy.core.summary import detach_notes
from tests.core.client_shapes import SHAPES
from tests.core.test_plan_properties import SUMMARIES, finish
from tests.core.words import COUNTER


@dataclass(frozen=True)
class Case:
    shape: str
    messages: list[Message]
    situation: Situation


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
    situation = Situation(messages, body, policy, budget, force=draw(st.booleans()))
    return Case(shape.name, messages, situation)


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
