"""The stores' `Recalls` role: what each recall id of a session stands for.

Like tests/adapters/test_store.py, every `backend` test runs on `MemoryStore`, on a
`RedisStore` on a private redis-server, and on a `RedisStore` on a private one-node Redis
Cluster (tests/adapters/backends.py): a recall id lives under the session's hash tag and each
body under a tag of its own, and a cluster refuses any command that mixes them. The machine's
own Redis is never used.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proxy.adapters.store import (
    EndedTurn,
    MemoryStore,
    RedisStore,
    StoreUnavailableError,
    open_store,
)
from proxy.adapters.store.nodes import Op
from proxy.core.messages import Message
from proxy.core.session import TurnPoint, content_hash
from proxy.settings import RedisMode, RedisSettings
from tests import optional

# The six `*_fixture`s are pytest's to find here (see tests/adapters/backends.py).
from tests.adapters.backends import (
    TTL_S,
    A,
    B,
    Backend,
    Clock,
    backend_fixture,  # noqa: F401
    cluster_node_fixture,  # noqa: F401
    cluster_port_fixture,  # noqa: F401
    kind_fixture,  # noqa: F401
    redis_pair_fixture,  # noqa: F401
    redis_socket_fixture,  # noqa: F401
)
from tests.builders import assistant, tool_result, user
from tests.redis_server import RedisServer
from tests.servers import free_port

# The Redis clients are shared by the module's tests, so they share its event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


# -- builders --------------------------------------------------------------------------------

BODY: list[Message] = [
    user("find the failing test"),
    assistant("running the suite"),
    tool_result("c1", "412 passed, 1 failed: test_store_recalls"),
    user("fix it"),
]
HASHES = [content_hash(message) for message in BODY]


def bodies(*messages: Message) -> dict[str, Message]:
    """Messages by their content hash, as `put_recalls` takes them."""
    return {content_hash(message): message for message in messages}


def recall_key(tenant: str, session_id: str) -> str:
    return f"cp:{{s:{tenant}:{session_id}}}:recall"


# == the contract, on every backend ==========================================================


async def test_recalled_gives_the_messages_of_the_id_in_order(backend: Backend) -> None:
    store = backend.store
    recalls = {"rc_span": [HASHES[2], HASHES[0], HASHES[1]], "rc_tool": [HASHES[2]]}
    await store.put_recalls(A, "s", recalls, bodies(*BODY[:3]))
    assert await store.recalled(A, "s", "rc_span") == [BODY[2], BODY[0], BODY[1]]
    assert await store.recalled(A, "s", "rc_tool") == [BODY[2]]


async def test_recalled_unknown_id_or_session_is_none(backend: Backend) -> None:
    store = backend.store
    assert await store.recalled(A, "s", "rc_unknown") is None
    await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, bodies(BODY[0]))
    assert await store.recalled(A, "s", "rc_unknown") is None
    assert await store.recalled(A, "nobody", "rc_1") is None


async def test_recalled_another_sessions_id_is_none(backend: Backend) -> None:
    await backend.store.put_recalls(A, "s1", {"rc_1": HASHES[:2]}, bodies(*BODY[:2]))
    assert await backend.store.recalled(A, "s2", "rc_1") is None


async def test_recalled_another_tenants_id_is_none(backend: Backend) -> None:
    store = backend.store
    await store.put_recalls(A, "s", {"rc_1": HASHES[:2]}, bodies(*BODY[:2]))
    assert await store.recalled(B, "s", "rc_1") is None
    # Nor are A's bodies B's: B's id naming the same hashes finds nothing stored.
    await store.put_recalls(B, "s", {"rc_1": HASHES[:2]}, {})
    assert await store.recalled(B, "s", "rc_1") == []


async def test_an_id_put_twice_keeps_its_first_hashes(backend: Backend) -> None:
    store = backend.store
    await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, bodies(*BODY))
    await store.put_recalls(A, "s", {"rc_1": HASHES[1:], "rc_2": HASHES[1:2]}, {})
    assert await store.recalled(A, "s", "rc_1") == BODY[:1]
    assert await store.recalled(A, "s", "rc_2") == BODY[1:2]


async def test_put_recalls_never_overwrites_a_stored_body(backend: Backend) -> None:
    store = backend.store
    await store.archive(A, "s", BODY)
    forged = {HASHES[0]: user("not what was said")}
    await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, forged)
    assert await store.recalled(A, "s", "rc_1") == BODY[:1]
    assert await store.archived(A, "s") == BODY


async def test_recalled_finds_the_bodies_the_archive_stored(backend: Backend) -> None:
    store = backend.store
    await store.archive(A, "s", BODY)
    await store.put_recalls(A, "s", {"rc_1": HASHES[1:3]}, {})
    assert await store.recalled(A, "s", "rc_1") == BODY[1:3]
    assert await backend.messages_stored(A) == len(BODY)  # stored once, shared


async def test_an_id_resolves_after_the_archive_moved_on(backend: Backend) -> None:
    # The archive records the client's latest history; an id of the session still stands
    # for what it replaced, though a rewind dropped it from the archived sequence.
    store = backend.store
    await store.archive(A, "s", BODY)
    await store.put_recalls(A, "s", {"rc_1": HASHES[:2]}, {})
    await store.archive(A, "s", [user("start over")])
    assert await store.recalled(A, "s", "rc_1") == BODY[:2]


async def test_recalled_skips_a_body_never_stored(backend: Backend) -> None:
    await backend.store.put_recalls(A, "s", {"rc_1": HASHES}, bodies(BODY[0], BODY[3]))
    assert await backend.store.recalled(A, "s", "rc_1") == [BODY[0], BODY[3]]


async def test_put_recalls_keeps_messages_as_sent(backend: Backend) -> None:
    odd: Message = {"content": "hé ☃", "role": "user", "x_vendor": {"keep": [1, None]}}
    await backend.store.put_recalls(A, "s", {"rc_1": [content_hash(odd)]}, bodies(odd))
    restored = await backend.store.recalled(A, "s", "rc_1")
    assert restored == [odd]
    assert list(restored[0]) == ["content", "role", "x_vendor"]  # key order kept


async def test_put_recalls_with_nothing_stores_nothing(backend: Backend) -> None:
    await backend.store.put_recalls(A, "s", {}, {})
    assert await backend.messages_stored(A) == 0
    assert await backend.store.delete_session(A, "s") is False


async def test_bodies_alone_are_stored_without_an_id(backend: Backend) -> None:
    # Bodies without ids: an id written later (by another replica) resolves to them.
    store = backend.store
    await store.put_recalls(A, "s", {}, bodies(*BODY[:2]))
    assert await store.recalled(A, "s", "rc_1") is None
    await store.put_recalls(A, "s", {"rc_1": HASHES[:2]}, {})
    assert await store.recalled(A, "s", "rc_1") == BODY[:2]


async def test_delete_session_forgets_its_recall_ids(backend: Backend) -> None:
    store = backend.store
    await store.begin_turn(A, "s", model="m", at=1.0)
    await store.put_recalls(A, "s", {"rc_1": HASHES[:2]}, bodies(*BODY[:2]))
    await store.put_recalls(A, "kept", {"rc_1": HASHES[:2]}, {})
    assert await store.delete_session(A, "s") is True
    assert await store.recalled(A, "s", "rc_1") is None
    assert await store.recalled(A, "kept", "rc_1") == BODY[:2]
    # A session that has recall ids only is a session to delete, on both stores alike.
    await store.put_recalls(A, "only", {"rc_1": HASHES[:1]}, {})
    assert await store.delete_session(A, "only") is True
    assert await store.recalled(A, "only", "rc_1") is None


# -- expiry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "cluster"], indirect=True)
async def test_redis_recall_keys_carry_the_ttl_and_writes_restart_it(backend: Backend) -> None:
    store, raw = backend.store, backend.raw
    assert raw is not None
    await store.put_recalls(A, "s", {"rc_1": HASHES[:2]}, bodies(*BODY[:2]))
    key = recall_key(A, "s")
    body_keys = [f"cp:{{m:{A}:{h}}}" for h in HASHES[:2]]
    for timed in (key, *body_keys):
        assert TTL_S * 1000 - 5000 < await raw.pttl(timed) <= TTL_S * 1000
    await raw.pexpire(key, 5000)
    await store.put_recalls(A, "s", {"rc_1": HASHES[2:]}, {})  # a write: known id, new TTL
    assert await raw.pttl(key) > 5000
    await raw.pexpire(key, 5000)
    await store.begin_turn(A, "s", model="m", at=time.time())  # the session's writes too
    assert await raw.pttl(key) > 5000
    await raw.pexpire(key, 5000)
    await store.open_turn(A, "s", model="m", at=time.time(), hashes=HASHES)
    assert await raw.pttl(key) > 5000
    await raw.pexpire(key, 5000)
    await store.end_turn(A, "s", EndedTurn(TurnPoint(1, 1.0, 0.2, 10, 10, "none"), {}))
    assert await raw.pttl(key) > 5000


async def test_memory_recall_ids_expire_with_the_session_unless_written() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=100, clock=clock)
    await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, bodies(BODY[0]))
    clock.now += 60
    await store.put_recalls(A, "s", {"rc_2": HASHES[:1]}, {})  # a write restarts the TTL
    clock.now += 60
    assert await store.recalled(A, "s", "rc_1") == []  # the id lives on; its body expired
    clock.now += 41
    assert await store.recalled(A, "s", "rc_1") is None


async def test_memory_recalled_bodies_go_with_the_last_session_holding_them() -> None:
    # Counted like the archive's: deleting the sessions gives the memory back.
    store = MemoryStore(session_ttl_s=TTL_S)
    await store.put_recalls(A, "one", {"rc_1": HASHES[:2]}, bodies(*BODY[:2]))
    await store.put_recalls(A, "two", {"rc_1": HASHES[1:2]}, {})
    held = store.bytes_held
    await store.delete_session(A, "one")
    assert await store.recalled(A, "two", "rc_1") == BODY[1:2]
    assert store.bytes_held < held
    await store.delete_session(A, "two")
    assert list(store._messages.live()) == []
    assert store.bytes_held == 0


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["single", "cluster"])
async def test_unreachable_redis_is_unavailable_for_recalls(mode: RedisMode) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    store = open_store(RedisSettings(url=url, mode=mode, timeout_s=0.2))
    with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
        await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, bodies(BODY[0]))
    with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
        await store.recalled(A, "s", "rc_1")
    await store.aclose()


async def test_stopped_redis_is_unavailable_for_recalls(tmp_path: Path) -> None:
    try:
        server = RedisServer(tmp_path)
    except FileNotFoundError as exc:
        optional.skip(str(exc))
    server.start()
    store = open_store(RedisSettings(url=server.url, timeout_s=0.5))
    try:
        await store.put_recalls(A, "s", {"rc_1": HASHES[:1]}, bodies(BODY[0]))
        server.stop()
        with pytest.raises(StoreUnavailableError):
            await store.recalled(A, "s", "rc_1")
        with pytest.raises(StoreUnavailableError):
            await store.put_recalls(A, "s", {"rc_2": HASHES[:1]}, {})
    finally:
        server.stop()
        await store.aclose()


# -- the archive's bodies, sent with the turn ------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "cluster"], indirect=True)
async def test_bodies_the_turn_did_not_send_follow_when_the_script_counts_them_new(
    backend: Backend,
) -> None:
    # A replica sends, with the turn's script, the bodies past what it archived last time;
    # the script tells what the session's sequence really shared. Here another replica
    # rewound the session meanwhile, and the bodies of the rewound part expired: they are
    # sent after the script's answer, and the whole history is archived.
    store, raw = backend.store, backend.raw
    assert isinstance(store, RedisStore)
    assert raw is not None
    history = [user(f"step {i}") if i % 2 == 0 else assistant(f"done {i}") for i in range(9)]
    hashes = [content_hash(message) for message in history]
    point = TurnPoint(1, 1.0, 0.2, 10, 10, "none")
    await store.end_turn(A, "s", EndedTurn(point, {}, None, history[:7]))
    guess = store._archived[(A, "s")]
    rewound = [*history[:2], user("another way"), assistant("then")]
    await store.end_turn(A, "s", EndedTurn(point, {}, None, rewound))  # "another replica"
    store._archived[(A, "s")] = guess
    for digest in hashes[2:7]:  # one by one: a tag each, on a cluster
        await raw.delete(f"cp:{{m:{A}:{digest}}}")
    await store.end_turn(A, "s", EndedTurn(point, {}, None, history))
    assert await store.archived(A, "s") == history


@pytest.mark.parametrize("kind", ["redis", "cluster"], indirect=True)
async def test_a_command_refused_in_a_batch_fails_the_call(backend: Backend) -> None:
    store, raw = backend.store, backend.raw
    assert isinstance(store, RedisStore)
    assert raw is not None
    await raw.set("cp:{m:t:x}", "text")
    with pytest.raises(StoreUnavailableError, match="WRONGTYPE"):
        async with store._call() as call:
            await call.batch([Op("hset", "cp:{m:t:x}", ("field", "value"))])
