"""The embedded store's memory: bounded in bytes, least recently used sessions evicted first,
and given back when sessions are deleted (the operator's 120 distinct 5 MB messages)."""

from __future__ import annotations

import gc
import tracemalloc

from proxy.adapters.store import MemoryStore, open_store
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, TurnPoint, content_hash
from proxy.settings import RedisSettings
from tests.builders import user

A = "tenant-a"
B = "tenant-b"
MiB = 1024 * 1024
BOUND = 350_000
"""Room for three sessions of one `big` message each, not four."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def big(tag: str, size: int = 100_000) -> Message:
    """A user message of about `size` bytes, distinct for each `tag`."""
    return user(tag + "x" * (size - len(tag)))


def checkpoint_of(message: Message, text: str) -> Checkpoint:
    return Checkpoint(
        prefix_hash=content_hash(message),
        covered=1,
        messages=[user(text)],
        created_at=1.0,
        strategy="summarize",
        tokens_before=1000,
        tokens_after=100,
    )


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


# -- the operator's report -------------------------------------------------------------------


async def test_distinct_5mb_messages_stay_within_the_bound_and_deletes_give_it_back() -> None:
    store = MemoryStore(max_bytes=64 * MiB)
    tracemalloc.start()
    try:
        before = traced()
        for index in range(120):
            message = user(f"{index:04d}" + "x" * (5 * MiB))
            await store.archive(A, f"s{index}", [message])
            del message
        held = traced() - before
        assert 48 * MiB < held < 64 * MiB * 1.05  # full up to the bound, and no further
        assert len(await store.archived(A, "s119")) == 1  # the newest are the ones kept
        assert await store.archived(A, "s0") == []
        for index in range(120):
            await store.delete_session(A, f"s{index}")
        assert traced() - before < MiB
        assert store.bytes_held == 0
    finally:
        tracemalloc.stop()


# -- accounting ------------------------------------------------------------------------------


async def test_bytes_held_counts_shared_messages_once_and_nothing_once_all_is_deleted() -> None:
    store = MemoryStore()
    assert store.bytes_held == 0
    await store.archive(A, "one", [big("a"), big("b")])
    two_messages = store.bytes_held
    assert 200_000 < two_messages < 205_000
    await store.archive(A, "two", [big("a"), big("b")])
    assert store.bytes_held - two_messages < 2_000  # a second session, no second copy
    await store.delete_session(A, "one")
    assert store.bytes_held > 200_000  # "two" still holds both
    await store.delete_session(A, "two")
    assert store.bytes_held == 0


async def test_bytes_held_follows_sessions_checkpoints_and_summaries() -> None:
    store = MemoryStore()
    await store.begin_turn(A, "s", model="m", at=1.0)
    await store.record_turn(A, "s", _point(), context={}, request={"tools": "t" * 50_000})
    with_request = store.bytes_held
    assert 50_000 < with_request < 55_000
    await store.put_checkpoint(A, "s", checkpoint_of(big("c"), "k" * 30_000))
    await store.put_summary(A, "s", "key", "s" * 20_000)
    assert 50_000 < store.bytes_held - with_request < 53_000
    await store.drop_checkpoint(A, "s", content_hash(big("c")))
    await store.delete_session(A, "s")
    assert 20_000 < store.bytes_held < 21_000  # the summary alone


async def test_rewound_history_gives_back_the_messages_only_it_held() -> None:
    store = MemoryStore()
    body = [big("a"), big("b"), big("c")]
    await store.archive(A, "s", body)
    await store.archive(A, "other", body[:2])
    full = store.bytes_held
    await store.archive(A, "s", body[:1])
    assert 100_000 < full - store.bytes_held < 101_000  # "c"; "other" still holds "b"
    assert await store.archived(A, "other") == body[:2]


async def test_expired_sessions_give_their_bytes_back() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    await store.archive(A, "s", [big("a"), big("b")])
    clock.now += 101
    await store.begin_turn(A, "new", model="m", at=2.0)  # the write sweeps
    assert store.bytes_held < 2_000


# -- eviction order --------------------------------------------------------------------------


async def test_the_least_recently_used_session_is_evicted_first() -> None:
    store = MemoryStore(max_bytes=BOUND)
    for name in ("s1", "s2", "s3"):
        await store.archive(A, name, [big(name)])
    await store.begin_turn(A, "s1", model="m", at=1.0)  # s1 used again: s2 is the oldest
    await store.archive(A, "s4", [big("s4")])
    assert await store.load_session(A, "s2") is None
    assert await store.archived(A, "s2") == []
    for name in ("s1", "s3", "s4"):
        assert await store.archived(A, name) == [big(name)]
    assert store.bytes_held <= BOUND


async def test_eviction_keeps_the_messages_another_session_holds() -> None:
    store = MemoryStore(max_bytes=BOUND)
    shared = big("shared")
    await store.archive(A, "old", [shared, big("old")])
    await store.archive(A, "new", [shared])
    await store.archive(A, "newest", [big("newest")])
    assert await store.load_session(A, "old") is None
    assert await store.archived(A, "new") == [shared]
    assert await store.archived(A, "newest") == [big("newest")]


async def test_tenants_share_no_messages_so_eviction_in_one_spares_the_other() -> None:
    store = MemoryStore(max_bytes=BOUND)
    await store.archive(A, "s", [big("same")])
    await store.archive(B, "s", [big("same")])
    await store.delete_session(A, "s")
    assert await store.archived(B, "s") == [big("same")]


async def test_older_checkpoints_and_summaries_go_before_newer_sessions() -> None:
    store = MemoryStore(max_bytes=BOUND)
    await store.put_summary(A, "s", "key", "s" * 100_000)
    await store.put_checkpoint(A, "s", checkpoint_of(big("c"), "k" * 100_000))
    for name in ("s1", "s2", "s3"):
        await store.archive(A, name, [big(name)])
    assert await store.find_summaries(A, "s", ["key"]) == {}
    assert await store.find_checkpoint(A, "s", [content_hash(big("c"))]) is None
    for name in ("s1", "s2", "s3"):
        assert await store.archived(A, name) == [big(name)]


async def test_a_session_larger_than_the_bound_keeps_its_newest_messages() -> None:
    store = MemoryStore(max_bytes=BOUND)
    body = [big(str(index)) for index in range(6)]
    await store.archive(A, "s", body)
    assert await store.archived(A, "s") == body[3:]
    assert store.bytes_held <= BOUND


# -- configuration ---------------------------------------------------------------------------


async def test_open_store_bounds_the_embedded_store_by_the_setting() -> None:
    store = open_store(RedisSettings(embedded_max_bytes=MiB))
    assert isinstance(store, MemoryStore)
    for index in range(20):
        await store.archive(A, f"s{index}", [big(str(index))])
    assert store.bytes_held <= MiB
    assert await store.archived(A, "s0") == []
    assert await store.archived(A, "s19") == [big("19")]


async def test_open_store_default_bound_keeps_a_few_megabytes() -> None:
    store = open_store(RedisSettings())
    for index in range(20):
        await store.archive(A, f"s{index}", [big(str(index))])
    assert await store.archived(A, "s0") == [big("0")]


def _point() -> TurnPoint:
    return TurnPoint(1, 1.0, 0.2, 100, 100, "none")
