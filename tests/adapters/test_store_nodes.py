"""How a call to the Redis store is blamed on the place that failed it (`nodes.py`), without a
server: the legs are coroutines that answer, fail or hang as told. Real servers: the cluster
tests in tests/adapters/test_store_cluster.py."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ClusterDownError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.adapters.store import WHOLE, StoreUnavailableError
from proxy.adapters.store.nodes import Call, Nodes
from proxy.adapters.store.watch import LoopClock

N1, N2 = "10.0.0.1:6379", "10.0.0.2:6379"


@pytest.fixture
def nodes() -> Nodes:
    return Nodes(aioredis.Redis())  # never connects: the legs below make no Redis call


async def answer() -> str:
    return "ok"


async def refuse() -> str:
    raise RedisConnectionError("Connection refused")


CLOCK = LoopClock(2.0)


def call_on(nodes: Nodes) -> Call:
    return Call(nodes, CLOCK, began=asyncio.get_running_loop().time())


async def test_a_single_redis_is_one_place(nodes: Nodes) -> None:
    assert nodes.of("cp:{s:t:a}:state") == nodes.of("cp:{m:t:b}") == WHOLE
    nodes.fence(WHOLE, down=True)  # the caller skips the whole store itself: no fence
    assert await call_on(nodes).at(WHOLE, answer) == "ok"


async def test_a_failed_leg_blames_its_node(nodes: Nodes) -> None:
    call = call_on(nodes)
    assert await call.at(N2, answer) == "ok"
    with pytest.raises(RedisConnectionError):
        await call.at(N1, refuse)
    assert call.scope() == N1


async def test_a_connection_closed_under_a_call_fails_its_node(nodes: Nodes) -> None:
    # redis-py's cluster client closes a refusing node's idle connections in the background;
    # one taken meanwhile fails with AttributeError (its writer gone): a failure of the node.
    async def closed() -> str:
        raise AttributeError("'NoneType' object has no attribute 'writelines'")

    call = call_on(nodes)
    with pytest.raises(RedisConnectionError, match=N1):
        await call.at(N1, closed)
    assert call.scope() == N1


@pytest.mark.parametrize(
    "error",
    [ClusterDownError("CLUSTERDOWN The cluster is down"), RedisClusterException("not covered")],
)
async def test_a_cluster_refusing_every_key_is_down_as_a_whole(
    nodes: Nodes, error: Exception
) -> None:
    async def down() -> str:
        raise error

    call = call_on(nodes)
    with pytest.raises(type(error)):
        await call.at(N1, down)
    assert call.scope() == WHOLE


async def test_two_places_failing_one_call_blame_the_whole_store(nodes: Nodes) -> None:
    call = call_on(nodes)
    for node in (N1, N2):
        with pytest.raises(RedisConnectionError):
            await call.at(node, refuse)
    assert call.scope() == WHOLE


async def test_a_fenced_node_refuses_at_once_unless_probed(nodes: Nodes) -> None:
    nodes.fence(N1, down=True)
    call = call_on(nodes)
    with pytest.raises(StoreUnavailableError) as caught:
        await call.at(N1, answer)
    assert (caught.value.scope, caught.value.fenced, call.scope()) == (N1, True, N1)
    assert await call_on(nodes).at(N1, answer, fenced=True) == "ok"  # a probe asks anyway
    nodes.fence(N1, down=False)
    assert await call_on(nodes).at(N1, answer) == "ok"


async def test_a_node_that_timed_out_since_a_call_began_refuses_it_at_once(nodes: Nodes) -> None:
    loop = asyncio.get_running_loop()
    earlier, later = Call(nodes, CLOCK, began=loop.time() - 1), call_on(nodes)
    nodes.timed_out({N1}, loop.time() - 0.5)
    with pytest.raises(StoreUnavailableError, match="timed out on another call") as caught:
        await earlier.at(N1, answer)
    assert (caught.value.scope, caught.value.fenced) == (N1, False)
    assert await later.at(N1, answer) == "ok"  # began after it: tried


async def test_a_call_waits_on_the_silence_of_the_nodes_it_waits_on(nodes: Nodes) -> None:
    call = call_on(nodes)
    assert call.heard() == pytest.approx(CLOCK.now(), abs=0.05)  # waiting on none
    await call.at(N2, answer)
    gate = asyncio.Event()

    async def hang() -> str:
        await gate.wait()
        return "late"

    waiting = asyncio.ensure_future(call.at(N1, hang))
    await asyncio.sleep(0)
    assert call.heard() == float("-inf")  # N1 never answered: the call began the silence
    gate.set()
    assert await waiting == "late"
    assert nodes.last_answered(N1) >= nodes.last_answered(N2)


async def test_a_timeout_blames_the_node_still_waited_on(nodes: Nodes) -> None:
    call = call_on(nodes)

    async def hang() -> str:
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await asyncio.gather(call.at(N1, hang), call.at(N2, answer))
    assert call.scope() == N1
