"""`Memory`'s breaker by scope: one part of the store down (a Redis Cluster node), the rest
serving; each outage logged once when it starts and once when it ends, its part fenced off
meanwhile and probed until it answers.

The store is the embedded one with parts that fail as a cluster's nodes do (`Sharded`), so
the breaker's rules are checked without a socket; tests/service/test_cluster_faults.py runs
them on a real cluster.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import pytest

from proxy.adapters.store import (
    WHOLE,
    MemoryStore,
    OpenedTurn,
    SessionNotIndexedError,
    StoreUnavailableError,
)
from proxy.core.session import Checkpoint, SessionState, chain_hashes
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory

TENANT = "tenant-a"
N1, N2 = "10.0.0.1:6379", "10.0.0.2:6379"


class Sharded(MemoryStore):
    """The embedded store whose sessions live on nodes: session `<node>/<name>` is on
    `<node>`. A node in `refusing` fails its calls (and its pings); a node the caller fenced
    refuses them at once, as `RedisStore` does."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing: set[str] = set()
        self.fenced: set[str] = set()
        self.pings: list[str] = []
        self.unindexed: str | None = None
        """A node holding the session index that is down: `begin_turn` counts the turn
        but raises `SessionNotIndexedError`."""

    def fence(self, scope: str, *, down: bool) -> None:
        if down:
            self.fenced.add(scope)
        else:
            self.fenced.discard(scope)

    async def ping(self, scope: str = WHOLE) -> None:
        self.pings.append(scope)
        if scope in self.refusing:
            raise StoreUnavailableError("connection refused", scope=scope)

    def _route(self, session_id: str) -> None:
        node = session_id.partition("/")[0]
        if node in self.fenced:
            raise StoreUnavailableError(f"node {node} is down", scope=node, fenced=True)
        if node in self.refusing:
            raise StoreUnavailableError("connection refused", scope=node)

    async def begin_turn(
        self, tenant: str, session_id: str, *, model: str | None, at: float
    ) -> SessionState:
        self._route(session_id)
        state = await super().begin_turn(tenant, session_id, model=model, at=at)
        if self.unindexed is not None:
            raise SessionNotIndexedError("index down", scope=self.unindexed, state=state)
        return state

    async def open_turn(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None,
        at: float,
        hashes: Sequence[str],
    ) -> OpenedTurn:
        self._route(session_id)
        state = await super().begin_turn(tenant, session_id, model=model, at=at)
        found = await self.find_checkpoint(tenant, session_id, hashes)
        if self.unindexed is not None:
            raise SessionNotIndexedError(
                "index down", scope=self.unindexed, state=state, checkpoint=found
            )
        return OpenedTurn(state, found)

    async def load_session(self, tenant: str, session_id: str) -> SessionState | None:
        self._route(session_id)
        return await super().load_session(tenant, session_id)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


def counted(metrics: Metrics) -> tuple[float, float, float]:
    """Store errors, writes lost, and the breaker gauge, as /metrics has them."""
    names = ("store_errors_total", "store_writes_lost_total", "store_breaker_open")
    get = metrics.registry.get_sample_value
    errors, lost, breaker = (get(f"compaction_proxy_{name}") or 0.0 for name in names)
    return errors, lost, breaker


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


async def test_a_node_down_is_fenced_and_logged_once_while_the_others_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=60)
    await memory.begin_turn(TENANT, f"{N2}/kept", "m", at=1.0)
    store.refusing.add(N1)
    assert await memory.begin_turn(TENANT, f"{N1}/lost", "m", at=2.0) == SessionState()
    assert (memory.down, set(memory.outages), store.fenced) == (True, {N1}, {N1})
    # The node's calls are refused at once by its fence: counted, not logged again.
    assert await memory.session(TENANT, f"{N1}/lost") is None
    # Calls to the other node are made, not skipped: only a whole-store outage skips them.
    state = await memory.session(TENANT, f"{N2}/kept")
    assert state is not None
    assert state.turns == 1
    assert counted(metrics) == (2, 1, 1)
    assert logged(caplog, f"session store unavailable (node {N1}), serving without it") == 1
    assert logged(caplog, "session store is back") == 0
    await memory.aclose()


async def test_the_probe_pings_the_failed_node_until_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="proxy.store")
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=0.01)
    store.refusing.add(N1)
    await memory.session(TENANT, f"{N1}/s")
    await until(lambda: len(store.pings) >= 3, "the probe does not ping again")
    assert set(store.pings) == {N1}  # the failed node, not whichever answers
    store.refusing.clear()  # back, or its replica promoted: its slots answer again
    await until(lambda: not memory.down, "the breaker did not close")
    assert store.fenced == set()
    assert counted(metrics) == (1, 0, 0)
    assert logged(caplog, f"session store still unavailable (node {N1})") >= 2
    assert logged(caplog, f"session store is back (node {N1})") == 1
    assert await memory.session(TENANT, f"{N1}/s") is None  # asked of the store again
    assert counted(metrics) == (1, 0, 0)
    await memory.aclose()


async def test_a_refusal_by_the_fence_seen_after_the_outage_ended_does_not_reopen_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A call refused by the fence may come back after the probe found the node back (its
    # refusal was on its way, in a task of its own): the outage is over, not beginning again.
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=60)
    store.fence(N1, down=True)  # as it stood when the late call was refused
    assert await memory.session(TENANT, f"{N1}/s") is None
    assert not memory.down
    assert logged(caplog, "session store unavailable") == 0
    assert counted(metrics) == (1, 0, 0)  # served around all the same
    await memory.aclose()


async def test_a_turn_whose_index_node_is_down_keeps_its_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=60)
    await memory.begin_turn(TENANT, f"{N1}/s", "m", at=1.0)
    store.unindexed = N2
    state = await memory.begin_turn(TENANT, f"{N1}/s", "m", at=2.0)
    assert (state.turns, state.last_seen) == (2, 2.0)  # counted: only the index lost
    assert memory.outages == {N2}
    assert counted(metrics) == (1, 1, 1)
    assert logged(caplog, f"session store unavailable (node {N2})") == 1
    await memory.aclose()


async def test_a_turn_opened_while_its_index_node_is_down_keeps_its_checkpoint() -> None:
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=60)
    session = f"{N1}/s"
    hashes = chain_hashes([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    kept = Checkpoint(
        hashes[1], 2, [{"role": "user", "content": "summary"}], 1.0, "summarize", 9, 3
    )
    await memory.put_checkpoint(TENANT, session, kept)
    store.unindexed = N2
    opened = await memory.open_turn(TENANT, session, "m", 2.0, hashes)
    assert (opened.state.turns, opened.checkpoint) == (1, kept)
    assert memory.outages == {N2}
    store.unindexed = None
    store.refusing.add(N1)  # the session's own node: nothing known, as when Redis is down
    assert await memory.open_turn(TENANT, session, "m", 3.0, hashes) == OpenedTurn(
        SessionState(), None
    )
    await memory.aclose()


async def test_two_nodes_down_keep_the_breaker_open_until_both_are_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, metrics = Sharded(), Metrics()
    memory = Memory(store, metrics=metrics, probe_interval_s=0.01)
    store.refusing |= {N1, N2}
    await memory.session(TENANT, f"{N1}/s")
    await memory.session(TENANT, f"{N2}/s")
    assert memory.outages == {N1, N2}
    store.refusing.discard(N1)
    await until(lambda: memory.outages == {N2}, f"{N1} is not back")
    assert counted(metrics)[2] == 1  # still open: one node is out
    store.refusing.clear()
    await until(lambda: not memory.down, f"{N2} is not back")
    assert counted(metrics)[2] == 0
    assert logged(caplog, "session store is back (node") == 2
    await memory.aclose()


async def test_after_closing_an_outage_starts_no_probe(caplog: pytest.LogCaptureFixture) -> None:
    store = Sharded()
    memory = Memory(store, probe_interval_s=0.01)
    await memory.aclose()
    store.refusing.add(N1)
    await memory.session(TENANT, f"{N1}/s")
    await asyncio.sleep(0.05)
    assert store.pings == []
    assert memory.outages == {N1}
    assert logged(caplog, f"session store unavailable (node {N1})") == 1
