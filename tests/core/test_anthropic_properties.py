"""Properties of the Messages API mapping: a round trip changes nothing, and whatever whole
units the core keeps (the real planner's included) write back to a body the API accepts."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.anthropic import chat_view, messages_body, to_messages, to_wire
from proxy.core.anthropic_cache import breakpoints
from proxy.core.budget import request_budget
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction, plan_emergency
from proxy.core.policy import STRATEGIES, ContextPolicy, Strategy
from proxy.core.tokens import ApproximateEncoder, TokenCounter
from proxy.core.units import group_units, is_well_formed
from tests.core.test_anthropic import CACHE, image, text, thinking

_ids = itertools.count()

words = st.sampled_from(["fix it", "run the tests", "what changed?", "ok", "see below"])
texts = st.builds(text, words)
user_blocks = st.lists(st.one_of(texts, st.just(image())), min_size=1, max_size=3)
contents: st.SearchStrategy[Any] = words | user_blocks


@st.composite
def turn(draw: st.DrawFn, long: bool = False) -> list[dict[str, Any]]:
    """A user message, then the assistant's steps: calls (with their results), then text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(contents)}]
    for _ in range(draw(st.integers(0, 3))):
        ids = [f"toolu_{next(_ids)}" for _ in range(draw(st.integers(1, 3)))]
        said = draw(st.lists(texts, max_size=1))
        opening = [thinking(next(_ids))] if draw(st.booleans()) else []
        uses = [{"type": "tool_use", "id": i, "name": "read", "input": {"n": i}} for i in ids]
        messages.append({"role": "assistant", "content": [*opening, *said, *uses]})
        output = draw(LONG) if long else "out"
        results = [{"type": "tool_result", "tool_use_id": i, "content": output} for i in ids]
        after = draw(st.lists(texts, max_size=1))
        messages.append({"role": "user", "content": [*draw(st.permutations(results)), *after]})
    if messages[-1]["role"] == "user":
        messages.append({"role": "assistant", "content": draw(st.one_of(words, user_blocks))})
    return messages


LONG = st.integers(20, 300).map(lambda n: " ".join(f"line{i} of the file" for i in range(n)))


def joined(turns: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [message for t in turns for message in t]


def ends_with_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An agent's request ends with the user's turn (a question or tool results)."""
    return (
        messages
        if messages[-1]["role"] == "user"
        else [*messages, {"role": "user", "content": "go on"}]
    )


conversations = st.lists(turn(), min_size=1, max_size=4).map(joined)


@st.composite
def marked(draw: st.DrawFn, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with at most three blocks marked as cache breakpoints (copies): with the
    system prompt's, four, as many as the API accepts."""
    spots = [
        (i, j)
        for i, m in enumerate(messages)
        if isinstance(m["content"], list)
        for j, block in enumerate(m["content"])
        if block.get("type") in ("text", "tool_result")
    ]
    chosen = draw(st.lists(st.sampled_from(spots), max_size=3, unique=True)) if spots else []
    out = copy.deepcopy(messages)
    for i, j in chosen:
        out[i]["content"][j] = {**out[i]["content"][j], "cache_control": CACHE}
    return out


bodies = conversations.flatmap(marked).map(
    lambda messages: {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": [text("You are an agent.", cache_control=CACHE)],
        "messages": messages,
    }
)


@given(bodies)
def test_round_trip_is_the_same_body_and_leaves_the_client_s_dicts_alone(
    body: dict[str, Any],
) -> None:
    given_body = copy.deepcopy(body)
    view = chat_view(body)
    assert messages_body(view, view["messages"]) == given_body
    assert body == given_body


any_messages = st.lists(
    st.one_of(
        st.builds(
            lambda role, content: {"role": role, "content": content},
            st.sampled_from(["user", "assistant"]),
            contents,
        ),
        st.just({"role": "system", "content": "reminder"}),
    ),
    max_size=8,
)


def flat(messages: Sequence[Any]) -> list[Any]:
    """Every block in order, a string content as one text block."""
    out: list[Any] = []
    for message in messages:
        content = message["content"]
        out += [text(content)] if isinstance(content, str) else content
    return out


@given(any_messages)
def test_any_messages_come_back_alternating_with_every_block_in_order(messages: list[Any]) -> None:
    sent = to_wire(to_messages(messages))
    assert_alternating(sent)
    opened = [m for m in sent if m["content"] != [text_block_of_continued()]]
    assert flat(opened) == flat(messages)


def text_block_of_continued() -> dict[str, Any]:
    from proxy.core.anthropic import CONTINUED

    return text(CONTINUED)


@settings(suppress_health_check=list(HealthCheck))
@given(bodies, st.data())
def test_any_whole_units_kept_write_back_to_a_body_the_api_accepts(
    body: dict[str, Any], data: st.DataObject
) -> None:
    view = chat_view(body)
    messages = view["messages"]
    units = group_units(messages)
    assert is_well_formed(units)
    kept = [unit for unit in units[1:] if data.draw(st.booleans())]
    forwarded = [messages[0], *(messages[i] for unit in kept for i in unit.indices())]
    sent = messages_body(view, forwarded)
    assert_accepted(sent)
    assert_thinking_intact(body["messages"], sent["messages"])


def assert_alternating(messages: Sequence[Any]) -> None:
    sides = [m["role"] for m in messages if m.get("role") in ("user", "assistant")]
    adjacent = [(a["role"], b["role"]) for a, b in itertools.pairwise(messages)]
    assert all(a != b for a, b in adjacent if a in ("user", "assistant") and b == a), messages
    assert not sides or sides[0] == "user"


def assert_accepted(body: dict[str, Any]) -> None:
    """Alternating roles, a user first, every result right after its call and before any
    other block, every call answered, at most four breakpoints."""
    messages = body["messages"]
    assert_alternating(messages)
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        leading = list(itertools.takewhile(lambda b: b.get("type") == "tool_result", blocks))
        assert len(leading) == len(results)
        if results:
            previous = messages[index - 1]["content"]
            assert sorted(results) == sorted(
                b["id"] for b in previous if b.get("type") == "tool_use"
            )
        calls = [
            b["id"]
            for b in blocks
            if message["role"] == "assistant" and b.get("type") == "tool_use"
        ]
        if calls:
            following = messages[index + 1]["content"]
            assert sorted(calls) == sorted(
                b["tool_use_id"] for b in following if b.get("type") == "tool_result"
            )
    assert len(breakpoints(body)) <= 4


def assert_thinking_intact(given: Sequence[Any], sent: Sequence[Any]) -> None:
    """Every thinking block forwarded is the client's, with the blocks that followed it in
    its message after it, unchanged."""
    originals = [
        m["content"] for m in given if m["role"] == "assistant" and isinstance(m["content"], list)
    ]
    for message in sent:
        content = message["content"] if isinstance(message["content"], list) else []
        for index, block in enumerate(content):
            if block.get("type") != "thinking":
                continue
            source = next(blocks for blocks in originals if any(b is block for b in blocks))
            rest = source[[id(b) for b in source].index(id(block)) :]
            assert content[index : index + len(rest)] == rest


@st.composite
def heavy(draw: st.DrawFn) -> dict[str, Any]:
    """Conversations whose tool results are long enough to need compaction."""
    messages = ends_with_user(joined(draw(st.lists(turn(long=True), min_size=2, max_size=6))))
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": "You are an agent.",
        "tools": [{"name": "read", "input_schema": {"type": "object"}}],
        "messages": draw(marked(messages)),
    }


@settings(max_examples=100, suppress_health_check=list(HealthCheck), deadline=None)
@given(
    heavy(),
    st.sampled_from([1024, 2048, 4096]),
    st.sampled_from(STRATEGIES),
    st.sampled_from(["good", "fails"]),
)
def test_the_planner_s_result_writes_back_to_a_body_the_api_accepts(
    body: dict[str, Any], window: int, strategy: Strategy, summary: str
) -> None:
    view = chat_view(body)
    budget = request_budget(window, view, output_reserved=256, margin_share=0.03)
    policy = ContextPolicy(strategy=strategy, keep_recent=2)
    situation = Situation(view["messages"], view, policy, budget, force=True)
    counter = TokenCounter(ApproximateEncoder())
    plan = plan_compaction(situation, counter)
    if isinstance(plan, NeedsSummary):
        plan = plan.fallback() if summary == "fails" else plan.complete("- the user asked")
    for result in (plan, plan_emergency(situation, counter)):
        forwarded = result.messages if isinstance(result, Compacted) else view["messages"]
        sent = messages_body(view, forwarded)
        assert sent["system"] == "You are an agent."
        assert_accepted(sent)
        assert_thinking_intact(body["messages"], sent["messages"])
        # The client's last message, where agents put their breakpoint, keeps it.
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any("cache_control" in b for b in last):
            assert any("cache_control" in b for b in sent["messages"][-1]["content"])
