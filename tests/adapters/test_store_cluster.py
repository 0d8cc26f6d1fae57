"""`RedisStore` on a real Redis Cluster: three masters, a replica each (tests/redis_cluster.py).

Conversations, not tenants, are the unit of sharding: one tenant's conversations spread over
the masters, each conversation's keys on one. A node that fails is blamed for what failed,
fenced off by the caller, and found back once it answers or its replica has taken its slots.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.adapters.store import (
    EndedTurn,
    RedisStore,
    SessionNotIndexedError,
    StoreUnavailableError,
    open_store,
)
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, CompactionRecord, TurnPoint, chain_hashes, content_hash
from proxy.settings import RedisSettings
from tests import optional
from tests.builders import assistant, user
from tests.redis_cluster import LocalCluster, Node, local_cluster

# Every test here runs on the module's cluster, or one of its own.
optional.require("redis-server")

TENANT = "tenant-a"
MODEL = "m"
CONVERSATIONS = 12
# No master may hold more than this share of one tenant's keys (before: all but a few).
MOST = 0.6

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


async def store_on(cluster: LocalCluster) -> RedisStore:
    store = open_store(RedisSettings(url=cluster.url, mode="cluster", timeout_s=1))
    assert isinstance(store, RedisStore)
    return store


@pytest_asyncio.fixture(loop_scope="module")
async def store(cluster: LocalCluster) -> AsyncIterator[RedisStore]:
    opened = await store_on(cluster)
    try:
        yield opened
    finally:
        await opened.aclose()


def conversation(name: str, length: int = 10) -> list[Message]:
    return [
        user(f"{name}: step {i}") if i % 2 == 0 else assistant(f"{name}: done {i}")
        for i in range(length)
    ]


async def a_turn(store: RedisStore, session: str) -> None:
    """What one compacting turn of `session` stores, call by call, as the service makes them."""
    body = conversation(session)
    hashes = chain_hashes(body)
    opened = await store.open_turn(TENANT, session, model=MODEL, at=time.time(), hashes=hashes)
    assert opened.checkpoint is None
    token = await store.acquire(TENANT, f"summary:{session}", ttl_s=60)
    assert token is not None
    await store.put_summary(TENANT, session, f"s:{session}", "- a summary")
    found = await store.find_prepared(TENANT, session, hashes, [f"s:{session}"])
    assert found == (None, {f"s:{session}": "- a summary"})
    checkpoint = Checkpoint(hashes[5], 6, [user("summary")], 1.0, "summarize", 900, 90)
    record = CompactionRecord(2.0, "pressure", "summarize", 900, 90)
    await store.put_checkpoint(TENANT, session, checkpoint, record)
    await store.put_recalls(
        TENANT, session, {f"rc_{session}": [content_hash(m) for m in body[:2]]}, {}
    )
    point = TurnPoint(1, 1.0, 0.2, 900, 90, "summarize")
    usage = {"prompt_tokens": 90}
    await store.end_turn(TENANT, session, EndedTurn(point, {}, {"model": MODEL}, body, None, usage))
    await store.set_calibration(TENANT, MODEL, 1.1, ttl_s=60)
    assert await store.find_checkpoint(TENANT, session, hashes) == checkpoint


async def test_one_tenants_conversations_spread_over_the_masters(
    cluster: LocalCluster, store: RedisStore
) -> None:
    sessions = [f"conversation-{n}" for n in range(CONVERSATIONS)]
    await asyncio.gather(*(a_turn(store, session) for session in sessions))
    counts = cluster.keys_by_master(f"cp:*{TENANT}*")
    total = sum(counts.values())
    print(f"\n{TENANT}'s {total} keys by master: {counts}")  # the measured spread, with -s
    assert len(counts) == 3
    assert max(counts.values()) <= MOST * total
    # Each conversation's own keys are together, on one master: 6 session keys, the archive's
    # refresh marker, its checkpoints and their order, and a summary.
    for session in sessions:
        where = cluster.keys_by_master(f"cp:{{s:{TENANT}:{session}}}:*")
        assert sorted(where.values()) == [0, 0, 10]


def on(cluster: LocalCluster, node: Node, prefix: str, *, there: bool = True) -> str:
    """A session named `prefix-<n>` whose keys are on `node` (not on it: `there` False)."""
    for n in range(1000):
        name = f"{prefix}-{n}"
        if (cluster.master_of(f"cp:{{s:{TENANT}:{name}}}:state") == node) is there:
            return name
    raise AssertionError("no such session name")


def elsewhere(cluster: LocalCluster, node: Node, prefix: str) -> str:
    """A session named `prefix-<n>` whose keys are not on `node`."""
    return on(cluster, node, prefix, there=False)


async def test_a_fenced_node_fails_its_calls_at_once_and_the_others_go_on(
    cluster: LocalCluster, store: RedisStore
) -> None:
    node = cluster.masters()[0]
    mine, other = on(cluster, node, "fenced"), elsewhere(cluster, node, "healthy")
    for session in (mine, other):
        await store.begin_turn(TENANT, session, model=MODEL, at=time.time())
    store.fence(node.name, down=True)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await store.load_session(TENANT, mine)
    assert caught.value.scope == node.name
    assert time.monotonic() - started < 0.1  # nothing sent
    assert await store.load_session(TENANT, other) is not None
    await store.ping(node.name)  # a probe asks a fenced node anyway
    await store.ping()  # the cluster as a whole serves: asked of a master not fenced
    store.fence(node.name, down=False)
    assert await store.load_session(TENANT, mine) is not None


async def test_a_turn_whose_index_node_is_down_is_counted_but_not_listed(
    cluster: LocalCluster, store: RedisStore
) -> None:
    index = cluster.master_of(f"cp:{{t:{TENANT}}}:sessions")
    session = elsewhere(cluster, index, "unindexed")
    await store.begin_turn(TENANT, session, model=MODEL, at=1.0)
    store.fence(index.name, down=True)
    try:
        with pytest.raises(SessionNotIndexedError) as caught:
            # Past the interval at which a replica lists a busy session again.
            await store.begin_turn(TENANT, session, model=MODEL, at=12.0)
    finally:
        store.fence(index.name, down=False)
    assert caught.value.scope == index.name
    assert caught.value.state.turns == 2  # the turn counted: only the index write was lost
    # So with a turn opened with its checkpoint: the turn and the checkpoint are the
    # session's own node's, read whole; only the index is lost.
    hashes = chain_hashes(conversation(session))
    kept = Checkpoint(hashes[5], 6, [user("summary")], 1.0, "summarize", 900, 90)
    await store.put_checkpoint(TENANT, session, kept)
    store.fence(index.name, down=True)
    try:
        with pytest.raises(SessionNotIndexedError) as opened:
            await store.open_turn(TENANT, session, model=MODEL, at=24.0, hashes=hashes)
    finally:
        store.fence(index.name, down=False)
    assert (opened.value.scope, opened.value.state.turns) == (index.name, 3)
    assert opened.value.checkpoint == kept
    listed = {sid: state for _, sid, state in await store.list_sessions(TENANT, limit=1000)}
    assert listed[session].last_seen == 24.0  # the session is read from its own node


async def test_a_killed_master_is_blamed_until_its_replica_serves_its_slots(
    tmp_path: Path,
) -> None:
    with local_cluster(tmp_path) as cluster:
        store = await store_on(cluster)
        try:
            dead = cluster.masters()[1]
            mine, other = on(cluster, dead, "lost"), elsewhere(cluster, dead, "kept")
            for session in (mine, other):
                await store.begin_turn(TENANT, session, model=MODEL, at=time.time())
            with dead.client() as client:
                client.execute_command("WAIT", 1, 2000)  # the replica has the turn
            cluster.kill(dead)
            with pytest.raises(StoreUnavailableError) as caught:
                await store.load_session(TENANT, mine)
            assert caught.value.scope == dead.name
            assert await store.load_session(TENANT, other) is not None
            with pytest.raises(StoreUnavailableError):
                await store.ping(dead.name)  # still its slots' master, and refusing
            promoted = cluster.wait_for_failover(dead)
            await store.ping(dead.name)  # it serves no slot any more: its keys answer again
            await store.ping()
            state = await store.load_session(TENANT, mine)
            assert state is not None
            assert state.turns == 1
            assert cluster.master_of(f"cp:{{s:{TENANT}:{mine}}}:state") == promoted
        finally:
            await store.aclose()
