"""A request that asks the provider to compact on its own (`context_management`), through the
service with the proxy compacting in the provider's place: at the client's threshold, at the
proxy's trigger when it names none, whenever the request would not fit otherwise; never
when there is nothing to condense or the history is broken (the provider's to refuse); and
the item put first in a stream however the upstream cuts its bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.service.compactions import with_compaction_item
from proxy.service.replies import Reply
from tests.service.parts import Running, header, read, running
from tests.service.test_client_compaction import CONFIG, SEALER, body, forwarded, history, user

SMALL = replace(CONFIG, policies=ModelPolicies(default=ContextPolicy(context_window=2_300)))
"""A window whose usable input (about 1,700 tokens) `history(3)` (about 1,600) fills past the
proxy's trigger, and `history(4)` (about 2,150) overflows."""


@pytest.fixture
async def proxy() -> AsyncIterator[Running]:
    async with running(CONFIG) as found:
        yield found


def managed(threshold: int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "compaction"}
    if threshold is not None:
        entry["compact_threshold"] = threshold
    return {"context_management": [entry]}


async def answered(proxy: Running, items: list[Any], threshold: int | None) -> tuple[Reply, Any]:
    reply = await proxy.ask(body(items, **managed(threshold)), path="responses")
    return reply, json.loads(await read(reply))


def kinds(answer: Any) -> list[str]:
    return [item["type"] for item in answer["output"]]


async def test_without_a_threshold_the_proxys_trigger_decides() -> None:
    async with running(SMALL) as proxy:
        reply, answer = await answered(proxy, history(2), None)
        assert kinds(answer) == ["message"]
        reply, answer = await answered(proxy, history(3), None)
        assert kinds(answer) == ["compaction", "message"]
        assert header(reply, "x-compaction-applied") == "summarize"


async def test_a_request_over_the_usable_input_is_compacted_whatever_the_threshold() -> None:
    async with running(SMALL) as proxy:
        _, answer = await answered(proxy, history(4), 1_000_000)
        assert kinds(answer) == ["compaction", "message"]
        assert SEALER.open(answer["output"][0]["encrypted_content"]).covers_prior


async def test_the_proxys_own_trigger_does_not_fire_below_the_clients_threshold() -> None:
    async with running(SMALL) as proxy:
        reply, answer = await answered(proxy, history(3), 1_700)
        assert header(reply, "x-compaction-applied") == "none"
        assert kinds(answer) == ["message"]
        assert forwarded(proxy.mock) == [history(3)]


async def test_nothing_but_the_users_message_is_forwarded_as_it_is(proxy: Running) -> None:
    items = [user("Hello.")]
    _, answer = await answered(proxy, items, 1)
    assert kinds(answer) == ["message"]
    assert forwarded(proxy.mock) == [items]


async def test_a_broken_history_is_the_providers_to_refuse(proxy: Running) -> None:
    items = [user("Hi."), {"type": "function_call_output", "call_id": "nobody", "output": "x"}]
    _, answer = await answered(proxy, items, 1)
    assert kinds(answer) == ["message"]  # the mock is lenient: a strict provider says why
    assert forwarded(proxy.mock) == [items]
    assert proxy.mock.summary_calls == 0


async def test_the_upstreams_errors_go_as_they_came(proxy: Running) -> None:
    proxy.mock.window = 10  # nothing fits: the upstream refuses even the compacted view
    reply = await proxy.ask(body(history(), **managed(1)), path="responses")
    assert reply.status == 400
    assert "compaction" not in (await read(reply)).decode()


@pytest.mark.parametrize("tail", [b"data: {unterminated", b""], ids=["unterminated", "whole"])
async def test_a_stream_cut_anywhere_gets_its_item_first(tail: bytes) -> None:
    event = b'event: response.completed\ndata: {"type": "response.completed", "sequence_number"'
    rest = b': 0, "response": {"output": []}}\n\n'

    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (event, rest, tail):
            yield chunk

    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}
    reply = with_compaction_item(Reply(200, [], chunks()), item)
    out = await read(reply)
    assert out.endswith(tail or b"\n\n")
    completed = json.loads(out.split(b"\n\n")[2].split(b"data: ")[1])
    assert completed["response"]["output"] == [item]
    assert completed["sequence_number"] == 2


async def test_a_long_conversations_older_user_messages_are_left_to_the_block() -> None:
    words = "keep the parser in crates/parse and the tests green. " * 12
    items = [user(f"Step {i}: {words}") for i in range(8)]
    async with running(SMALL) as proxy:
        reply = await proxy.ask(body(items), path="responses/compact")
        *users, item = json.loads(await read(reply))["output"]
    # The task the plan kept in place (the first), and the latest ones that fit beside it.
    assert users == [items[0], *items[1 - len(users) :]]
    assert 2 <= len(users) < len(items)
    block = SEALER.open(item["encrypted_content"]).block or ""
    assert block.startswith("[Earlier turns of this conversation were condensed: 7 messages")
