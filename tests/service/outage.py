"""A store outage a test makes, two ways: Redis stopped under a real `RedisStore`, or the
embedded store refusing every call as `RedisStore` refuses them while Redis is down.

A test of what the service does in an outage takes `outage` from a fixture parametrized by
`OUTAGES` and runs once each way. The Redis one proves it on a real server, where
redis-server is installed; the embedded one needs nothing installed and behaves the same on
every run, so the coverage gates can count it (tests/gates.py) on a machine without Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import pytest

from proxy.adapters.store import MemoryStore, Store, StoreUnavailableError
from tests.redis_server import RedisServer
from tests.service.stores import CALLS, store_of

OUTAGES: Final = ("embedded", "redis")


async def _refused(*args: object, **kwargs: object) -> NoReturn:
    raise StoreUnavailableError("the store is down (the test stopped it)")


class RefusingStore(MemoryStore):
    """The embedded store; while `refusing`, each of its calls fails as `RedisStore`'s fail
    with Redis down: `StoreUnavailableError` for the whole store, pings too. What it held is
    there again once it stops refusing, as on a Redis that restarts with its data."""

    refusing = False

    def __getattribute__(self, name: str) -> Any:
        if name in CALLS and object.__getattribute__(self, "refusing"):
            return _refused
        return super().__getattribute__(name)


@dataclass(frozen=True, slots=True)
class Outage:
    """A store and the means to take it down and bring it back."""

    kind: str
    store: Store
    stop: Callable[[], None]
    start: Callable[[], None]
    redis: dict[str, Any]
    """The `redis` settings of an app on this store (the embedded one: handed in instead)."""


@asynccontextmanager
async def outage_of(
    kind: str, request: pytest.FixtureRequest, **redis: Any
) -> AsyncIterator[Outage]:
    """The store `kind` names (OUTAGES), serving until the test calls `stop`."""
    if kind == "embedded":
        refusing = RefusingStore()

        def refuse(down: bool) -> Callable[[], None]:
            return lambda: setattr(refusing, "refusing", down)

        yield Outage(kind, refusing, refuse(True), refuse(False), {})
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    async with store_of("redis", request, **redis) as store:
        yield Outage(kind, store, server.stop, server.start, {"url": server.url, **redis})
