"""The session stores a service test runs on: the embedded one, and Redis on a private server.

A test that takes `store` from a fixture parametrized by `STORES` runs once on each, so the
service behaves the same whichever store the operator configured. Both are opened by
`open_store`, as the app opens them; a Redis fault is made on the `redis_server` itself
(`stop`, `kill`, `pause`: see tests/redis_server.py). What only a real server's outage or
latency made happen is made on the embedded store too, deterministically: `TurnTaking` here,
and an outage in tests/service/outage.py.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import pytest

from proxy.adapters.store import MemoryStore, Store, open_store
from proxy.adapters.store import contract as store_contract
from proxy.settings import RedisSettings
from tests.redis_server import RedisServer

STORES = ("embedded", "redis")


def redis_section(kind: str, request: pytest.FixtureRequest, **redis: Any) -> dict[str, Any]:
    """The `redis` settings of the store `kind` names (with `redis` added): "embedded" is the
    default, "redis" asks for the `redis_server` fixture (skipped when it is not installed)."""
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return {"url": server.url, **redis}
    return redis


@asynccontextmanager
async def store_of(kind: str, request: pytest.FixtureRequest, **redis: Any) -> AsyncIterator[Store]:
    """The store `kind` names, opened by the app's own factory and closed afterwards."""
    store = open_store(RedisSettings.model_validate(redis_section(kind, request, **redis)))
    try:
        yield store
    finally:
        await store.aclose()


CALLS: Final = frozenset(
    name
    for protocol in Store.__mro__
    if protocol.__module__ == store_contract.__name__
    for name, member in vars(protocol).items()
    if inspect.iscoroutinefunction(member) and name != "aclose"
)
"""Every call of the store's contract (its pings included) but closing it."""


class TurnTaking(MemoryStore):
    """The embedded store, each of whose calls first gives the event loop a turn, as a call to
    Redis does: requests served at once interleave at every store call, in the loop's order
    (the same on every run), so a race two replicas run on Redis is run here without one."""

    def __getattribute__(self, name: str) -> Any:
        call = super().__getattribute__(name)
        if name not in CALLS:
            return call

        async def after_a_turn(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            return await call(*args, **kwargs)

        return after_a_turn
