"""The session store: Redis when `redis.url` is set, an in-process store otherwise.

Both implement `Store`. Today the proxy only needs to know the store is usable (`/readyz`);
sessions and checkpoints are added to this same protocol, and both implementations, as the
compaction path starts to use them.
"""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError


class StoreUnavailableError(Exception):
    """The store cannot be used right now (Redis down, unreachable, refusing)."""


class Store(Protocol):
    async def ping(self) -> None:
        """Check the store answers. Raises `StoreUnavailableError`."""

    async def aclose(self) -> None:
        """Release connections."""


class MemoryStore:
    """The embedded store: lives in this process, gone when it exits."""

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class RedisStore:
    """A store on a Redis server, shared by every proxy replica that points at it."""

    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        # Bounded socket time-outs: a hung Redis must not hang the requests that consult it.
        self._client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    async def ping(self) -> None:
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailableError(f"Redis is not usable: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def open_store(url: str) -> Store:
    """The store for `redis.url`: Redis if set, the embedded store if empty."""
    return RedisStore(url) if url else MemoryStore()
