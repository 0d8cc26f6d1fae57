"""A replica's claim on a session's archive, on a real redis-server: what the replica archived
last time is taken as the list's start only when Redis names the list the same way.

A growing history's turn sends all its hashes, but the script reads only the new ones when
the claim holds; a turn of another replica, a rewind or a lost list makes it compare the
whole list again, as it did before claims."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
import redis.asyncio as aioredis

from proxy.adapters.store import EndedTurn, RedisStore
from proxy.core.messages import Message
from proxy.core.session import TurnPoint
from proxy.settings import RedisSettings
from tests.builders import assistant, user
from tests.redis_server import RedisServer

A = "tenant-a"
ARCHIVE = "cp:{s:tenant-a:s}:archive"


def _history(count: int, topic: str = "build") -> list[Message]:
    return [
        user(f"{topic} step {index}") if index % 2 == 0 else assistant(f"{topic} done {index}")
        for index in range(count)
    ]


def _ended(messages: list[Message], turn: int = 1) -> EndedTurn:
    return EndedTurn(TurnPoint(turn, float(turn), 0.1, 900, 900, "none"), {}, None, messages)


@pytest_asyncio.fixture(name="replicas")
async def replicas_fixture(
    redis_server: RedisServer,
) -> AsyncIterator[tuple[RedisStore, RedisStore, aioredis.Redis]]:
    settings = RedisSettings(url=redis_server.url)
    first, second = RedisStore.connect(settings), RedisStore.connect(settings)
    raw = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    await raw.flushall()
    try:
        yield first, second, raw
    finally:
        await first.aclose()
        await second.aclose()
        await raw.aclose()


async def test_a_claim_redis_agrees_with_reads_only_the_new_hashes(
    replicas: tuple[RedisStore, RedisStore, aioredis.Redis],
) -> None:
    store, _, raw = replicas
    history = _history(8)
    await store.end_turn(A, "s", _ended(history[:4]))
    # Spoil the list's start behind the store's back: a turn that compared the whole list
    # would put it right; one that trusts the claim appends the new hashes only.
    first = await raw.lindex(ARCHIVE, 0)
    await raw.lset(ARCHIVE, 0, "spoiled")
    await store.end_turn(A, "s", _ended(history[:6], 2))
    listed = await raw.lrange(ARCHIVE, 0, -1)
    assert listed[0] == "spoiled"
    assert len(listed) == 6
    # A replica that claims nothing (restarted, say) compares the whole list.
    store._archived.clear()
    await store.end_turn(A, "s", _ended(history[:8], 3))
    listed = await raw.lrange(ARCHIVE, 0, -1)
    assert listed[0] == first
    assert await store.archived(A, "s") == history


async def test_another_replicas_turn_in_between_is_compared_whole(
    replicas: tuple[RedisStore, RedisStore, aioredis.Redis],
) -> None:
    first, second, _ = replicas
    ours, theirs = _history(6), _history(6, topic="other")
    await first.end_turn(A, "s", _ended(ours[:4]))
    await second.end_turn(A, "s", _ended(theirs[:4]))  # the same length, other hashes
    await first.end_turn(A, "s", _ended(ours, 2))
    assert await first.archived(A, "s") == ours
    # Both replicas growing one conversation by turns: each finds the list longer than it
    # left it, and appends what is new.
    grown = _history(12)
    for turn, length in enumerate(range(2, 13, 2)):
        store = (first, second)[turn % 2]
        await store.end_turn(A, "s", _ended(grown[:length], turn + 3))
        assert await second.archived(A, "s") == grown[:length]


async def test_a_rewind_a_regrowth_and_a_lost_list(
    replicas: tuple[RedisStore, RedisStore, aioredis.Redis],
) -> None:
    store, _, raw = replicas
    history = _history(8)
    await store.end_turn(A, "s", _ended(history[:6]))
    await store.end_turn(A, "s", _ended(history[:3], 2))  # rewound
    assert await store.archived(A, "s") == history[:3]
    regrown = [*history[:3], *_history(3, topic="again")]
    await store.end_turn(A, "s", _ended(regrown, 3))
    assert await store.archived(A, "s") == regrown
    # An edit in the middle at the same length and the same last message.
    edited = [*regrown[:1], user("edited"), *regrown[2:]]
    await store.end_turn(A, "s", _ended([*edited, assistant("next")], 4))
    assert await store.archived(A, "s") == [*edited, assistant("next")]
    # The list alone lost (evicted under memory pressure, say): written again whole.
    await raw.delete(ARCHIVE)
    await store.end_turn(A, "s", _ended([*edited, assistant("next"), user("on")], 5))
    assert await store.archived(A, "s") == [*edited, assistant("next"), user("on")]
    # `archive` (the turns that end without a record) claims the same way.
    longer = [*edited, assistant("next"), user("on"), assistant("off")]
    await store.archive(A, "s", longer)
    assert await store.archived(A, "s") == longer
