"""A busy proxy is not a hung Redis (`watch.py`): the time a call to Redis may wait is counted
in time the event loop was free to hear the reply.

A lap of the loop is simulated by blocking it (`time.sleep` inside a task): what a burst of
requests does, each counting its tokens before its turn to read a reply comes.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from proxy.adapters.store import RedisStore, StoreUnavailableError, open_store
from proxy.adapters.store.watch import LoopClock, Watch
from proxy.settings import RedisSettings
from tests.redis_server import RedisServer

TIMEOUT = 0.2


def never() -> float:
    return float("-inf")


def lap(seconds: float) -> None:
    """The loop busy with other work: nothing else on it runs meanwhile."""
    time.sleep(seconds)


async def silent_call(clock: LoopClock) -> None:
    """A call to a Redis that never answers, under a `Watch`."""
    async with asyncio.timeout(None) as deadline:
        watch = Watch(deadline, TIMEOUT, clock, never)
        try:
            await asyncio.Event().wait()
        finally:
            watch.cancel()


async def test_the_clock_keeps_wall_time_on_an_idle_loop() -> None:
    clock = LoopClock(TIMEOUT)
    clock.begin()
    started, wall = clock.now(), time.monotonic()
    await asyncio.sleep(0.5)
    assert clock.now() - started == pytest.approx(time.monotonic() - wall, abs=0.1)
    clock.end()


async def test_a_lap_of_the_loop_counts_as_two_ticks_at_most() -> None:
    clock = LoopClock(TIMEOUT)
    clock.begin()
    started = clock.now()
    lap(1.0)  # five timeouts of wall time
    await asyncio.sleep(0)
    await asyncio.sleep(0.02)  # the tick that came late has run
    assert clock.now() - started < 3 * TIMEOUT / 20 + 0.05
    clock.end()


async def test_the_clock_never_goes_back_across_event_loops() -> None:
    clock = LoopClock(TIMEOUT)
    before = clock.now()

    def elsewhere() -> float:
        async def read() -> float:
            return clock.now()

        return asyncio.run(read())

    after = await asyncio.to_thread(elsewhere)
    assert after >= before
    assert clock.now() >= after


async def test_silence_on_an_idle_loop_ends_the_call_after_the_timeout() -> None:
    clock = LoopClock(TIMEOUT)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await silent_call(clock)
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 0.15


async def test_silence_while_the_loop_is_busy_does_not_end_the_call() -> None:
    clock = LoopClock(TIMEOUT)
    answer = asyncio.get_running_loop().create_future()

    async def busy_then_answer() -> None:
        lap(3 * TIMEOUT)  # longer than the timeout, nobody heard
        await asyncio.sleep(0.02)
        answer.set_result("stored")

    async with asyncio.timeout(None) as deadline:
        watch = Watch(deadline, TIMEOUT, clock, never)
        try:
            helper = asyncio.create_task(busy_then_answer())
            assert await answer == "stored"
            await helper
        finally:
            watch.cancel()


async def test_a_redis_call_outlives_a_lap_longer_than_its_timeout(
    redis_server: RedisServer,
) -> None:
    # The first call of a burst: nothing has been answered yet (the connection is still
    # being made, a round trip at a time) while every lap of the loop goes to other work:
    # by wall time the call's round trips take several timeouts.
    store = open_store(RedisSettings(url=redis_server.url, timeout_s=TIMEOUT))
    assert isinstance(store, RedisStore)

    async def laps() -> None:
        for _ in range(6):
            await asyncio.sleep(0)
            lap(0.75 * TIMEOUT)

    try:
        other = asyncio.create_task(laps())
        await store.begin_turn("t", "s", model="m", at=1.0)
        await other
        assert await store.load_session("t", "s") is not None
    finally:
        await store.aclose()


async def test_a_hung_redis_still_ends_the_call_after_the_timeout() -> None:
    # A server that accepts connections and never answers, on an idle loop.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        store = open_store(RedisSettings(url=url, timeout_s=TIMEOUT))
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            await store.begin_turn("t", "s", model="m", at=1.0)
        assert time.monotonic() - started < TIMEOUT * 3
        await store.aclose()
