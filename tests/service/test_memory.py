"""`Memory`, the store as the request path uses it: the same on the embedded store and on
Redis while the store answers; around the store, counted and logged once, while it does not.

The fault tests stop a private redis-server (`redis_server.stop()`, as a crashed or
unreachable Redis) under a real `RedisStore`; nothing of the store is faked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest

from proxy.adapters.store import EndedTurn, OpenedTurn, Store
from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    chain_hashes,
    content_hash,
)
from proxy.observability.metrics import Metrics
from proxy.service import memory as memory_module
from proxy.service.memory import CALIBRATION_JUMP, MAX_FACTS, Memory
from tests.builders import assistant, system, user
from tests.redis_server import RedisServer
from tests.service.outage import OUTAGES, Outage, outage_of
from tests.service.stores import STORES, store_of

TENANT = "tenant-a"
OTHER = "tenant-b"
HISTORY: list[Message] = [user("plan the migration"), assistant("step one"), user("go on")]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    async with store_of(request.param, request) as opened:
        yield opened


@pytest.fixture
async def redis_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A `RedisStore` on the test's own `redis_server`, whose faults the test makes."""
    async with store_of("redis", request, timeout_s=0.5) as opened:
        yield opened


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def counted(metrics: Metrics) -> tuple[float, float, float]:
    """Store errors, writes lost, and the breaker gauge (1 open, 0 closed), as /metrics has them."""
    names = ("store_errors_total", "store_writes_lost_total", "store_breaker_open")
    get = metrics.registry.get_sample_value
    errors, lost, breaker = (get(f"compaction_proxy_{name}") or 0.0 for name in names)
    return errors, lost, breaker


def checkpoint(covered: int = 2) -> Checkpoint:
    """A checkpoint standing in for the first `covered` messages of `HISTORY`."""
    return Checkpoint(
        prefix_hash=chain_hashes(HISTORY)[covered - 1],
        covered=covered,
        messages=[system("Summary: a migration is being planned.")],
        created_at=1.0,
        strategy="summary",
        tokens_before=120,
        tokens_after=30,
    )


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


async def without_a_session(memory: Memory) -> None:
    """Every call a request with neither a session nor a body message makes."""
    assert await memory.find_checkpoint(TENANT, None, []) is None
    assert await memory.put_checkpoint(TENANT, None, checkpoint()) == checkpoint()
    assert await memory.find_summaries(TENANT, None, ["k1"]) == {}
    assert await memory.put_summary(TENANT, None, "k1", "text") is False
    assert await memory.begin_turn(TENANT, None, "mock-model", at=1.0) == SessionState()
    assert await memory.session(TENANT, None) is None
    record = CompactionRecord(
        at=1.0, trigger="pressure", strategy="trim", tokens_before=9, tokens_after=5
    )
    await memory.record_compaction(TENANT, None, record)
    await memory.record_usage(TENANT, None, {"prompt_tokens": 5}, pressure=0.1)
    point = TurnPoint(turn=1, at=1.0, pressure=0.1, tokens_before=9, tokens_after=5, action="none")
    await memory.record_turn(TENANT, None, point, {}, None)
    await memory.archive(TENANT, None, HISTORY)
    assert await memory.open_turn(TENANT, None, "m", 1.0, []) == OpenedTurn(SessionState(), None)
    await memory.end_turn(TENANT, None, EndedTurn(point, {}, None, HISTORY))
    assert await memory.find_prepared(TENANT, None, [], ["k1"]) == (None, {})


# -- while the store answers: the same on both stores ----------------------------------------


async def test_what_a_turn_writes_is_read_back_as_written(store: Store) -> None:
    memory = Memory(store)
    began = await memory.begin_turn(TENANT, "s1", "mock-model", at=10.0)
    record = CompactionRecord(
        at=11.0, trigger="pressure", strategy="summary", tokens_before=120, tokens_after=30
    )
    await memory.record_compaction(TENANT, "s1", record)
    await memory.record_usage(TENANT, "s1", {"prompt_tokens": 30}, pressure=0.25)
    point = TurnPoint(
        turn=1, at=11.0, pressure=0.25, tokens_before=120, tokens_after=30, action="summary"
    )
    await memory.record_turn(TENANT, "s1", point, {"tokens": 30}, {"model": "mock-model"})
    hashes = [content_hash(message) for message in HISTORY]
    await memory.archive(TENANT, "s1", HISTORY, hashes)
    state = await memory.session(TENANT, "s1")
    assert began.turns == 1
    assert state is not None
    assert (state.turns, state.model, state.compactions) == (1, "mock-model", 1)
    assert state.last_usage == {"prompt_tokens": 30}
    assert state.history == (record,)
    assert await store.timeline(TENANT, "s1") == [point]
    assert await store.last_request(TENANT, "s1") == {"model": "mock-model"}
    assert await store.archived(TENANT, "s1") == HISTORY
    assert await memory.session(OTHER, "s1") is None  # a session is its tenant's own
    await memory.aclose()  # no probe ever started: nothing to stop


async def test_a_request_without_a_session_writes_nothing(store: Store) -> None:
    # A client that sends no X-Session-Id and no body message has no session to count its
    # turn in: each call is a no-op, not a write under some shared "None" session.
    await without_a_session(Memory(store))
    assert await store.list_sessions(TENANT) == []
    assert await store.list_sessions(None) == []


async def test_the_longest_stored_checkpoint_of_the_history_is_found(store: Store) -> None:
    memory = Memory(store)
    stored = await memory.put_checkpoint(TENANT, "s1", checkpoint(2))
    assert stored == checkpoint(2)
    assert await memory.find_checkpoint(TENANT, "s1", chain_hashes(HISTORY)) == checkpoint(2)
    assert await memory.find_checkpoint(OTHER, "s1", chain_hashes(HISTORY)) is None
    assert await memory.find_checkpoint(TENANT, "s2", chain_hashes(HISTORY)) is None
    # A request with no body message (a system prompt alone) has no prefix to look up.
    assert await memory.find_checkpoint(TENANT, "s1", []) is None


async def test_a_summary_written_ahead_is_found_by_its_key(store: Store) -> None:
    memory = Memory(store)
    assert await memory.put_summary(TENANT, "s1", "k1", "Summary one.") is True
    assert await memory.find_summaries(TENANT, "s1", ["k0", "k1"]) == {"k1": "Summary one."}
    assert await memory.find_summaries(OTHER, "s1", ["k1"]) == {}
    assert await memory.find_summaries(TENANT, "s2", ["k1"]) == {}


async def test_a_lock_is_held_once_until_released(store: Store) -> None:
    # Replicas sharing the store coordinate by it: one writes a summary, the others wait.
    one, two = Memory(store), Memory(store)
    token = await one.acquire(TENANT, "summary:k1", ttl_s=60)
    assert token is not None
    assert await two.acquire(TENANT, "summary:k1", ttl_s=60) is None
    await one.release(TENANT, "summary:k1", token)
    assert await two.acquire(TENANT, "summary:k1", ttl_s=60) is not None


async def test_model_facts_are_the_tenants_own_and_kept_by_model(store: Store) -> None:
    memory = Memory(store)
    assert await memory.calibration(TENANT, "mock-model") is None
    assert await memory.learned_window(TENANT, "mock-model") is None
    await memory.set_calibration(TENANT, "mock-model", 1.25)
    await memory.learn_window(TENANT, "mock-model", 8192)
    await memory.learn_window(TENANT, None, 4096)  # a request without a model still learns
    assert await memory.calibration(TENANT, "mock-model") == 1.25
    assert await memory.learned_window(TENANT, "mock-model") == 8192
    assert await memory.learned_window(TENANT, None) == 4096
    # Another replica, asking the store: the writes went through, under the tenant only.
    other = Memory(store)
    assert await other.calibration(TENANT, "mock-model") == 1.25
    assert await other.learned_window(TENANT, "mock-model") == 8192
    assert await other.learned_window(TENANT, "") == 4096
    assert await other.calibration(OTHER, "mock-model") is None
    assert await other.learned_window(OTHER, "mock-model") is None


async def test_another_replicas_fact_shows_once_the_cached_one_is_stale(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Facts are read on every request, so a replica keeps them `FACT_TTL_S` instead of asking
    # the store each time; another replica's write reaches it once that has passed.
    monkeypatch.setattr(memory_module, "FACT_TTL_S", 0.5)  # not 5 s: the test waits it out
    reader, writer = Memory(store), Memory(store)
    assert await reader.calibration(TENANT, "mock-model") is None
    await writer.set_calibration(TENANT, "mock-model", 1.5)
    assert await reader.calibration(TENANT, "mock-model") is None  # from its cache
    await asyncio.sleep(0.55)
    assert await reader.calibration(TENANT, "mock-model") == 1.5


async def test_a_drifting_calibration_is_written_when_it_aged_or_jumped(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A factor moving a little with every response is used at once here, and written for the
    # other replicas (which read it at most every `FACT_TTL_S`) when the last write aged or
    # the factor jumped.
    monkeypatch.setattr(memory_module, "FACT_TTL_S", 0.3)
    writer = Memory(store)

    async def stored() -> float | None:
        return await Memory(store).calibration(TENANT, "mock-model")  # a fresh replica

    await writer.set_calibration(TENANT, "mock-model", 1.10)
    assert await stored() == 1.10
    for factor in (1.12, 1.09, 1.13):  # the agents of a tenant pull it to and fro
        await writer.set_calibration(TENANT, "mock-model", factor)
    assert await writer.calibration(TENANT, "mock-model") == 1.13  # its own: the newest
    assert await stored() == 1.10  # each less than CALIBRATION_JUMP from the last write
    await writer.set_calibration(TENANT, "mock-model", 1.10 + CALIBRATION_JUMP)
    assert await stored() == 1.10 + CALIBRATION_JUMP
    await writer.set_calibration(TENANT, "mock-model", 1.14)
    assert await stored() == 1.10 + CALIBRATION_JUMP
    await asyncio.sleep(0.35)  # the last write is older than FACT_TTL_S
    await writer.set_calibration(TENANT, "mock-model", 1.141)
    assert await stored() == 1.141
    await writer.set_calibration(TENANT, "other-model", 1.2)  # each model its own
    assert await Memory(store).calibration(TENANT, "other-model") == 1.2


async def test_a_replica_remembers_at_most_max_facts_writes_the_oldest_dropped_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a replica wrote last is kept per tenant and model, bounded like its facts: a
    # dropped record only makes its next drift a write.
    monkeypatch.setattr(memory_module, "MAX_FACTS", 2)
    writer = Memory(store)
    for model in ("m1", "m2", "m3"):  # m1's record of its write is dropped
        await writer.set_calibration(TENANT, model, 1.5)
    await writer.set_calibration(TENANT, "m1", 1.501)
    await writer.set_calibration(TENANT, "m3", 1.501)
    assert await Memory(store).calibration(TENANT, "m1") == 1.501  # written again
    assert await Memory(store).calibration(TENANT, "m3") == 1.5  # a drift, not written


async def test_a_replica_keeps_at_most_max_facts_the_oldest_dropped_first(
    request: pytest.FixtureRequest,
) -> None:
    # Many tenants times many models must not grow a replica's memory without bound. Seen
    # from outside: a dropped fact is asked of the store again (and so shows another
    # replica's write at once), a kept one is not (and still shows what was cached).
    async with store_of("embedded", request) as store:
        reader, writer = Memory(store), Memory(store)
        models = [f"model-{n}" for n in range(MAX_FACTS + 1)]
        for model in models:
            assert await reader.calibration(TENANT, model) is None
        for model in models[:2]:
            await writer.set_calibration(TENANT, model, 2.0)
        assert await reader.calibration(TENANT, models[1]) is None  # kept: from the cache
        assert await reader.calibration(TENANT, models[0]) == 2.0  # dropped: asked again


# -- while the store fails: around it ---------------------------------------------------------


async def test_a_stopped_redis_is_served_around_and_each_skipped_write_counted(
    redis_server: RedisServer,
    redis_store: Store,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = Memory(redis_store, metrics=metrics, probe_interval_s=60)
    redis_server.stop()
    # A request goes on as if the store had nothing: a fresh session, no checkpoint.
    assert await memory.begin_turn(TENANT, "s1", "mock-model", at=1.0) == SessionState()
    assert memory.down
    assert counted(metrics) == (1, 1, 1)
    assert await memory.find_checkpoint(TENANT, "s1", chain_hashes(HISTORY)) is None
    assert await memory.session(TENANT, "s1") is None
    assert await memory.find_summaries(TENANT, "s1", ["k1"]) == {}
    assert await memory.calibration(TENANT, "mock-model") is None
    assert counted(metrics) == (5, 1, 1)  # reads: errors, not lost writes
    assert await memory.put_checkpoint(TENANT, "s1", checkpoint()) == checkpoint()  # as if stored
    assert await memory.put_summary(TENANT, "s1", "k1", "text") is False  # told: not stored
    await memory.record_usage(TENANT, "s1", {"prompt_tokens": 1}, pressure=0.1)
    assert counted(metrics) == (8, 4, 1)
    hashes = chain_hashes(HISTORY)
    opened = await memory.open_turn(TENANT, "s1", "mock-model", 1.0, hashes)
    assert opened == OpenedTurn(SessionState(), None)
    assert await memory.find_prepared(TENANT, "s1", hashes, ["k1"]) == (None, {})
    point = TurnPoint(turn=1, at=1.0, pressure=0.1, tokens_before=9, tokens_after=5, action="none")
    await memory.end_turn(TENANT, "s1", EndedTurn(point, {}, None, HISTORY))
    assert counted(metrics) == (11, 6, 1)
    # Alone, there is no one to coordinate with: the lock is ours, releasing it a no-op.
    assert await memory.acquire(TENANT, "summary:k1", ttl_s=60) == "local"
    await memory.release(TENANT, "summary:k1", "local")
    assert logged(caplog, "session store unavailable, serving without it") == 1
    await memory.aclose()


async def test_a_fact_known_before_an_outage_stands_through_it(
    redis_server: RedisServer, redis_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_module, "FACT_TTL_S", 0.0)  # asked of the store every time
    memory = Memory(redis_store, probe_interval_s=60)
    await memory.set_calibration(TENANT, "mock-model", 1.1)
    await memory.learn_window(TENANT, "mock-model", 8000)
    redis_server.stop()
    assert await memory.calibration(TENANT, "mock-model") == 1.1
    assert await memory.learned_window(TENANT, "mock-model") == 8000
    assert memory.down
    assert await memory.calibration(TENANT, "other-model") is None  # never known
    await memory.aclose()


async def test_a_request_without_a_session_or_a_body_makes_no_store_call(
    redis_server: RedisServer, redis_store: Store, metrics: Metrics
) -> None:
    # Nothing to look up or count: not a call served around the store but no call at all,
    # so such requests neither wait on a failing Redis, nor open its breaker, nor show in
    # its error count (not even as calls skipped while the breaker is open).
    memory = Memory(redis_store, metrics=metrics, probe_interval_s=60)
    redis_server.stop()
    await without_a_session(memory)
    assert counted(metrics) == (0, 0, 0)
    assert not memory.down
    await memory.begin_turn(TENANT, "s1", "mock-model", at=1.0)  # opens the breaker
    await without_a_session(memory)
    assert counted(metrics) == (1, 1, 1)
    await memory.aclose()


async def test_calls_fail_together_and_the_outage_is_logged_once(
    redis_server: RedisServer,
    redis_store: Store,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Requests in flight when Redis goes each fail on their own call; the first opens the
    # breaker, the others find it open: one warning for the outage, every call counted.
    memory = Memory(redis_store, metrics=metrics, probe_interval_s=60)
    redis_server.stop()
    sessions = [f"s{n}" for n in range(5)]
    states = await asyncio.gather(
        *(memory.begin_turn(TENANT, s, "mock-model", at=1.0) for s in sessions)
    )
    assert states == [SessionState()] * len(sessions)
    assert counted(metrics) == (5, 5, 1)
    assert logged(caplog, "session store unavailable, serving without it") == 1
    await memory.aclose()


async def test_while_the_breaker_is_open_no_call_is_made_even_if_redis_is_back(
    redis_server: RedisServer,
    redis_store: Store,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The point of the breaker: a hung Redis would make every call wait a timeout. So until a
    # PING (at most one per `probe_interval_s`) finds the store back, nothing is sent to it.
    caplog.set_level(logging.DEBUG, logger="proxy.store")
    memory = Memory(redis_store, metrics=metrics, probe_interval_s=60)
    redis_server.stop()
    await memory.begin_turn(TENANT, "s1", "mock-model", at=1.0)  # opens the breaker
    await memory.session(TENANT, "s1")  # the first skipped call probes at once: refused
    await until(lambda: logged(caplog, "session store still unavailable") == 1, "no probe")
    redis_server.start()
    await memory.put_checkpoint(TENANT, "s1", checkpoint())
    await memory.begin_turn(TENANT, "s2", "mock-model", at=2.0)
    assert memory.down
    assert await redis_store.find_checkpoint(TENANT, "s1", chain_hashes(HISTORY)) is None
    assert await redis_store.load_session(TENANT, "s2") is None
    assert logged(caplog, "session store still unavailable") == 1  # no second probe yet
    assert counted(metrics) == (4, 3, 1)
    await memory.aclose()


# Metrics are optional (the server always passes its own): without them, the same, uncounted.
@pytest.mark.parametrize("counting", [True, False], ids=["metrics", "no-metrics"])
@pytest.mark.parametrize("kind", OUTAGES)
async def test_a_probe_that_finds_the_store_back_closes_the_breaker(
    kind: str,
    request: pytest.FixtureRequest,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
    counting: bool,
) -> None:
    async with outage_of(kind, request, timeout_s=0.5) as outage:
        await _probed_back(outage, metrics if counting else None, caplog)


async def _probed_back(
    outage: Outage, metrics: Metrics | None, caplog: pytest.LogCaptureFixture
) -> None:
    store = outage.store
    memory = Memory(store, metrics=metrics, probe_interval_s=0.05)
    outage.stop()
    await memory.begin_turn(TENANT, "s1", "mock-model", at=1.0)
    outage.start()
    # Served around, this call starts the probe; the one after it reaches Redis again.
    assert await memory.session(TENANT, "s1") is None
    await until(lambda: not memory.down, "the breaker did not close")
    if metrics is not None:
        assert counted(metrics) == (2, 1, 0)
    assert logged(caplog, "session store is back") == 1
    await memory.begin_turn(TENANT, "s2", "mock-model", at=2.0)
    assert await store.load_session(TENANT, "s2") is not None
    await memory.aclose()


async def test_closing_stops_a_probe_in_flight_and_starts_no_other(
    redis_server: RedisServer, redis_store: Store
) -> None:
    # A PING still waiting on a hung Redis must not outlive the store's own close (nor hold
    # up shutdown by its timeout); nor may a call after the close start one.
    memory = Memory(redis_store, probe_interval_s=0.01)
    redis_server.stop()
    await memory.begin_turn(TENANT, "s1", "mock-model", at=1.0)
    redis_server.start()
    redis_server.pause()
    try:
        await memory.session(TENANT, "s1")  # starts a probe
        await asyncio.sleep(0.05)  # its PING sent, unanswered
        await memory.session(TENANT, "s1")  # a probe runs: no second one
        started = time.monotonic()
        await memory.aclose()
        assert time.monotonic() - started < 0.4  # not the store's 0.5 s timeout
    finally:
        redis_server.resume()
    await asyncio.sleep(0.05)
    assert await memory.session(TENANT, "s1") is None  # served around: no probe any more
    await asyncio.sleep(0.05)
    assert memory.down
