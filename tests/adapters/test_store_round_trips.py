"""Each call of a turn to a real redis-server waits once: for Redis's reply, never for the
event loop besides.

Under eight agents the event loop is never idle, and every time a call suspends it waits
behind every other request's work: a lap, 5-20 ms. redis-py suspended a call twice more
than its round trip needed: it wrote each command under `asyncio.wait_for` when a socket
timeout was set (a task per command), and a pipeline gave its connection back in a task of
its own (`asyncio.shield`). These count the times a call's coroutine gives way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

from proxy.adapters.store import EndedTurn, RecallIds, RedisStore
from proxy.core.session import Checkpoint, CompactionRecord, TurnPoint, content_hash
from proxy.settings import RedisSettings
from tests.builders import assistant, user
from tests.redis_server import RedisServer

_T = TypeVar("_T")
A = "tenant-a"


class _Suspensions(Awaitable[_T]):
    """`coroutine`, awaited, counting the times it gives way to the event loop."""

    def __init__(self, coroutine: Coroutine[Any, Any, _T]) -> None:
        self._coroutine = coroutine
        self.count = 0

    def __await__(self) -> Generator[Any, Any, _T]:
        steps = self._coroutine.__await__()
        sent: Any = None
        while True:
            try:
                yielded = steps.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            self.count += 1
            sent = yield yielded


async def _suspensions(coroutine: Coroutine[Any, Any, Any]) -> int:
    counted = _Suspensions(coroutine)
    await counted
    return counted.count


def _store(server: RedisServer, connections: int = 4) -> RedisStore:
    return RedisStore.connect(RedisSettings(url=server.url, max_connections=connections))


def _checkpoint(hashes: list[str]) -> Checkpoint:
    return Checkpoint(
        prefix_hash=hashes[-1],
        covered=len(hashes),
        messages=[user("summary " * 2000)],  # a large value, as a real checkpoint is
        created_at=1.0,
        strategy="summarize",
        tokens_before=9000,
        tokens_after=900,
    )


async def test_every_call_of_a_turn_waits_once(redis_server: RedisServer) -> None:
    store = _store(redis_server)
    messages = [user("fix the build"), assistant("reading the log"), user("and the tests")]
    hashes = [content_hash(message) for message in messages]
    record = CompactionRecord(2.0, "pressure", "summarize", 9000, 900)
    recalls = RecallIds({"rc_abcdefghij": hashes[:2]}, dict(zip(hashes, messages, strict=True)))
    ended = EndedTurn(TurnPoint(3, 3.0, 0.1, 900, 900, "none"), {}, None, messages, hashes)

    def turn() -> list[Coroutine[Any, Any, Any]]:
        return [
            store.open_turn(A, "s", model="m", at=2.0, hashes=hashes),
            store.find_prepared(A, "s", hashes, ["k1", "k2"]),
            # A pipeline: the checkpoint's script, its record, its recall ids and bodies.
            store.put_checkpoint(A, "s", _checkpoint(hashes), record, recalls),
            store.end_turn(A, "s", ended),
        ]

    try:
        for call in turn():  # connects, and teaches Redis the scripts (EVAL, then EVALSHA)
            await call
        waits = [await _suspensions(call) for call in turn()]
    finally:
        await store.aclose()
    assert waits == [1, 1, 1, 1]


async def test_a_pipeline_gives_its_connection_back(redis_server: RedisServer) -> None:
    # One connection: a batch that kept it would leave the next one waiting for good.
    store = _store(redis_server, connections=1)
    messages = [user("task"), assistant("done")]
    hashes = [content_hash(message) for message in messages]
    recalls = RecallIds({"rc_abcdefghij": hashes}, dict(zip(hashes, messages, strict=True)))
    try:
        for turn in range(30):
            await store.put_checkpoint(A, f"s{turn}", _checkpoint(hashes), None, recalls)
        assert await store.recalled(A, "s29", "rc_abcdefghij") == messages
    finally:
        await store.aclose()


async def test_a_stall_of_the_proxy_is_not_blamed_on_redis(redis_server: RedisServer) -> None:
    # Redis answers at once, but the event loop is held up past the timeout (a long
    # collection, a big plan on the loop) before it reads the reply: the call's watch then
    # runs before the reply is read, and must not take the silence for Redis's.
    store = RedisStore.connect(RedisSettings(url=redis_server.url, timeout_s=0.3))
    try:
        await store.begin_turn(A, "s", model="m", at=1.0)  # connects, teaches the script

        async def stall() -> None:
            await asyncio.sleep(0.02)  # once the call below has sent its command
            time.sleep(0.6)  # noqa: ASYNC251 (the point: the loop held up twice the timeout)

        staller = asyncio.create_task(stall())
        state = await store.begin_turn(A, "s", model="m", at=2.0)
        await staller
        assert state.turns == 2
    finally:
        await store.aclose()
