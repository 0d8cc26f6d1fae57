"""`Memory`'s recall calls: a write served around a down store says it was not stored, and a
read raises, so the caller tells "no such id" from "the store cannot say".

The fault tests stop a private redis-server under a real `RedisStore`, as in
tests/service/test_memory.py; the one that needs no store call runs on the embedded store
refusing calls too (tests/service/outage.py).
"""

from __future__ import annotations

import pytest

from proxy.adapters.store import Store, StoreUnavailableError
from proxy.core.messages import Message
from proxy.core.session import content_hash
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from tests.builders import assistant, user
from tests.redis_server import RedisServer
from tests.service import test_memory as memory_tests
from tests.service.outage import OUTAGES, Outage, outage_of
from tests.service.test_memory import counted

TENANT = "tenant-a"
REPLACED: list[Message] = [user("plan the migration"), assistant("step one")]
RECALLS = {"rc_k3j4h5g6f7": [content_hash(message) for message in REPLACED]}
BODIES = {content_hash(message): message for message in REPLACED}


# `Memory`'s stores, as tests/service/test_memory.py has them: bound by their fixture names for
# pytest to find them here (an import by those names would be shadowed by the tests' arguments).
store = memory_tests.store
redis_store = memory_tests.redis_store


async def test_recall_ids_put_are_recalled_in_their_session(store: Store) -> None:
    memory = Memory(store)
    assert await memory.put_recalls(TENANT, "s1", RECALLS, BODIES) is True
    assert await memory.recalled(TENANT, "s1", "rc_k3j4h5g6f7") == REPLACED
    assert await memory.recalled(TENANT, "s2", "rc_k3j4h5g6f7") is None
    assert await memory.recalled(TENANT, "s1", "rc_unknown") is None


@pytest.mark.parametrize("kind", OUTAGES)
async def test_without_a_session_nothing_is_recallable_and_no_call_made(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with outage_of(kind, request) as outage:
        await _without_a_session(outage)


async def _without_a_session(outage: Outage) -> None:
    metrics = Metrics()
    memory = Memory(outage.store, metrics=metrics, probe_interval_s=60)
    outage.stop()  # a call made would fail, and be counted
    assert await memory.put_recalls(TENANT, None, RECALLS, BODIES) is False
    assert await memory.recalled(TENANT, None, "rc_k3j4h5g6f7") is None
    assert counted(metrics) == (0, 0, 0)
    assert not memory.down
    await memory.aclose()


async def test_a_down_store_loses_the_write_and_raises_on_the_read(
    redis_server: RedisServer, redis_store: Store
) -> None:
    metrics = Metrics()
    memory = Memory(redis_store, metrics=metrics, probe_interval_s=60)
    assert await memory.put_recalls(TENANT, "s1", RECALLS, BODIES) is True
    redis_server.stop()
    # The store fails the call: raised, and the breaker opens as for any other call.
    with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
        await memory.recalled(TENANT, "s1", "rc_k3j4h5g6f7")
    assert memory.down
    assert counted(metrics) == (1, 0, 1)  # a read: an error, not a lost write
    assert await memory.put_recalls(TENANT, "s1", RECALLS, BODIES) is False
    assert counted(metrics) == (2, 1, 1)
    # The breaker is open: no call made, still raised rather than "no such id".
    with pytest.raises(StoreUnavailableError, match="breaker open"):
        await memory.recalled(TENANT, "s1", "rc_k3j4h5g6f7")
    assert counted(metrics) == (3, 1, 1)
    await memory.aclose()
