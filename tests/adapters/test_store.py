"""The session store: one contract, run against the embedded store and real redis-servers.

Every `backend` test runs three times: on `MemoryStore`, on a `RedisStore` talking to a
private redis-server on a unix socket, and on a `RedisStore` in cluster mode talking to a
private one-node Redis Cluster (tests/adapters/backends.py). The machine's own Redis is never
used.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from proxy.adapters.store import (
    HISTORY_LIMIT,
    TIMELINE_LIMIT,
    EndedTurn,
    MemoryStore,
    OpenedTurn,
    RecallIds,
    RedisStore,
    Store,
    StoreUnavailableError,
    open_store,
)
from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    chain_hashes,
    content_hash,
)
from proxy.settings import RedisMode, RedisSettings

# The six `*_fixture`s are pytest's to find here (see tests/adapters/backends.py).
from tests.adapters.backends import (
    TTL_S,
    A,
    B,
    Backend,
    Clock,
    answers,
    backend_fixture,  # noqa: F401
    cluster_node_fixture,  # noqa: F401
    cluster_port_fixture,  # noqa: F401
    kind_fixture,  # noqa: F401
    redis_pair_fixture,  # noqa: F401
    redis_socket_fixture,  # noqa: F401
    start_redis_server,
    stop_server,
    wait_until,
)
from tests.builders import assistant, user
from tests.servers import free_port

# The Redis clients are shared by the module's tests, so they share its event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


# -- builders --------------------------------------------------------------------------------


def conversation(length: int, topic: str = "task") -> list[Message]:
    return [
        user(f"{topic} {i}") if i % 2 == 0 else assistant(f"{topic} reply {i}")
        for i in range(length)
    ]


def checkpoint(hashes: list[str], covered: int, summary: str = "summary") -> Checkpoint:
    return Checkpoint(
        prefix_hash=hashes[covered - 1],
        covered=covered,
        messages=[user(summary)],
        created_at=1.0,
        strategy="summarize",
        tokens_before=1000,
        tokens_after=100,
    )


def record(tokens_before: int) -> CompactionRecord:
    return CompactionRecord(
        at=2.0, trigger="pressure", strategy="truncate", tokens_before=tokens_before, tokens_after=1
    )


def point(turn: int, before: int = 100, after: int = 100) -> TurnPoint:
    action = "none" if before == after else "summarize"
    return TurnPoint(turn, float(turn), 0.2, before, after, action)


# -- opening ---------------------------------------------------------------------------------


async def test_open_store_embedded_when_no_url() -> None:
    store = open_store(RedisSettings())
    assert isinstance(store, MemoryStore)
    await store.ping()
    await store.aclose()


@pytest.fixture
def sentinel_port(tmp_path: Path) -> Iterator[int]:
    """A private redis-server on loopback and a Sentinel monitoring it as `primary`."""
    master, port = free_port(), free_port()
    server = start_redis_server(tmp_path, "--bind", "127.0.0.1", "--port", str(master))
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"bind 127.0.0.1\nport {port}\ndir {tmp_path}\n"
        f"sentinel monitor primary 127.0.0.1 {master} 1\n"
    )
    sentinel = start_redis_server(tmp_path, str(config), "--sentinel")
    probe = redis.Redis(port=port, decode_responses=True)
    try:
        wait_until(lambda: answers(probe), "redis-sentinel")
        yield port
    finally:
        probe.close()
        stop_server(sentinel)
        stop_server(server)


async def test_sentinel_mode_finds_the_master(sentinel_port: int) -> None:
    settings = RedisSettings(
        mode="sentinel",
        sentinels=(f"127.0.0.1:{sentinel_port}",),
        sentinel_master="primary",
        timeout_s=1,
    )
    store = open_store(settings)
    assert isinstance(store, RedisStore)
    await store.ping()
    assert (await store.begin_turn(A, "s", model="m", at=1.0)).turns == 1
    assert (await store.begin_turn(A, "s", model="m", at=2.0)).turns == 2
    # A pipeline (the turn's record with its messages' bodies) through the master's pool.
    body = conversation(3)
    await store.end_turn(A, "s", EndedTurn(point(2), {}, None, body))
    assert await store.archived(A, "s") == body
    await store.aclose()


# -- failures --------------------------------------------------------------------------------

Call = Callable[[Store], Awaitable[Any]]
CALLS: dict[str, Call] = {
    "ping": lambda s: s.ping(),
    "find_checkpoint": lambda s: s.find_checkpoint(A, "s", ["h1", "h2"]),
    "put_checkpoint": lambda s: s.put_checkpoint(A, "s", checkpoint(["h1"], 1)),
    "drop_checkpoint": lambda s: s.drop_checkpoint(A, "s", "h1"),
    "begin_turn": lambda s: s.begin_turn(A, "s", model="m", at=1.0),
    "record_compaction": lambda s: s.record_compaction(A, "s", record(1)),
    "record_usage": lambda s: s.record_usage(A, "s", usage={}, pressure=0.1),
    "record_turn": lambda s: s.record_turn(A, "s", point(1), context={}),
    "timeline": lambda s: s.timeline(A, "s"),
    "last_request": lambda s: s.last_request(A, "s"),
    "load_session": lambda s: s.load_session(A, "s"),
    "list_sessions": lambda s: s.list_sessions(None),
    "delete_session": lambda s: s.delete_session(A, "s"),
    "archive": lambda s: s.archive(A, "s", conversation(2)),
    "archived": lambda s: s.archived(A, "s"),
    "acquire": lambda s: s.acquire(A, "lock", ttl_s=1),
    "release": lambda s: s.release(A, "lock", "token"),
    "calibration": lambda s: s.calibration(A, "m"),
    "set_calibration": lambda s: s.set_calibration(A, "m", 1.1, ttl_s=60),
    "learned_window": lambda s: s.learned_window(A, "m"),
    "learn_window": lambda s: s.learn_window(A, "m", 1000, ttl_s=60),
    "put_summary": lambda s: s.put_summary(A, "s", "s:k", "- a summary"),
    "find_summaries": lambda s: s.find_summaries(A, "s", ["s:k"]),
}


def _unreachable(mode: RedisMode) -> RedisSettings:
    port = free_port()  # nothing listens there
    if mode == "sentinel":
        return RedisSettings(
            mode="sentinel", sentinels=(f"127.0.0.1:{port}",), sentinel_master="m", timeout_s=0.2
        )
    return RedisSettings(url=f"redis://127.0.0.1:{port}/0", mode=mode, timeout_s=0.2)


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
@pytest.mark.parametrize("mode", ["single", "cluster", "sentinel"])
async def test_unreachable_redis_is_unavailable(mode: RedisMode, call: Call) -> None:
    store = open_store(_unreachable(mode))
    with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
        await call(store)
    await store.aclose()


async def test_silent_redis_times_out_within_the_timeout() -> None:
    # A server that accepts connections and never answers: a hung Redis, not a dead one.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        store = open_store(RedisSettings(url=url, timeout_s=0.1))
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
            await store.begin_turn(A, "s", model="m", at=1.0)
        assert time.monotonic() - started < 1.0  # one retry at most, not redis-py's ten
        await store.aclose()


# -- expiry: the embedded store's clock ------------------------------------------------------


async def test_memory_session_expires_unless_written() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    await store.begin_turn(A, "s", model="m", at=1.0)
    clock.now += 60
    await store.record_usage(A, "s", usage={}, pressure=0.1)  # a write refreshes
    clock.now += 60
    assert await store.load_session(A, "s") is not None
    clock.now += 41
    assert await store.load_session(A, "s") is None
    assert await store.list_sessions(A) == []


async def test_memory_archive_expires_unless_archived_again() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    body = conversation(4)
    await store.archive(A, "s", body[:2])
    clock.now += 60
    await store.archive(A, "s", body)  # refreshes the messages it still holds
    clock.now += 60
    assert await store.archived(A, "s") == body
    clock.now += 41
    assert await store.archived(A, "s") == []


async def test_memory_archive_moves_expiry_at_most_every_tenth_of_the_ttl() -> None:
    # A long history is not walked on every request; its messages still outlive the last
    # request by nine tenths of the TTL at least.
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    body = conversation(6)
    start = clock.now
    await store.archive(A, "s", body[:2])
    clock.now = start + 95
    await store.archive(A, "s", body[:4])  # all four expire at 195
    clock.now = start + 100
    await store.archive(A, "s", body)  # too soon to move that; the new two expire at 200
    clock.now = start + 190
    assert await store.archived(A, "s") == body
    clock.now = start + 196
    assert await store.archived(A, "s") == body[4:]


async def test_memory_found_checkpoint_is_refreshed() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    hashes = chain_hashes(conversation(4))
    kept = await store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    for _ in range(3):
        clock.now += 60
        assert await store.find_checkpoint(A, "s", hashes) == kept
    clock.now += 101
    assert await store.find_checkpoint(A, "s", hashes) is None


async def test_memory_writes_sweep_expired_entries() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    for index in range(10):
        await store.begin_turn(A, f"s{index}", model="m", at=1.0)
    clock.now += 101
    await store.begin_turn(A, "new", model="m", at=2.0)
    assert len(store._sessions._entries) == 1  # swept, though never read again


async def test_memory_evicts_the_least_recently_written_session() -> None:
    store = MemoryStore(max_sessions=2, max_messages=3)
    await store.begin_turn(A, "old", model="m", at=1.0)
    await store.begin_turn(A, "mid", model="m", at=2.0)
    await store.begin_turn(A, "old", model="m", at=3.0)
    await store.begin_turn(A, "new", model="m", at=4.0)
    assert await store.load_session(A, "mid") is None
    assert [session for _, session, _ in await store.list_sessions(A)] == ["new", "old"]
    body = conversation(4)
    await store.archive(A, "s", body)
    assert await store.archived(A, "s") == body[1:]  # the oldest message made room


# == the contract, on every backend ==========================================================

# -- checkpoints -----------------------------------------------------------------------------


async def test_put_checkpoint_concurrent_puts_all_get_the_winner(backend: Backend) -> None:
    hashes = chain_hashes(conversation(4))
    first, second = checkpoint(hashes, 4, "first"), checkpoint(hashes, 4, "second")
    kept = await asyncio.gather(
        backend.store.put_checkpoint(A, "s", first), backend.store.put_checkpoint(A, "s", second)
    )
    assert kept[0] == kept[1]
    assert kept[0] in (first, second)
    assert await backend.store.find_checkpoint(A, "s", hashes) == kept[0]


async def test_put_checkpoint_keeps_the_existing_one(backend: Backend) -> None:
    hashes = chain_hashes(conversation(4))
    original = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2, "original"))
    assert await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2, "later")) == original


async def test_put_checkpoint_records_the_compaction_only_when_it_is_kept(
    backend: Backend,
) -> None:
    store = backend.store
    hashes = chain_hashes(conversation(4))
    for _ in range(3):
        await store.begin_turn(A, "s", model="m", at=1.0)
    first = await store.put_checkpoint(A, "s", checkpoint(hashes, 2, "first"), record(900))
    later = await store.put_checkpoint(A, "s", checkpoint(hashes, 2, "later"), record(800))
    assert later == first
    state = await store.load_session(A, "s")
    assert state is not None
    assert (state.compactions, state.last_compaction_turn, state.history) == (1, 3, (record(900),))
    await store.put_checkpoint(A, "s", checkpoint(hashes, 3))  # no record given: none made
    assert (await store.load_session(A, "s") or state).compactions == 1


async def test_put_checkpoint_stores_its_recall_ids_whichever_is_kept(backend: Backend) -> None:
    store = backend.store
    body = conversation(4)
    hashes = chain_hashes(body)
    note = user("[a note the proxy made]")
    ids = {"rc_aaaaaaaaaa": [content_hash(body[0]), content_hash(note)]}
    recalls = RecallIds(ids, {content_hash(note): note})
    kept = await store.put_checkpoint(A, "s", checkpoint(hashes, 2), None, recalls)
    assert await store.recalled(A, "s", "rc_aaaaaaaaaa") == [note]  # body[0] is not archived
    other = RecallIds({"rc_bbbbbbbbbb": [content_hash(note)]}, {})
    assert await store.put_checkpoint(A, "s", checkpoint(hashes, 2, "later"), None, other) == kept
    assert await store.recalled(A, "s", "rc_bbbbbbbbbb") == [note]


async def test_find_checkpoint_longest_match_wins(backend: Backend) -> None:
    body = conversation(6)
    hashes = chain_hashes(body)
    short, long = checkpoint(hashes, 2, "short"), checkpoint(hashes, 4, "long")
    await backend.store.put_checkpoint(A, "s", short)
    await backend.store.put_checkpoint(A, "s", long)
    assert await backend.store.find_checkpoint(A, "s", hashes) == long
    assert await backend.store.find_checkpoint(A, "s", hashes[:3]) == short
    edited = chain_hashes([*body[:1], user("edited"), *body[2:]])
    assert await backend.store.find_checkpoint(A, "s", edited) is None
    assert await backend.store.find_checkpoint(A, "s", []) is None


async def test_a_checkpoint_under_a_prefix_not_its_own_is_passed_over(backend: Backend) -> None:
    # The longest prefix's key holds a checkpoint covering another length (a chain hash no
    # real history collides with): the longest right one is found, and its expiry moved.
    hashes = chain_hashes(conversation(6))
    short = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    wrong = replace(checkpoint(hashes, 3), prefix_hash=hashes[4])
    await backend.store.put_checkpoint(A, "s", wrong)
    assert await backend.store.find_checkpoint(A, "s", hashes) == short
    only_wrong = chain_hashes(conversation(6, topic="other"))
    await backend.store.put_checkpoint(
        A, "s", replace(checkpoint(only_wrong, 3), prefix_hash=only_wrong[4])
    )
    assert await backend.store.find_checkpoint(A, "s", only_wrong) is None


async def test_a_checkpoint_is_its_sessions_own(backend: Backend) -> None:
    # Kept under the session's hash tag: another conversation of the tenant with the same
    # messages (a fork under a new X-Session-Id) compacts on its own.
    hashes = chain_hashes(conversation(4))
    kept = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    assert await backend.store.find_checkpoint(A, "t", hashes) is None
    assert await backend.store.drop_checkpoint(A, "t", hashes[1]) is False
    assert await backend.store.find_checkpoint(A, "s", hashes) == kept


async def test_drop_checkpoint_reverts_to_the_shorter_match(backend: Backend) -> None:
    hashes = chain_hashes(conversation(6))
    short = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 4))
    assert await backend.store.drop_checkpoint(A, "s", hashes[3]) is True
    assert await backend.store.drop_checkpoint(A, "s", hashes[3]) is False
    assert await backend.store.find_checkpoint(A, "s", hashes) == short


# -- tenants ---------------------------------------------------------------------------------


async def test_tenants_never_see_each_other(backend: Backend) -> None:
    store = backend.store
    body = conversation(4)
    hashes = chain_hashes(body)
    await store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    await store.begin_turn(A, "s1", model="m", at=1.0)
    await store.archive(A, "s1", body)
    assert await store.acquire(A, "compaction", ttl_s=60) is not None

    assert await store.find_checkpoint(B, "s", hashes) is None
    assert await store.load_session(B, "s1") is None
    assert await store.list_sessions(B) == []
    assert await store.archived(B, "s1") == []
    assert await store.delete_session(B, "s1") is False
    assert await store.acquire(B, "compaction", ttl_s=60) is not None
    assert (await store.begin_turn(B, "s1", model="m", at=2.0)).turns == 1
    assert [row[:2] for row in await store.list_sessions(None)] == [(B, "s1"), (A, "s1")]


# -- sessions --------------------------------------------------------------------------------


async def test_begin_turn_concurrent_turns_are_one_to_twenty(backend: Backend) -> None:
    states = await asyncio.gather(
        *(backend.store.begin_turn(A, "s", model="m", at=float(i)) for i in range(20))
    )
    assert sorted(state.turns for state in states) == list(range(1, 21))
    loaded = await backend.store.load_session(A, "s")
    assert loaded is not None
    assert loaded.turns == 20


async def test_begin_turn_sets_model_and_last_seen(backend: Backend) -> None:
    store = backend.store
    first = await store.begin_turn(A, "s", model="gpt-4o", at=10.5)
    assert (first.turns, first.model, first.last_seen, first.history) == (1, "gpt-4o", 10.5, ())
    second = await store.begin_turn(A, "s", model=None, at=11.25)
    assert (second.turns, second.model, second.last_seen) == (2, "gpt-4o", 11.25)
    assert await store.load_session(A, "s") == second


async def test_open_turn_is_begin_turn_and_find_checkpoint_at_once(backend: Backend) -> None:
    store = backend.store
    body = conversation(6)
    hashes = chain_hashes(body)
    empty = await store.open_turn(A, "s", model="gpt-4o", at=10.5, hashes=hashes)
    assert empty == OpenedTurn(await store.load_session(A, "s") or SessionState(), None)
    assert (empty.state.turns, empty.state.model, empty.state.last_seen) == (1, "gpt-4o", 10.5)
    short = await store.put_checkpoint(A, "s", checkpoint(hashes, 2, "short"))
    long = await store.put_checkpoint(A, "s", checkpoint(hashes, 4, "long"))
    found = await store.open_turn(A, "s", model=None, at=11.0, hashes=hashes)
    assert (found.state.turns, found.state.model, found.checkpoint) == (2, "gpt-4o", long)
    assert (
        await store.open_turn(A, "s", model="m", at=12.0, hashes=hashes[:3])
    ).checkpoint == short
    # No body, no checkpoint; another session of the tenant finds none of this one's.
    assert (await store.open_turn(A, "s", model="m", at=13.0, hashes=[])).checkpoint is None
    other = await store.open_turn(A, "t", model="m", at=14.0, hashes=hashes)
    assert (other.state.turns, other.checkpoint) == (1, None)
    assert [row[:2] for row in await store.list_sessions(A)] == [(A, "t"), (A, "s")]


async def test_open_turn_passes_over_a_checkpoint_under_a_prefix_not_its_own(
    backend: Backend,
) -> None:
    hashes = chain_hashes(conversation(6))
    short = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    await backend.store.put_checkpoint(
        A, "s", replace(checkpoint(hashes, 3), prefix_hash=hashes[4])
    )
    opened = await backend.store.open_turn(A, "s", model="m", at=1.0, hashes=hashes)
    assert opened.checkpoint == short


async def test_open_turn_finds_a_checkpoint_only_as_a_whole_prefix_hash(backend: Backend) -> None:
    # The Redis script looks for each checkpoint's hash in the joined argument: one that
    # also appears inside another hash there counts only where it stands whole.
    hashes = chain_hashes(conversation(3))
    found = await backend.store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    inside = [f"aa{hashes[1]}", hashes[1], hashes[2]]
    opened = await backend.store.open_turn(A, "s", model="m", at=1.0, hashes=inside)
    assert opened.checkpoint == found
    for only_inside in ([hashes[0], f"{hashes[1]}aa"], [hashes[0], f"a{hashes[1]}a"]):
        opened = await backend.store.open_turn(A, "s", model="m", at=2.0, hashes=only_inside)
        assert opened.checkpoint is None


async def test_end_turn_is_record_turn_archive_and_usage_at_once(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=1.0)
    usage = {"prompt_tokens": 1200, "prompt_tokens_details": {"cached_tokens": 1024}}
    tools = {"model": "m", "tools": [{"type": "function", "function": {"name": "grep"}}]}
    first = conversation(3)
    await store.end_turn(A, "s", EndedTurn(point(1, 900, 900), {"tokens": 900}, tools, first))
    state = await store.load_session(A, "s")
    assert state is not None
    assert (state.tokens_sent, state.last_usage, state.last_context) == (900, None, {"tokens": 900})
    grown = [*first, *conversation(2, topic="more")]
    hashes = [content_hash(message) for message in grown]
    ended = EndedTurn(point(2, 1500, 600), {"tokens": 600}, None, grown, hashes, usage)
    await store.end_turn(A, "s", ended)
    state = await store.load_session(A, "s")
    assert state is not None
    assert (state.tokens_sent, state.tokens_forwarded) == (2400, 1500)
    assert (state.last_usage, state.last_pressure, state.last_context) == (
        usage,
        0.2,
        {"tokens": 600},
    )
    assert await store.timeline(A, "s") == [point(1, 900, 900), point(2, 1500, 600)]
    assert await store.last_request(A, "s") == tools
    assert await store.archived(A, "s") == grown
    # Nothing to archive: the archive stays as it was.
    await store.end_turn(A, "s", EndedTurn(point(3), {}))
    assert await store.archived(A, "s") == grown
    assert len(await store.timeline(A, "s")) == 3


async def test_load_session_unknown_is_none(backend: Backend) -> None:
    assert await backend.store.load_session(A, "nobody") is None


async def test_record_compaction_keeps_the_last_hundred(backend: Backend) -> None:
    store = backend.store
    for _ in range(3):
        await store.begin_turn(A, "s", model="m", at=1.0)
    for index in range(HISTORY_LIMIT + 5):
        await store.record_compaction(A, "s", record(index))
    state = await store.begin_turn(A, "s", model="m", at=2.0)
    assert len(state.history) == HISTORY_LIMIT
    assert [r.tokens_before for r in state.history] == list(range(5, HISTORY_LIMIT + 5))
    assert state.history[-1] == record(HISTORY_LIMIT + 4)
    assert state.last_compaction_turn == 3
    assert state.turns_since_compaction == 1


async def test_record_usage_round_trips(backend: Backend) -> None:
    usage = {"prompt_tokens": 1200, "prompt_tokens_details": {"cached_tokens": 1024}}
    await backend.store.begin_turn(A, "s", model="m", at=1.0)
    await backend.store.record_usage(A, "s", usage=usage, pressure=0.625)
    state = await backend.store.load_session(A, "s")
    assert state is not None
    assert (state.last_usage, state.last_pressure) == (usage, 0.625)


async def test_record_turn_builds_the_timeline_and_the_sums(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=1.0)
    tools = {"model": "m", "tools": [{"type": "function", "function": {"name": "grep"}}]}
    await store.record_turn(A, "s", point(1, 900, 900), context={"tokens": 900}, request=tools)
    await store.record_compaction(A, "s", record(2))
    await store.record_turn(A, "s", point(2, 1500, 600), context={"tokens": 600})
    state = await store.load_session(A, "s")
    assert state is not None
    assert (state.tokens_sent, state.tokens_forwarded, state.tokens_saved) == (2400, 1500, 900)
    assert (state.compactions, state.last_pressure, state.last_context) == (1, 0.2, {"tokens": 600})
    assert await store.timeline(A, "s") == [point(1, 900, 900), point(2, 1500, 600)]
    assert await store.last_request(A, "s") == tools  # kept when a turn gives none
    assert await store.timeline(B, "s") == []
    assert await store.last_request(B, "s") is None


async def test_timeline_keeps_the_latest_points(backend: Backend) -> None:
    for turn in range(TIMELINE_LIMIT + 5):
        await backend.store.record_turn(A, "s", point(turn), context={})
    timeline = await backend.store.timeline(A, "s")
    assert [p.turn for p in timeline] == list(range(5, TIMELINE_LIMIT + 5))


async def test_list_sessions_most_recent_first_and_paged(backend: Backend) -> None:
    store = backend.store
    for index, name in enumerate(["s0", "s1", "s2", "s3", "s4"]):
        await store.begin_turn(A, name, model="m", at=100.0 + index)
    await store.begin_turn(B, "other", model="m", at=102.5)
    await store.begin_turn(A, "s1", model="m", at=200.0)  # seen again: now the most recent

    listed = await store.list_sessions(A, limit=10)
    assert [session for _, session, _ in listed] == ["s1", "s4", "s3", "s2", "s0"]
    assert {tenant for tenant, _, _ in listed} == {A}
    assert listed[0][2].turns == 2
    page = await store.list_sessions(A, limit=2, offset=2)
    assert [session for _, session, _ in page] == ["s3", "s2"]
    assert await store.list_sessions(A, limit=2, offset=10) == []
    everyone = await store.list_sessions(None, limit=4)
    assert [row[:2] for row in everyone] == [(A, "s1"), (A, "s4"), (A, "s3"), (B, "other")]


async def test_delete_session_forgets_state_history_and_archive(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=1.0)
    await store.record_compaction(A, "s", record(1))
    await store.record_turn(A, "s", point(1), context={}, request={"model": "m"})
    await store.archive(A, "s", conversation(3))
    await store.begin_turn(A, "kept", model="m", at=2.0)
    assert await store.delete_session(A, "s") is True
    assert await store.load_session(A, "s") is None
    assert await store.archived(A, "s") == []
    assert await store.timeline(A, "s") == []
    assert await store.last_request(A, "s") is None
    assert [session for _, session, _ in await store.list_sessions(A)] == ["kept"]
    assert [row[1] for row in await store.list_sessions(None)] == ["kept"]
    assert await store.delete_session(A, "s") is False
    fresh = await store.begin_turn(A, "s", model="m", at=3.0)
    assert (fresh.turns, fresh.history) == (1, ())


# -- archive ---------------------------------------------------------------------------------


async def test_archive_stores_each_message_once(backend: Backend) -> None:
    body = conversation(4)
    await backend.store.archive(A, "one", body)
    await backend.store.archive(A, "two", body)
    await backend.store.archive(A, "one", body)
    assert await backend.messages_stored(A) == 4
    assert await backend.store.archived(A, "one") == body
    assert await backend.store.archived(A, "two") == body


async def test_archive_growing_history_appends(backend: Backend) -> None:
    body = conversation(6)
    for length in (2, 4, 6):
        await backend.store.archive(A, "s", body[:length])
    assert await backend.store.archived(A, "s") == body
    assert await backend.messages_stored(A) == 6


async def test_archive_rewind_or_edit_records_the_new_sequence(backend: Backend) -> None:
    store = backend.store
    body = conversation(5)
    await store.archive(A, "s", body)
    edited = [*body[:2], user("edited question"), *body[3:]]
    await store.archive(A, "s", edited)
    assert await store.archived(A, "s") == edited
    await store.archive(A, "s", body[:2])  # rewound
    assert await store.archived(A, "s") == body[:2]
    replaced = conversation(3, topic="another")
    await store.archive(A, "s", replaced)
    assert await store.archived(A, "s") == replaced
    await store.archive(A, "s", [])  # records nothing
    assert await store.archived(A, "s") == replaced


async def test_archive_takes_the_callers_content_hashes(backend: Backend) -> None:
    body = conversation(4)
    hashes = [content_hash(message) for message in body]
    await backend.store.archive(A, "s", body[:2], hashes=hashes[:2])
    await backend.store.archive(A, "s", body, hashes=hashes)
    assert await backend.store.archived(A, "s") == body
    await backend.store.archive(A, "t", body)  # hashed by the store: the same addresses
    assert await backend.messages_stored(A) == 4
    with pytest.raises(ValueError, match="3 hashes for 4 messages"):
        await backend.store.archive(A, "s", body, hashes=hashes[:3])


async def test_archive_keeps_messages_as_sent(backend: Backend) -> None:
    odd: Message = {"content": "hé ☃", "role": "user", "x_vendor": {"keep": [1, None]}}
    await backend.store.archive(A, "s", [odd, odd])
    restored = await backend.store.archived(A, "s")
    assert restored == [odd, odd]
    assert list(restored[0]) == ["content", "role", "x_vendor"]  # key order kept
    assert content_hash(restored[0]) == content_hash(odd)


# -- locks -----------------------------------------------------------------------------------


async def test_lock_is_exclusive_and_released_by_its_token_only(backend: Backend) -> None:
    store = backend.store
    token = await store.acquire(A, "prefix", ttl_s=60)
    assert token is not None
    assert await store.acquire(A, "prefix", ttl_s=60) is None
    assert await store.release(A, "prefix", "not-the-token") is False
    assert await store.acquire(A, "prefix", ttl_s=60) is None
    assert await store.release(A, "prefix", token) is True
    assert await store.release(A, "prefix", token) is False
    assert await store.acquire(A, "prefix", ttl_s=60) not in (None, token)


async def test_lock_expiry_frees_it(backend: Backend) -> None:
    store = backend.store
    stale = await store.acquire(A, "prefix", ttl_s=0.2)
    assert stale is not None
    await backend.wait(0.3)
    fresh = await store.acquire(A, "prefix", ttl_s=60)
    assert fresh is not None
    assert await store.release(A, "prefix", stale) is False  # a late holder frees nothing
    assert await store.acquire(A, "prefix", ttl_s=60) is None


async def test_concurrent_acquire_has_one_winner(backend: Backend) -> None:
    tokens = await asyncio.gather(
        *(backend.store.acquire(A, "prefix", ttl_s=60) for _ in range(10))
    )
    assert sum(token is not None for token in tokens) == 1


# -- prepared summaries ----------------------------------------------------------------------


async def test_prepared_summaries_are_found_by_key_within_their_session(backend: Backend) -> None:
    store = backend.store
    assert await store.find_summaries(A, "s", []) == {}
    assert await store.find_summaries(A, "s", ["s:1", "s:2"]) == {}
    await store.put_summary(A, "s", "s:2", "- two, with ünïcode")
    await store.put_summary(A, "s", "n:x", "[note]")
    assert await store.find_summaries(A, "s", ["s:1", "s:2", "n:x"]) == {
        "s:2": "- two, with ünïcode",
        "n:x": "[note]",
    }
    assert await store.find_summaries(B, "s", ["s:2", "n:x"]) == {}
    assert await store.find_summaries(A, "other", ["s:2", "n:x"]) == {}  # the session's own
    if backend.raw is None:  # Redis's TTL is checked with the other keys' below
        await backend.wait(TTL_S + 1)
        assert await store.find_summaries(A, "s", ["s:2"]) == {}


async def test_find_prepared_is_find_checkpoint_and_find_summaries_at_once(
    backend: Backend,
) -> None:
    store = backend.store
    hashes = chain_hashes(conversation(6))
    assert await store.find_prepared(A, "s", hashes, ["s:1"]) == (None, {})
    assert await store.find_prepared(A, "s", [], []) == (None, {})
    kept = await store.put_checkpoint(A, "s", checkpoint(hashes, 4))
    await store.put_summary(A, "s", "s:2", "- two")
    found = await store.find_prepared(A, "s", hashes, ["s:1", "s:2"])
    assert found == (kept, {"s:2": "- two"})
    assert await store.find_prepared(A, "s", hashes[:3], []) == (None, {})
    assert await store.find_prepared(A, "other", hashes, ["s:2"]) == (None, {})
    # A checkpoint under a prefix not its own is passed over there too.
    await store.put_checkpoint(A, "s", replace(checkpoint(hashes, 3), prefix_hash=hashes[5]))
    assert await store.find_prepared(A, "s", hashes, []) == (kept, {})


# -- model facts -----------------------------------------------------------------------------


async def test_model_facts_round_trip_for_their_tenant_only(backend: Backend) -> None:
    store = backend.store
    assert await store.calibration(A, "gpt-4o") is None
    assert await store.learned_window(A, "gpt-4o") is None
    await store.set_calibration(A, "gpt-4o", 1.0625, ttl_s=TTL_S)
    await store.learn_window(A, "gpt-4o", 128000, ttl_s=TTL_S)
    await store.learn_window(A, "gpt-4o", 64000, ttl_s=TTL_S)  # the latest lesson wins
    assert await store.calibration(A, "gpt-4o") == 1.0625
    assert await store.learned_window(A, "gpt-4o") == 64000
    assert await store.calibration(A, "other") is None
    # What tenant A's requests taught is A's: B reads nothing, and B's lesson is B's.
    assert await store.calibration(B, "gpt-4o") is None
    assert await store.learned_window(B, "gpt-4o") is None
    await store.learn_window(B, "gpt-4o", 8000, ttl_s=TTL_S)
    assert await store.learned_window(A, "gpt-4o") == 64000
    assert await store.learned_window(B, "gpt-4o") == 8000


async def test_model_facts_expire_on_their_own_ttl(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=time.time())  # a session: TTL_S
    await store.learn_window(A, "m", 4000, ttl_s=0.3)
    await store.set_calibration(A, "m", 1.2, ttl_s=0.3)
    assert await store.learned_window(A, "m") == 4000
    await backend.wait(0.5)
    assert await store.learned_window(A, "m") is None
    assert await store.calibration(A, "m") is None
    assert await store.load_session(A, "s") is not None  # the session's own TTL goes on


# -- expiry: Redis TTLs ----------------------------------------------------------------------


async def _pttls(raw: aioredis.Redis) -> dict[str, int]:
    keys = [key async for key in raw.scan_iter(match="cp:*")]
    return {key: await raw.pttl(key) for key in keys}


async def _shorten(raw: aioredis.Redis, keys: dict[str, int]) -> None:
    for key in keys:
        await raw.pexpire(key, 5000)


@pytest.mark.parametrize("kind", ["redis", "cluster"], indirect=True)
async def test_redis_keys_carry_the_ttl_and_writes_refresh_it(backend: Backend) -> None:
    store, raw = backend.store, backend.raw
    assert raw is not None
    body = conversation(3)
    hashes = chain_hashes(body)
    await store.put_checkpoint(A, "s", checkpoint(hashes, 2))
    await store.begin_turn(A, "s", model="m", at=time.time())
    await store.record_compaction(A, "s", record(1))
    await store.archive(A, "s", body)
    await store.learn_window(A, "m", 1000, ttl_s=TTL_S)
    await store.put_summary(A, "s", "s:k", "- a summary")
    ttls = await _pttls(raw)
    untimed = {key for key, ttl in ttls.items() if ttl == -1}
    assert untimed == {"cp:sessions"}  # the global index is pruned, not expired
    # The archive's bodies have their expiry moved at most once per tenth of the TTL.
    marker = "cp:{s:tenant-a:s}:refreshed"
    assert TTL_S * 100 - 5000 < ttls.pop(marker) <= TTL_S * 100
    assert all(
        TTL_S * 1000 - 5000 < ttl <= TTL_S * 1000 for key, ttl in ttls.items() if key not in untimed
    )
    # checkpoints and their order, index, session keys, messages, global, model, summary
    assert len(ttls) == 2 + 1 + 3 + 3 + 1 + 1 + 1

    await _shorten(raw, ttls)
    await store.record_usage(A, "s", usage={}, pressure=0.5)
    assert await _refreshed(raw) - {marker} == {
        "cp:{s:tenant-a:s}:state",
        "cp:{s:tenant-a:s}:history",
        "cp:{s:tenant-a:s}:archive",
    }
    await _shorten(raw, ttls)
    await store.find_checkpoint(A, "s", hashes)
    await store.archive(A, "s", body)
    refreshed = await _refreshed(raw)
    assert f"cp:{{s:{A}:s}}:checkpoints" in refreshed
    bodies = {f"cp:{{m:{A}:{content_hash(m)}}}" for m in body}
    assert not bodies & refreshed  # not yet: the marker lives
    await raw.delete(marker)  # as a tenth of the TTL passing
    await store.archive(A, "s", body)
    assert bodies <= await _refreshed(raw)


async def _refreshed(raw: aioredis.Redis) -> set[str]:
    return {key for key, ttl in (await _pttls(raw)).items() if ttl > 5000}


async def test_a_busy_session_is_listed_again_only_every_few_seconds(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=100.0)
    await store.begin_turn(A, "t", model="m", at=101.0)
    # Seen again 5 s later: its state says so; its place in the list may wait (Redis: a
    # replica lists a busy session again every few seconds, not at every request).
    assert (await store.begin_turn(A, "s", model="m", at=105.0)).last_seen == 105.0
    assert {session for _, session, _ in await store.list_sessions(A)} == {"s", "t"}
    await store.begin_turn(A, "s", model="m", at=111.0)
    assert [session for _, session, _ in await store.list_sessions(A)] == ["s", "t"]
    # Deleted, it is listed again at its very next turn.
    assert await store.delete_session(A, "s") is True
    await store.begin_turn(A, "s", model="m", at=112.0)
    assert [session for _, session, _ in await store.list_sessions(A)] == ["s", "t"]
