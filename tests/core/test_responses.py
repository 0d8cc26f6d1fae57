"""Responses API input items as chat messages and back: lossless, and cut only between turns."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.budget import request_budget
from proxy.core.messages import Message, text
from proxy.core.plan import (
    Compacted,
    NeedsSummary,
    Situation,
    Unchanged,
    plan_compaction,
    plan_emergency,
)
from proxy.core.policy import STRATEGIES, ContextPolicy, Strategy
from proxy.core.responses import (
    ATTACHED,
    INSTRUCTIONS,
    ITEMS,
    chat_view,
    readable,
    responses_body,
    server_state,
    to_items,
    to_messages,
)
from proxy.core.splice import merge_text, splice
from proxy.core.tokens import REASONING_ITEM_TOKENS, ApproximateEncoder, TokenCounter
from proxy.core.tool_results import clear
from proxy.core.units import UnitKind, group_units, is_well_formed

Item = dict[str, Any]
_ids = itertools.count()


def msg(role: str, content: Any = "hi", **extra: Any) -> Item:
    return {"role": role, "content": content, **extra}


def said(words: str, item_id: str = "msg_1") -> Item:
    part = {"type": "output_text", "text": words, "annotations": []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def call(call_id: str, name: str = "search") -> Item:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": "{}",
    }


def output(call_id: str, out: Any = "result") -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": out}


def custom_call(call_id: str) -> Item:
    return {"type": "custom_tool_call", "call_id": call_id, "name": "patch", "input": "*** Begin"}


def custom_output(call_id: str) -> Item:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": "done"}


def reasoning(n: int = 0) -> Item:
    return {
        "type": "reasoning",
        "id": f"rs_{n}",
        "summary": [],
        "encrypted_content": "gAAAA" + "x" * n,
    }


def web_search(n: int = 0) -> Item:
    return {"type": "web_search_call", "id": f"ws_{n}", "status": "completed"}


def groups(items: list[Any]) -> list[list[Any]]:
    return [message[ITEMS] for message in to_messages(items)]


def without_items(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != ITEMS}


# Translation


def test_string_input_is_one_user_message() -> None:
    messages = to_messages("hello")
    assert [without_items(m) for m in messages] == [{"role": "user", "content": "hello"}]
    assert to_items(messages) == [{"role": "user", "content": "hello"}]


def test_message_parts_become_chat_parts_the_counter_prices() -> None:
    parts = [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
        {"type": "input_file", "file_id": "file_1"},
        {"type": "refusal", "refusal": "no"},
        "odd",
    ]
    [message] = to_messages([{"type": "message", "role": "user", "content": parts}])
    assert message["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
        {"type": "file", "file": {"file_id": "file_1"}},
        {"type": "refusal", "refusal": "no"},
        "odd",
    ]
    assert text(message) == "look"


def test_a_turn_of_parallel_calls_is_one_tool_exchange() -> None:
    items = [
        msg("developer"),
        msg("user"),
        reasoning(),
        call("a"),
        call("b"),
        output("b"),
        output("a"),
        said("ok"),
    ]
    messages = to_messages(items)
    assert without_items(messages[2]) == {
        "role": "assistant",
        "content": [{"type": ATTACHED, "item": reasoning()}],
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "search", "arguments": "{}"}},
        ],
    }
    assert without_items(messages[3]) == {"role": "tool", "tool_call_id": "b", "content": "result"}
    assert [(u.kind, len(u)) for u in group_units(messages)] == [
        (UnitKind.INSTRUCTION, 1),
        (UnitKind.USER, 1),
        (UnitKind.TOOL_EXCHANGE, 3),
        (UnitKind.ASSISTANT, 1),
    ]
    assert to_items(messages) == items


def test_assistant_text_and_calls_of_one_turn_share_a_message() -> None:
    # The provider wants a turn's items with the reasoning item that preceded them.
    items = [msg("user"), reasoning(1), said("let me look"), reasoning(2), call("a"), output("a")]
    assert groups(items) == [[items[0]], items[1:5], [items[5]]]
    assert to_messages(items)[1]["content"][0] == {"type": "text", "text": "let me look"}


def test_custom_tool_calls_pair_like_function_calls() -> None:
    items = [msg("user"), custom_call("c"), custom_output("c")]
    messages = to_messages(items)
    assert messages[1]["tool_calls"] == [
        {"id": "c", "type": "custom", "custom": {"name": "patch", "input": "*** Begin"}}
    ]
    assert messages[2]["tool_call_id"] == "c"
    assert is_well_formed(group_units(messages))


def test_output_as_parts_is_tool_content() -> None:
    out = [{"type": "input_text", "text": "seen"}, {"type": "input_image", "file_id": "f"}]
    messages = to_messages([msg("user"), call("a"), output("a", out)])
    assert text(messages[2]) == "seen"
    assert messages[2]["content"][1]["type"] == "image_url"


def test_opaque_items_join_the_group_before_them() -> None:
    computer = {"type": "computer_call", "call_id": "k", "action": {"type": "click"}}
    computer_out = {"type": "computer_call_output", "call_id": "k", "output": {"type": "x"}}
    items = [
        msg("user"),
        computer,
        computer_out,
        {"type": "item_reference", "id": "r"},
        said("done"),
    ]
    assert groups(items) == [items[:4], [items[4]]]


def test_opaque_items_join_the_group_after_them_at_the_start_or_after_reasoning() -> None:
    items = [web_search(1), msg("user"), reasoning(), web_search(2), said("found")]
    assert groups(items) == [items[:2], items[2:]]


def test_trailing_reasoning_stays_with_the_group_before_it() -> None:
    items = [msg("user"), reasoning()]
    assert groups(items) == [items]


def test_input_of_only_reasoning_is_a_stray_never_compacted() -> None:
    items = [reasoning(), web_search()]
    messages = to_messages(items)
    assert "role" not in messages[0]
    assert group_units(messages)[0].kind is UnitKind.STRAY
    assert to_items(messages) == items


def test_an_item_whose_type_is_no_name_is_opaque() -> None:
    # A list is unhashable: looking it up among the known types once raised (a 500).
    odd = [{"type": []}, {"type": {"a": 1}}, {"type": 3}]
    assert to_items(to_messages([msg("user"), *odd])) == [msg("user"), *odd]
    assert groups([msg("user"), *odd]) == [[msg("user"), *odd]]


def test_non_dict_and_roleless_items_are_opaque() -> None:
    items: list[Any] = [msg("user"), 42, {"content": "no role"}, {"type": "mystery"}]
    assert groups(items) == [items]
    assert to_items(to_messages(items)) == items


def test_attached_items_are_counted_and_the_private_key_is_not() -> None:
    counter = TokenCounter(ApproximateEncoder(), cache_size=0)
    plain, with_reasoning = (
        to_messages([msg("user", "same words")]),
        to_messages([reasoning(400), msg("user", "same words")]),
    )
    assert counter.message(plain[0]) == counter.message(without_items(plain[0]))
    assert counter.message(with_reasoning[0]) > counter.message(plain[0]) + 60
    assert text(with_reasoning[0]) == "same words"


def test_reasoning_costs_the_reasoning_its_ciphertext_holds_and_its_summary() -> None:
    counter = TokenCounter(ApproximateEncoder(), cache_size=0)
    bare = {"type": "reasoning", "id": "rs_1", "summary": []}

    def cost(item: Any) -> int:
        [message] = to_messages([item, msg("user", "same words")])
        return counter.message(message) - counter.message(
            to_messages([msg("user", "same words")])[0]
        )

    assert cost(bare) == REASONING_ITEM_TOKENS
    assert cost({**bare, "encrypted_content": "A" * 1600}) == REASONING_ITEM_TOKENS + 300
    summary = [{"type": "summary_text", "text": "I should read the config first."}]
    assert cost({**bare, "summary": summary}) > REASONING_ITEM_TOKENS + 5
    visible = [{"type": "reasoning_text", "text": "I should read the config first."}]
    assert cost({**bare, "content": visible}) == cost({**bare, "summary": summary})
    # Odd shapes still cost something.
    assert cost({**bare, "summary": "loose", "encrypted_content": 7}) > REASONING_ITEM_TOKENS


# Messages the core changed or made


def test_trimmed_tool_result_becomes_the_new_output_and_keeps_its_neighbours() -> None:
    items = [msg("user"), call("a"), reasoning(), output("a", "huge " * 50), web_search()]
    messages = to_messages(items)
    messages[2] = clear(messages[2], "search", 500)
    back = to_items(messages)
    assert back[:3] == items[:3]
    assert back[3] == {**items[3], "output": messages[2]["content"]}
    assert back[4] is items[4]


def test_cleared_output_given_as_parts_keeps_unchanged_parts() -> None:
    keep = {"type": "input_image", "image_url": "https://x/a.png", "detail": "high"}
    messages = to_messages(
        [msg("user"), call("a"), output("a", [{"type": "input_text", "text": "t"}, keep])]
    )
    messages[2] = {
        **messages[2],
        "content": [{"type": "text", "text": "short"}, messages[2]["content"][1]],
    }
    assert to_items(messages)[2]["output"] == [{"type": "input_text", "text": "short"}, keep]


def test_summary_note_spliced_in_becomes_a_message_item() -> None:
    items = [
        msg("system"),
        msg("user", "task"),
        said("a1"),
        msg("user", "q"),
        said("a2"),
        msg("user", "r"),
    ]
    spliced = splice(to_messages(items), 2, 5, "[summary: done]")
    back = to_items(spliced.messages)
    assert back == [
        items[0],
        items[1],
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "[summary: done]", "annotations": []}],
        },
        items[5],
    ]


def test_note_merged_into_a_string_message_keeps_it_a_string() -> None:
    [message] = to_messages([msg("user", "task")])
    [item] = to_items([merge_text(message, "[note]", first=True)])
    assert item == {"role": "user", "content": "[note]\n\ntask"}


def test_note_merged_into_a_message_with_attachments_becomes_parts() -> None:
    items = [reasoning(), msg("user", "task")]
    [message] = to_messages(items)
    back = to_items([merge_text(message, "[note]", first=True)])
    assert back == [
        items[0],
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "[note]"},
                {"type": "input_text", "text": "task"},
            ],
        },
    ]


def test_changed_assistant_turn_puts_its_text_on_the_first_message_item() -> None:
    items = [msg("user"), said("one", "m1"), said("two", "m2"), call("a"), output("a")]
    messages = to_messages(items)
    messages[1] = merge_text(messages[1], "[note]", first=False)
    back = to_items(messages)
    texts = [part["text"] for part in back[1]["content"]]
    assert texts == ["one", "two", "[note]"]
    assert back[1]["id"] == "m1"
    assert back[2:] == items[3:]


def test_text_added_to_a_calls_only_turn_gets_a_message_item_before_the_calls() -> None:
    items = [msg("user"), reasoning(), call("a"), output("a")]
    messages = to_messages(items)
    messages[1] = merge_text(messages[1], "[note]", first=False)
    back = to_items(messages)
    assert back[1] is items[1]
    assert back[2] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "[note]", "annotations": []}],
    }
    assert back[3:] == items[2:]


def test_changed_calls_only_turn_without_text_keeps_its_items() -> None:
    items = [msg("user"), call("a"), output("a")]
    messages = to_messages(items)
    messages[1] = {**messages[1], "name": "changed"}
    assert to_items(messages) == items


def test_core_made_messages_become_items() -> None:
    made: list[Message] = [
        {"role": "developer", "content": "[marker]"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "x"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "file", "file": {"file_id": "f"}},
                {"type": "image_url", "image_url": "u"},
                7,
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "[cleared]"},
        {"content": None},
    ]
    assert to_items(made) == [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "[marker]"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "x"},
                {"type": "input_image", "image_url": "u", "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_file", "file_id": "f"},
                {"type": "image_url", "image_url": "u"},
                7,
            ],
        },
        {"type": "function_call_output", "call_id": "a", "output": "[cleared]"},
        {"type": "message", "role": "user", "content": []},
    ]


def test_tool_output_of_an_odd_shape_is_given_back() -> None:
    items = [msg("user"), call("a"), output("a", {"odd": True})]
    messages = to_messages(items)
    messages[2] = {**messages[2], "content": [{"type": "text", "text": "new"}]}
    assert to_items(messages)[2]["output"] == [{"type": "input_text", "text": "new"}]
    assert to_items(to_messages(items)) == items


# Properties

words = st.text(alphabet="abc xyz", max_size=12)
parts = st.lists(
    st.one_of(
        words.map(lambda t: {"type": "input_text", "text": t}),
        words.map(lambda t: {"type": "output_text", "text": t, "annotations": []}),
        st.just(
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}
        ),
        st.just({"type": "input_file", "file_id": "file_1"}),
        st.just({"type": "refusal", "refusal": "no"}),
    ),
    max_size=3,
)
contents = words | parts
opaque = st.one_of(
    st.integers(0, 9).map(web_search),
    # Built anew each time: the properties follow items by identity.
    st.builds(lambda: {"type": "item_reference", "id": "ref_1"}),
    st.builds(lambda: {"type": "mcp_list_tools", "id": "mcpl", "server_label": "s", "tools": []}),
    st.builds(lambda: {"type": "brand_new_item", "payload": [1, 2]}),
)
reasonings = st.integers(0, 40).map(reasoning)


@st.composite
def turn(draw: st.DrawFn) -> list[Any]:
    """A user message, then the assistant's steps: calls (with outputs), built-in calls, text."""
    items: list[Any] = [msg(draw(st.sampled_from(["user", "system", "developer"])), draw(contents))]
    for _ in range(draw(st.integers(0, 3))):
        items += draw(st.lists(reasonings | opaque, max_size=2))
        if draw(st.booleans()):
            items.append({"type": "message", "role": "assistant", "content": draw(contents)})
        ids = [f"call_{next(_ids)}" for _ in range(draw(st.integers(0, 3)))]
        made = [draw(st.sampled_from([call, custom_call]))(i) for i in ids]
        for made_call in made:
            items += [*draw(st.lists(reasonings, max_size=1)), made_call]
        answers = [
            output(c["call_id"]) if c["type"] == "function_call" else custom_output(c["call_id"])
            for c in made
        ]
        items += draw(st.permutations(answers))
        if draw(st.booleans()):
            computer = {"type": "computer_call", "call_id": f"k{next(_ids)}", "action": {}}
            items += [
                computer,
                {"type": "computer_call_output", "call_id": computer["call_id"], "output": {}},
            ]
    return items


conversations = st.lists(turn(), min_size=1, max_size=5).map(
    lambda turns: [i for t in turns for i in t]
)
any_items = st.lists(
    st.one_of(
        st.builds(msg, st.sampled_from(["user", "assistant", "system", "developer"]), contents),
        st.sampled_from(["a", "b"]).map(call),
        st.sampled_from(["a", "b"]).map(output),
        st.sampled_from(["a", "b"]).map(custom_call),
        st.sampled_from(["a", "b"]).map(custom_output),
        reasonings,
        opaque,
        st.integers(),
    ),
    max_size=12,
)


@given(any_items | conversations)
def test_round_trip_is_lossless(items: list[Any]) -> None:
    back = to_items(to_messages(items))
    assert back == items
    assert all(a is b for a, b in zip(back, items, strict=True))


def follower(items: list[Any], index: int) -> Any:
    return items[index + 1] if index + 1 < len(items) else None


@given(conversations)
def test_units_never_split_a_call_from_its_output_nor_reasoning_from_its_follower(
    items: list[Any],
) -> None:
    messages = to_messages(items)
    units = group_units(messages)
    assert is_well_formed(units)
    unit_of: dict[int, int] = {}  # id(item) -> unit index
    for number, unit in enumerate(units):
        for index in unit.indices():
            unit_of.update({id(item): number for item in messages[index][ITEMS]})
    calls = {
        item["call_id"]: item
        for item in items
        if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call")
    }
    for item in items:
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            assert unit_of[id(item)] == unit_of[id(calls[item["call_id"]])]
    for index, item in enumerate(items):
        if (
            isinstance(item, dict)
            and item.get("type") == "reasoning"
            and follower(items, index) is not None
        ):
            assert unit_of[id(item)] == unit_of[id(follower(items, index))]


@given(conversations, st.data())
def test_dropping_whole_units_leaves_no_orphan_output_nor_lonely_reasoning(
    items: list[Any], data: st.DataObject
) -> None:
    messages = to_messages(items)
    units = group_units(messages)
    kept = data.draw(st.lists(st.booleans(), min_size=len(units), max_size=len(units)))
    remaining = [
        messages[i] for unit, keep in zip(units, kept, strict=True) if keep for i in unit.indices()
    ]
    back = to_items(remaining)
    seen_calls: set[str] = set()
    for index, item in enumerate(back):
        if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
            seen_calls.add(item["call_id"])
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            assert item["call_id"] in seen_calls
        if isinstance(item, dict) and item.get("type") == "reasoning":
            # What followed it in the input follows it still (or nothing did).
            original = next(i for i, x in enumerate(items) if x is item)
            assert follower(back, index) is follower(items, original)


# A whole request: instructions and input as the chat view the core compacts


def test_instructions_become_the_marked_head_and_come_back() -> None:
    body = {"model": "m", "instructions": "Be brief.", "input": "hi", "store": False}
    view = chat_view(body)
    assert view["messages"][0] == {"role": "system", "content": "Be brief.", INSTRUCTIONS: True}
    assert [without_items(m) for m in view["messages"][1:]] == [{"role": "user", "content": "hi"}]
    assert {k: v for k, v in view.items() if k != "messages"} == {"model": "m", "store": False}
    back = responses_body(view, view["messages"])
    assert back == {
        "model": "m",
        "store": False,
        "instructions": "Be brief.",
        "input": [msg("user")],
    }
    assert back["input"] == [{"role": "user", "content": "hi"}]


def test_odd_instructions_and_input_are_carried_along_untouched() -> None:
    body = {"model": "m", "instructions": [{"role": "system", "content": "x"}], "input": 7}
    view = chat_view(body)
    assert view == {"model": "m", "instructions": body["instructions"], "input": 7, "messages": []}
    assert responses_body(view, [])["instructions"] == body["instructions"]
    assert chat_view({"model": "m"}) == {"model": "m", "messages": []}


def test_a_message_made_before_the_instructions_goes_to_input() -> None:
    view = chat_view({"instructions": "rules", "input": [msg("user")]})
    injected = {"role": "system", "content": "injected by a hook"}
    body = responses_body(view, [injected, *view["messages"]])
    assert body["instructions"] == "rules"
    assert body["input"][0] == {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "injected by a hook"}],
    }


def test_server_state_is_previous_response_id_or_conversation() -> None:
    assert server_state({"previous_response_id": "resp_1", "input": "go on"})
    assert server_state({"conversation": "conv_1"})
    assert server_state({"conversation": {"id": "conv_1"}})
    assert not server_state({"input": "hi", "previous_response_id": None})


# The real planner on translated conversations

LONG = st.integers(20, 400).map(
    lambda n: " ".join(f"line{i} of the tool's output" for i in range(n))
)


@st.composite
def heavy(draw: st.DrawFn) -> list[Any]:
    """Conversations whose tool outputs are long enough to need compaction."""
    items = draw(st.lists(turn(), min_size=2, max_size=6).map(lambda t: [i for x in t for i in x]))
    return [
        {**item, "output": draw(LONG)}
        if isinstance(item, dict) and item.get("type") == "function_call_output"
        else item
        for item in items
    ]


def _follower_kept(items: list[Any], back: list[Any]) -> None:
    """Each reasoning item forwarded is the very item, followed by what followed it (its
    content perhaps trimmed or given a note, never another item)."""
    for index, item in enumerate(back):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            original = next(i for i, x in enumerate(items) if x is item)
            assert same_item(follower(back, index), follower(items, original))


def same_item(a: Any, b: Any) -> bool:
    if a is b:
        return True
    keys = ("type", "role", "id", "call_id")
    return isinstance(a, dict) and isinstance(b, dict) and all(a.get(k) == b.get(k) for k in keys)


def _pairs_kept(back: list[Any]) -> None:
    calls = [i["call_id"] for i in back if isinstance(i, dict) and i.get("type") in CALLS]
    outputs = [i["call_id"] for i in back if isinstance(i, dict) and i.get("type") in OUTPUTS]
    assert sorted(calls) == sorted(outputs)
    for index, item in enumerate(back):
        if isinstance(item, dict) and item.get("type") in OUTPUTS:
            earlier = back[:index]
            assert any(isinstance(c, dict) and c.get("call_id") == item["call_id"] for c in earlier)


CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")


@settings(max_examples=150, suppress_health_check=list(HealthCheck), deadline=None)
@given(
    heavy(),
    st.sampled_from([1024, 2048, 4096]),
    st.sampled_from(STRATEGIES),
    st.sampled_from(["good", "fails"]),
)
def test_compaction_never_splits_a_call_from_its_output_nor_reasoning_from_its_follower(
    items: list[Any], window: int, strategy: Strategy, summary: str
) -> None:
    body = {"model": "m", "instructions": "You are an agent.", "input": items}
    view = chat_view(body)
    budget = request_budget(window, view, output_reserved=256, margin_share=0.03)
    policy = ContextPolicy(strategy=strategy, keep_recent=2)
    situation = Situation(view["messages"], view, policy, budget, force=True)
    counter = TokenCounter(ApproximateEncoder())
    plan = plan_compaction(situation, counter)
    if isinstance(plan, NeedsSummary):
        plan = plan.fallback() if summary == "fails" else plan.complete("- the user asked")
    emergency = plan_emergency(situation, counter)
    for result in (plan, emergency):
        forwarded = result.messages if isinstance(result, Compacted) else view["messages"]
        sent = responses_body(view, forwarded)
        # The fast path (messages kept by identity) gives what deriving each one gives.
        assert sent["input"] == to_items(forwarded[1:])
        assert sent["instructions"] == "You are an agent."
        _pairs_kept(sent["input"])
        _follower_kept(items, sent["input"])
        if isinstance(result, Unchanged):
            assert sent["input"] == items


def test_readable_drops_the_private_keys_only() -> None:
    view = chat_view({"instructions": "rules", "input": [msg("user"), reasoning(), said("ok")]})
    shown = readable(view["messages"])
    assert shown[0] == {"role": "system", "content": "rules"}
    assert shown[1] == {"role": "user", "content": "hi"}
    assert shown[2]["content"][-1] == {"type": ATTACHED, "item": reasoning()}
    plain = [{"role": "user", "content": "x"}]
    assert readable(plain)[0] is plain[0]
