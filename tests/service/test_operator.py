"""The operator's view of the sessions (`service/operator.py`), over sessions the service
itself recorded: a `ProxyService` over the embedded store (and Redis, where what the store
returns is the point) and the mock provider, in one process (tests/service/parts.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.session import TurnPoint, tenant_of
from proxy.errors import NothingToCompactError, SessionNotFoundError
from proxy.service import Incoming, ServiceConfig
from proxy.service.operator import Operator, SessionRef, public_context
from tests.builders import assistant, user
from tests.service.parts import KEY, Running, read, running
from tests.service.stores import STORES, store_of
from tests.service.test_compactor import history

TENANT = tenant_of(KEY)
CALLER = Incoming("POST", "compact", "", [("authorization", KEY)])
CONFIG = ServiceConfig(
    policies=ModelPolicies(
        default=ContextPolicy(context_window=6_000, keep_recent=2, output_reserved=500)
    )
)


@pytest.fixture
async def proxy() -> AsyncIterator[Running]:
    async with running(CONFIG) as found:
        yield found


@pytest.fixture(params=STORES)
async def on_each_store(request: pytest.FixtureRequest) -> AsyncIterator[Running]:
    async with store_of(request.param, request) as store, running(CONFIG, store=store) as found:
        yield found


async def turn(proxy: Running, session: str, *, rounds: int = 2, **extra: Any) -> None:
    """One request of `session`, answered, and what it leaves behind stored."""
    headers = tuple(extra.pop("headers", ()))
    body = {"model": "mock-model", "messages": history(rounds), **extra}
    await read(await proxy.ask(body, session=session, headers=headers))
    await proxy.service.settle()


def operator(proxy: Running) -> Operator:
    return proxy.service.operator


async def test_sessions_come_a_page_at_a_time_most_recent_first(on_each_store: Running) -> None:
    for name in ("first", "second", "third"):
        await turn(on_each_store, name)
        await asyncio.sleep(0.01)  # distinct last_seen
    page, more = await operator(on_each_store).sessions(TENANT, limit=2, offset=0)
    assert [row["id"] for row in page] == ["third", "second"]
    assert more
    assert page[0]["turns"] == 1
    rest, more = await operator(on_each_store).sessions(None, limit=2, offset=2)
    assert [row["id"] for row in rest] == ["first"]
    assert not more


async def test_a_session_is_found_in_its_tenant_and_by_the_admin_in_any(
    on_each_store: Running,
) -> None:
    await turn(on_each_store, "mine")
    ops = operator(on_each_store)
    assert await ops.find(TENANT, "mine") == SessionRef(TENANT, "mine")
    assert await ops.find(None, "mine") == SessionRef(TENANT, "mine")  # the tenant looked up
    with pytest.raises(SessionNotFoundError):
        await ops.find(tenant_of("Bearer someone else"), "mine")
    with pytest.raises(SessionNotFoundError):
        await ops.find(None, "nobody's")


async def test_forgetting_a_session_drops_it_and_its_checkpoints(on_each_store: Running) -> None:
    await turn(on_each_store, "s1", rounds=10)
    ops, ref = operator(on_each_store), SessionRef(TENANT, "s1")
    await ops.compact(ref, CALLER)
    await ops.forget(ref)
    with pytest.raises(SessionNotFoundError):
        await ops.find(TENANT, "s1")
    assert await ops.clear(ref, history(10)) == 0  # its checkpoints went with it


async def test_a_session_detail_counts_the_breakdown_when_asked(proxy: Running) -> None:
    """The request path stores the numbers only; the breakdown by category is counted from
    the archive when an operator looks."""
    await turn(proxy, "s1")
    detail = await operator(proxy).detail(SessionRef(TENANT, "s1"))
    context = detail["context"]
    assert context["breakdown"]["messages"] > 0
    assert context["tokens"] == context["breakdown"]["total"]
    assert [point["action"] for point in detail["timeline"]] == ["none"]
    assert detail["history"] == []


async def test_a_breakdown_already_stored_is_shown_as_it_is(proxy: Running) -> None:
    """A report stored with its breakdown (as an earlier version stored every turn's) is not
    counted again."""
    await turn(proxy, "s1")
    stored = {"window": 6_000, "tokens": 7, "breakdown": {"messages": 7, "total": 7}}
    point = TurnPoint(
        turn=2, at=time.time(), pressure=0.1, tokens_before=7, tokens_after=7, action="none"
    )
    await proxy.service.memory.store.record_turn(TENANT, "s1", point, context=stored)
    detail = await operator(proxy).detail(SessionRef(TENANT, "s1"))
    assert detail["context"] == stored


async def test_a_session_whose_archive_expired_shows_its_numbers_alone(proxy: Running) -> None:
    """The archived messages expire on their own: with none left, nothing is counted."""
    store = proxy.service.memory.store
    await store.begin_turn(TENANT, "s1", model="mock-model", at=time.time())
    point = TurnPoint(
        turn=1, at=time.time(), pressure=0.1, tokens_before=9, tokens_after=9, action="none"
    )
    await store.record_turn(TENANT, "s1", point, context={"tokens": 9, "breakdown": None})
    detail = await operator(proxy).detail(SessionRef(TENANT, "s1"))
    assert detail["context"] == {"tokens": 9, "breakdown": None}


async def test_a_session_served_uncompacted_has_no_context_report(proxy: Running) -> None:
    await turn(proxy, "s1", headers=[("x-compaction", "off")])
    detail = await operator(proxy).detail(SessionRef(TENANT, "s1"))
    assert detail["turns"] == 1
    assert detail["context"] is None
    assert detail["timeline"] == []


async def test_an_explicit_compaction_is_what_the_session_forwards_next(proxy: Running) -> None:
    await turn(proxy, "s1", rounds=10, temperature=0.3)
    ops, ref = operator(proxy), SessionRef(TENANT, "s1")
    result = await ops.compact(ref, CALLER)
    assert result["compacted"]
    assert result["strategy"] == "summarize"
    assert result["tokens_after"] < result["tokens_before"]
    assert result["summary_wait_s"] > 0  # an explicit compaction waits for its summary
    assert result["context"]["breakdown"]["summary"] > 0
    assert len(proxy.mock.summary_requests) == 1
    original = await ops.messages(ref, "original")
    forwarded = await ops.messages(ref, "forwarded")
    assert original == history(10)
    assert len(forwarded) < len(original)
    await turn(proxy, "s1", rounds=10, temperature=0.3)
    assert len(proxy.mock.last.json()["messages"]) == len(forwarded)


async def test_a_reverted_compaction_forwards_the_whole_history_again(proxy: Running) -> None:
    await turn(proxy, "s1", rounds=10)
    ops, ref = operator(proxy), SessionRef(TENANT, "s1")
    assert await ops.revert(ref) == {"reverted": False, "checkpoint": None}  # nothing to undo
    await ops.compact(ref, CALLER, "truncate")
    reverted = await ops.revert(ref)
    assert reverted["reverted"]
    assert reverted["checkpoint"]["strategy"] == "truncate"
    assert await ops.messages(ref, "forwarded") == history(10)


async def test_clearing_drops_every_checkpoint_longest_first(proxy: Running) -> None:
    await turn(proxy, "s1", rounds=10)
    ops, ref = operator(proxy), SessionRef(TENANT, "s1")
    await ops.compact(ref, CALLER, "truncate")
    grown = [*history(10), assistant("more"), user("x " * 2000)]
    await ops.compact_messages(ref, CALLER, grown, "truncate")
    assert await ops.clear(ref, grown) == 2
    assert await ops.messages(ref, "forwarded") == history(10)


async def test_a_session_without_a_history_has_nothing_to_compact(proxy: Running) -> None:
    """Its archive expired, and no request shape was stored: the model is the state's."""
    store = proxy.service.memory.store
    await store.begin_turn(TENANT, "s1", model="mock-model", at=time.time())
    ops, ref = operator(proxy), SessionRef(TENANT, "s1")
    with pytest.raises(NothingToCompactError):
        await ops.compact(ref, CALLER)
    result = await ops.compact_messages(ref, CALLER, history(10), "truncate")
    assert result["strategy"] == "truncate"


async def test_an_unknown_session_is_not_found_for_any_action(proxy: Running) -> None:
    ops, ref = operator(proxy), SessionRef(TENANT, "nobody")
    with pytest.raises(SessionNotFoundError):
        await ops.detail(ref)
    with pytest.raises(SessionNotFoundError):
        await ops.revert(ref)


def test_the_shown_context_settings_hide_the_brain_secrets() -> None:
    shown = public_context(
        {
            "trigger": 0.8,
            "summary_brain": {"api_key": "sk-x", "base_url": "https://u:secret@brain/v1"},
        }
    )
    assert shown["summary_brain"] == {"api_key": "***", "base_url": "https://u:***@brain/v1"}
    assert shown["trigger"] == 0.8
    assert public_context({})["summary_brain"] == {}  # no brain configured: nothing to hide
