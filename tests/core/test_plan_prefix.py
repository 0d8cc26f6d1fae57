"""The conversation's forwarded prefix a summary task carries, for a summary request the
provider's prompt cache serves (`NeedsSummary.prefix`, `SummaryTask.prefix`)."""

from __future__ import annotations

from typing import Any

from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import Allowances, Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.tool_results import is_cleared
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER, TOOLS

POLICY = ContextPolicy(keep_recent=4, summary_max_tokens=100)
BUDGET = Budget(context_window=1000, output_reserve=0)


def words(n: int) -> str:
    return " ".join(["w"] * n)


def agent(calls: int) -> list[Message]:
    """The task, then a long chain of tool calls with big results, answered, and the next
    ask: the chain is an earlier turn's (a running turn's rounds are cut, not summarized)."""
    messages = [system(), user("the task")]
    for i in range(calls):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(100))]
    return [*messages, assistant("done"), user("and the docs?")]


def forced(messages: list[Message], **policy: Any) -> NeedsSummary:
    """The plan a preparation makes of `messages` (forced: every layer it may)."""
    body = {"model": "m", **TOOLS}
    situation = Situation(messages, body, POLICY.replace(**policy), BUDGET, force=True)
    plan = plan_compaction(situation, COUNTER)
    assert isinstance(plan, NeedsSummary), plan
    return plan


def test_the_prefix_is_the_conversation_as_forwarded_through_the_span_s_end() -> None:
    """The plan cleared the span's old results before cutting it; the prefix holds them as
    they were forwarded (what the provider cached), up to the span's last message."""
    messages = agent(12)
    need = forced(messages)
    prefix = need.prefix
    assert prefix is not None
    assert any(is_cleared(m) for m in need.span)
    assert prefix.messages == tuple(messages[: len(prefix.messages)])
    assert prefix.messages[-1]["tool_call_id"] == need.span[-1]["tool_call_id"]
    assert not any(is_cleared(m) for m in prefix.messages)
    assert prefix.fields == {"model": "m", **TOOLS}
    assert prefix.tokens == COUNTER.messages(prefix.messages) + COUNTER.tools(TOOLS)
    assert prefix.after_task  # the pinned task stays before the span
    assert need.max_tokens == Allowances.of(BUDGET, POLICY).summary


def test_every_summary_task_of_the_span_carries_its_prefix() -> None:
    need = forced(agent(12))
    task = need.task()
    assert task.prefix == need.prefix
    # A summary of the span's start covers part of it: the rest still ends where it did.
    assert task.after(4, "- the start").prefix == need.prefix
    assert need.task(4, "- the start").prefix == need.prefix
    # What a truncation dropped, the span's end, is summarized later over the same prefix.
    dropped = need.fallback().dropped
    assert dropped is not None
    assert dropped.prefix == need.prefix


def test_a_span_after_the_instructions_alone_says_so() -> None:
    # The task unpinned and not the running turn's user message (which never goes): the span
    # starts right after the instructions.
    prefix = forced([*agent(12), user("and now?")], pin_first_user=False).prefix
    assert prefix is not None
    assert not prefix.after_task


def test_no_prefix_when_old_turns_were_shrunk_before_the_span_was_cut() -> None:
    """Shrinking old turns to their question and answer removes messages: the span's place
    in the plan's copy is no longer its place in what was forwarded."""
    messages = [system(), user("q0")]
    for i in range(6):
        messages += [assistant_calls(f"c{i}"), tool_result(f"c{i}", words(80)), assistant("a")]
        messages.append(user(f"q{i + 1} " + words(100)))
    need = forced(messages, max_context_turns=3)
    assert need.prefix is None
    assert need.task().prefix is None


def test_a_truncated_span_is_summarized_later_over_its_prefix() -> None:
    # No summary asked for: the span the truncation dropped is summarized afterwards, its
    # request the conversation as forwarded through the span's end (which the provider
    # cached with the request before), then one instruction.
    messages = agent(12)
    body = {"model": "m", **TOOLS}
    situation = Situation(messages, body, POLICY.replace(strategy="truncate"), BUDGET, force=True)
    plan = plan_compaction(situation, COUNTER)
    assert isinstance(plan, Compacted)
    assert plan.dropped is not None
    prefix = plan.dropped.prefix
    assert prefix is not None
    assert prefix.messages == tuple(messages[: len(prefix.messages)])
    assert prefix.messages[-1]["tool_call_id"] == plan.dropped.span[-1]["tool_call_id"]
