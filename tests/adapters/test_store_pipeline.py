"""The single Redis's pipeline (`nodes._Pipeline`), sent and read by the store itself, on a
real redis-server: the same bytes as redis-py's, the same replies, a connection Redis closed
healed by the one retry, and a cancelled batch leaving nothing unread for the next."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.exceptions import DataError, NoScriptError, ResponseError

from proxy.adapters.store.nodes import Nodes, _packed
from proxy.adapters.store.redis_store import _client_options
from tests.redis_server import RedisServer


@pytest_asyncio.fixture(name="client")
async def client_fixture(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    # The store's own options (its retry among them), one connection: a batch that left a
    # reply unread would hand it to the next.
    pool = aioredis.BlockingConnectionPool.from_url(
        redis_server.url, max_connections=1, **_client_options(2.0)
    )
    client = aioredis.Redis(connection_pool=pool)
    try:
        yield client
    finally:
        await client.aclose()
        await pool.aclose()


def test_packed_as_redis_py_packs() -> None:
    commands = [
        ("SET", "cp:{m:t:é}", '{"content": "hé ☃"}', "NX", "PX", 2592000000),
        ("EVALSHA", "ab" * 20, 2, "k1", "k2", -1, 0.25, 1e-07, b"\x00raw\xff", ""),
        ("PING",),
    ]
    assert _packed(commands) == b"".join(Connection().pack_commands(commands))
    for wrong in (True, None, [1]):
        with pytest.raises(DataError):
            _packed([("SET", "k", wrong)])


async def test_replies_and_errors_as_redis_py_gives_them(client: aioredis.Redis) -> None:
    pipe = Nodes(client).pipeline()
    pipe.set("k", "v", nx=True, px=60_000)
    pipe.set("k", "w", nx=True, px=60_000)
    pipe.get("k")
    pipe.pexpire("k", 60_000)
    pipe.execute_command("EVALSHA", "0" * 40, 0)
    pipe.hset("k", "f", "v")  # the wrong type for the key
    replies = await pipe.execute(raise_on_error=False)
    assert replies[:4] == [True, None, "v", True]
    assert isinstance(replies[4], NoScriptError)
    assert isinstance(replies[5], ResponseError)
    pipe.get("k")
    pipe.hset("k", "f", "v")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await pipe.execute()
    assert await Nodes(client).pipeline().execute() == []


async def test_a_connection_redis_closed_is_healed_by_the_retry(
    client: aioredis.Redis, redis_server: RedisServer
) -> None:
    pipe = Nodes(client).pipeline()
    pipe.set("k", "1")
    assert await pipe.execute() == [True]
    killer = aioredis.Redis.from_url(redis_server.url)
    try:
        assert await killer.client_kill_filter(_type="normal", skipme=True) >= 1
    finally:
        await killer.aclose()
    pipe.incr("k")
    pipe.get("k")
    assert await pipe.execute() == [2, "2"]


async def test_a_cancelled_batch_leaves_no_reply_for_the_next(client: aioredis.Redis) -> None:
    pipe = Nodes(client).pipeline()
    pipe.blpop(["empty"], 0.3)  # Redis answers 0.3 s later, after the batch is cancelled
    waiting = asyncio.create_task(pipe.execute())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await client.rpush("empty", "late")  # what BLPOP would have taken
    pipe.lrange("empty", 0, -1)
    assert await pipe.execute() == [["late"]]
    await asyncio.sleep(0.4)
    pipe.lrange("empty", 0, -1)
    assert await pipe.execute() == [["late"]]
