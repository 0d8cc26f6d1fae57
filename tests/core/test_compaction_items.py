"""The Responses API's compaction items: the trigger, the user messages given back, the
proxy's item, and its expansion on replay (in place, byte-stable, the provider's own left
alone, a broken seal refused naming the item)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import jsoncodec
from proxy.core.capsule import Capsule, Sealer
from proxy.core.compaction_items import (
    CREATOR,
    INVALID_CONTENT,
    Automatic,
    automatic,
    block_item,
    block_role,
    compaction_item,
    expand,
    trigger_at_end,
    user_items,
    without_management,
    without_trigger,
)
from proxy.core.messages import text
from proxy.core.responses import to_items, to_messages
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError

SEALER = Sealer(b"k" * 32)
BLOCK = (
    "[4 earlier messages omitted]\n\nWhat the user said in those turns, verbatim:\n- Never push."
)
TRIGGER = {"type": "compaction_trigger"}
Item = dict[str, Any]


def user(text: str = "hi") -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def answer(text: str = "ok") -> Item:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "role": "assistant", "content": [part]}


def ours(
    block: str | None = BLOCK, role: str = "assistant", session: str = "s1", *, prior: bool = False
) -> Item:
    return compaction_item(SEALER.seal(Capsule(block, role, session, covers_prior=prior)))


def developer(text: str = "Be terse.") -> Item:
    return {"type": "message", "role": "developer", "content": text}


def openai_item() -> Item:
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABopaque"}


# --- the trigger -------------------------------------------------------------------------------


def test_a_trigger_asks_for_compaction_only_as_the_last_item() -> None:
    assert trigger_at_end({"input": [user(), TRIGGER]})
    assert not trigger_at_end({"input": [TRIGGER, user()]})
    assert not trigger_at_end({"input": []})
    assert not trigger_at_end({"input": "compaction_trigger"})
    assert not trigger_at_end({"input": [user(), "compaction_trigger"]})
    assert not trigger_at_end({})


def test_without_the_trigger_the_body_keeps_everything_else() -> None:
    body = {"model": "m", "input": [user(), TRIGGER], "stream": True}
    assert without_trigger(body) == {"model": "m", "input": [user()], "stream": True}
    assert body["input"] == [user(), TRIGGER]  # the client's body is not changed


# --- what the answer gives back ----------------------------------------------------------------


def test_the_user_messages_come_back_as_the_client_sent_them() -> None:
    first, second = user("one"), {"role": "user", "content": "two"}
    given_items = [first, answer(), {"type": "reasoning", "id": "rs_1"}, second, answer()]
    found = user_items(given_items)
    assert found == [first, second]
    assert found[0] is first
    assert found[1] is second
    assert user_items("just this") == [{"type": "message", "role": "user", "content": "just this"}]
    assert user_items(None) == []
    assert user_items([{"role": "developer", "content": "x"}, "stray"]) == []


def test_the_block_stays_a_message_of_its_own_when_the_model_answers_after_it() -> None:
    # The client's history after its compaction: its user messages, the item, then the
    # model's answer (a reasoning item, a call). The block is never grouped with what follows
    # it into one chat message: later compactions must find it whole, as the note it is.
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    reasoning = {"type": "reasoning", "summary": []}
    for after in ([answer("Ported.")], [reasoning, call]):
        expansion = expand({"input": [user("Port the parser."), ours(), *after]}, SEALER)
        alone = {id(block) for block in expansion.blocks}
        messages = to_messages(expansion.body["input"], alone=alone)
        assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
        assert note_digest(text(messages[1])) in expansion.notes
        # Read without it, the answer joins the block (the items of one assistant turn).
        assert len(to_messages(expansion.body["input"])) == 2


def test_the_block_takes_the_assistants_side_after_a_user_message() -> None:
    assert block_role([user()]) == "assistant"
    assert block_role([]) == "user"


def test_the_block_item_is_what_the_checkpoint_view_holds() -> None:
    item = block_item(BLOCK, "assistant")
    assert item == to_items([{"role": "assistant", "content": BLOCK}])[0]
    assert item["content"][0] == {"type": "output_text", "text": BLOCK, "annotations": []}
    assert block_item(BLOCK, "user")["content"] == [{"type": "input_text", "text": BLOCK}]


def test_the_compaction_item_is_openais_shape_and_named_by_its_content() -> None:
    item = compaction_item("compaction-proxy.1.x.y.z")
    assert item["type"] == "compaction"
    assert item["id"].startswith("cmp_")
    assert item["created_by"] == CREATOR
    assert compaction_item("compaction-proxy.1.x.y.z")["id"] == item["id"]
    assert compaction_item("compaction-proxy.1.x.y.w")["id"] != item["id"]


# --- expansion -----------------------------------------------------------------------------------


def test_the_proxys_item_becomes_its_block_in_place() -> None:
    body = {"model": "m", "input": [user("task"), ours(), user("next")]}
    expansion = expand(body, SEALER)
    assert expansion.body["input"] == [user("task"), block_item(BLOCK, "assistant"), user("next")]
    assert expansion.notes == {note_digest(BLOCK)}
    assert expansion.session == "s1"
    assert expansion.body["model"] == "m"


def test_the_block_read_back_is_the_note_the_plan_knows() -> None:
    (message,) = to_messages([block_item(BLOCK, "assistant")])
    assert note_digest(message["content"][0]["text"]) in expand({"input": [ours()]}, SEALER).notes


def test_an_item_that_stands_for_nothing_goes() -> None:
    expansion = expand({"input": [user(), ours(None, "user")]}, SEALER)
    assert expansion.body["input"] == [user()]
    assert expansion.notes == frozenset()


def test_several_items_each_expand_and_the_first_names_the_session() -> None:
    body = {"input": [ours("[1 earlier messages omitted]", session="a"), user(), ours()]}
    expansion = expand(body, SEALER)
    # No user message before it: the block is the user's side (strict templates open so).
    assert expansion.body["input"][0] == block_item("[1 earlier messages omitted]", "user")
    assert expansion.body["input"][2] == block_item(BLOCK, "assistant")
    assert expansion.session == "a"
    assert len(expansion.notes) == 2


def test_a_body_without_the_proxys_items_is_the_clients_own() -> None:
    for body in (
        {"input": [user(), openai_item()]},
        {"input": "hi"},
        {"model": "m"},
        {"input": [{"type": "compaction", "encrypted_content": 3}]},
    ):
        expansion = expand(body, SEALER)
        assert expansion.body is body
        assert expansion.notes == frozenset()
        assert expansion.session is None


def test_the_providers_own_item_is_forwarded_untouched_beside_ours() -> None:
    theirs = openai_item()
    expansion = expand({"input": [theirs, ours()]}, SEALER)
    assert expansion.body["input"][0] is theirs


def test_a_tampered_item_is_refused_naming_it() -> None:
    item = ours()
    sealed = item["encrypted_content"]
    item["encrypted_content"] = sealed[:-2] + ("AA" if not sealed.endswith("AA") else "BB")
    with pytest.raises(InvalidRequestError) as raised:
        expand({"input": [user(), answer(), item]}, SEALER)
    error = raised.value
    assert error.param == "input[2]"
    assert error.code == INVALID_CONTENT
    assert "altered" in error.message
    assert error.status_code == 400


def test_an_item_of_another_key_is_refused_saying_so() -> None:
    with pytest.raises(InvalidRequestError, match="another key") as raised:
        expand({"input": [ours()]}, Sealer(b"o" * 32))
    assert raised.value.param == "input[0]"


def test_without_a_key_the_proxys_items_cannot_be_opened() -> None:
    with pytest.raises(InvalidRequestError, match=r"no responses\.compaction_key"):
        expand({"input": [ours()]}, None)


# --- automatic compaction (`context_management`) --------------------------------------------


def test_an_automatic_items_predecessors_go_but_the_instructions_and_the_users() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    earlier = ours("an earlier block")
    given = [developer(), user("task"), call, output, earlier, answer("done"), user("more")]
    body = {"input": [*given, ours(prior=True), answer("ok"), user("next")]}
    expansion = expand(body, SEALER)
    assert expansion.body["input"] == [
        developer(),
        user("task"),
        user("more"),
        block_item(BLOCK, "assistant"),
        answer("ok"),
        user("next"),
    ]
    # The earlier block it folded in is no note of this request any more.
    assert expansion.notes == {note_digest(BLOCK)}


def test_an_automatic_item_alone_is_the_users_side() -> None:
    body = {"input": [ours(prior=True), answer("ok"), user("next")]}
    expanded = expand(body, SEALER).body["input"]
    assert expanded == [block_item(BLOCK, "user"), answer("ok"), user("next")]


def test_an_instruction_after_the_conversation_began_is_no_leading_one() -> None:
    body = {"input": [user("task"), developer("Late."), answer(), ours(prior=True)]}
    assert expand(body, SEALER).body["input"] == [user("task"), block_item(BLOCK, "assistant")]


def test_context_management_asks_for_a_compaction_at_its_threshold() -> None:
    entry = {"type": "compaction", "compact_threshold": 5000}
    assert automatic({"context_management": [entry]}) == Automatic(5000)
    assert automatic({"context_management": [{"type": "compaction"}]}) == Automatic(None)
    assert automatic({"context_management": []}) is None
    assert automatic({"model": "m"}) is None
    body = {"model": "m", "context_management": [entry]}
    assert without_management(body) == {"model": "m"}


THRESHOLD = "context_management[0].compact_threshold"


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ({"type": "compaction"}, "context_management"),
        ([{"type": "pruning"}], "context_management[0].type"),
        (["compaction"], "context_management[0].type"),
        (
            [{"type": "compaction", "compact_threshold": 0}],
            "context_management[0].compact_threshold",
        ),
        (
            [{"type": "compaction", "compact_threshold": True}],
            "context_management[0].compact_threshold",
        ),
        (
            [{"type": "compaction", "compact_threshold": "9"}],
            "context_management[0].compact_threshold",
        ),
    ],
)
def test_a_field_the_provider_would_refuse_is_refused(given: object, param: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        automatic({"context_management": given})
    assert raised.value.param == param


# --- properties ----------------------------------------------------------------------------------

plain_items = st.one_of(
    st.text(max_size=20).map(user),
    st.text(max_size=20).map(answer),
    st.just(openai_item()),
    st.builds(lambda i: {"type": "function_call", "call_id": f"c{i}", "name": "f"}, st.integers()),
)
blocks = st.none() | st.text(min_size=1, max_size=80)


@st.composite
def inputs(draw: st.DrawFn) -> tuple[list[Item], list[tuple[int, str | None]]]:
    """A list of items with some of the proxy's compaction items among them."""
    items: list[Item] = draw(st.lists(plain_items, max_size=8))
    placed: list[tuple[int, str | None]] = []
    for _ in range(draw(st.integers(0, 3))):
        block = draw(blocks)
        at = draw(st.integers(0, len(items)))
        items.insert(at, ours(block))
        placed = [(i + (i >= at), b) for i, b in placed] + [(at, block)]
    return items, sorted(placed)


@given(inputs())
def test_each_item_becomes_exactly_its_block_and_nothing_else_moves(
    drawn: tuple[list[Item], list[tuple[int, str | None]]],
) -> None:
    items, placed = drawn
    expanded = expand({"input": items}, SEALER).body["input"]
    wanted: list[Item] = []
    ours_at = dict(placed)
    for index, item in enumerate(items):
        if index not in ours_at:
            wanted.append(item)
        elif (block := ours_at[index]) is not None:
            after_user = any(i.get("role") == "user" for i in wanted)
            wanted.append(block_item(block, "assistant" if after_user else "user"))
    assert expanded == wanted


@given(inputs(), st.lists(plain_items, max_size=4))
def test_expansion_is_byte_stable_and_a_prefix_of_a_longer_history(
    drawn: tuple[list[Item], list[tuple[int, str | None]]], more: list[Item]
) -> None:
    items, _ = drawn
    first = jsoncodec.dumps(expand({"input": items}, SEALER).body["input"])
    again = jsoncodec.dumps(expand({"input": list(items)}, SEALER).body["input"])
    longer = jsoncodec.dumps(expand({"input": [*items, *more]}, SEALER).body["input"])
    assert first == again
    assert longer.startswith(first[:-1])  # the same items, then the new ones
