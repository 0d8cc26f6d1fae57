"""The session stores a service test runs on: the embedded one, and Redis on a private server.

A test that takes `store` from a fixture parametrized by `STORES` runs once on each, so the
service behaves the same whichever store the operator configured. Both are opened by
`open_store`, as the app opens them; a Redis fault is made on the `redis_server` itself
(`stop`, `kill`, `pause`: see tests/redis_server.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from proxy.adapters.store import Store, open_store
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
