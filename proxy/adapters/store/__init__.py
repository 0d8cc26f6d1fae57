"""The session store: Redis when configured, an in-process store otherwise.

Both implement `Store`: session state and compaction history, each session's checkpoints and
prepared summaries, a content-addressed archive of the original messages (shared by a
tenant's sessions), locks across replicas, and per-model facts (token-count calibration,
learned context windows). Everything is namespaced by the tenant; no credential is ever
stored.

Every key of a tenant or session expires `session_ttl_s` after its last write (a found
checkpoint counts as a write), so abandoned conversations clean themselves up.

The embedded store is in `embedded.py`, the Redis store and its key schema in
`redis_store.py`, and the contract both keep in `contract.py`.

Every Redis failure surfaces as `StoreUnavailableError`, so the service can degrade to plain
forwarding instead of failing the request; its `scope` says whether the whole store failed
or one Redis Cluster node, which the service then fences off (`Store.fence`) until it or its
replica answers.
"""

from __future__ import annotations

from proxy.adapters.store.contract import (
    DEFAULT_SESSION_TTL_S,
    HISTORY_LIMIT,
    TIMELINE_LIMIT,
    WHOLE,
    EndedTurn,
    OpenedTurn,
    RecallIds,
    SessionNotIndexedError,
    Store,
    StoreUnavailableError,
)
from proxy.adapters.store.embedded import MemoryStore
from proxy.adapters.store.redis_store import RedisStore
from proxy.settings import RedisSettings

__all__ = [
    "DEFAULT_SESSION_TTL_S",
    "HISTORY_LIMIT",
    "TIMELINE_LIMIT",
    "WHOLE",
    "EndedTurn",
    "MemoryStore",
    "OpenedTurn",
    "RecallIds",
    "RedisStore",
    "SessionNotIndexedError",
    "Store",
    "StoreUnavailableError",
    "open_store",
]


def open_store(settings: RedisSettings) -> Store:
    """The store `settings` describe: the embedded one when mode is single and url empty."""
    if settings.mode == "single" and not settings.url:
        return MemoryStore(
            session_ttl_s=settings.session_ttl_s, max_bytes=settings.embedded_max_bytes
        )
    return RedisStore.connect(settings)
