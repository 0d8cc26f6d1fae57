"""The store as the request path uses it: best effort, never the reason a request fails.

Every call goes through `Memory`, which turns a store outage into "nothing remembered":
no checkpoint found, a fresh session state, nothing recorded. The proxy then compacts from
the request alone and keeps serving. The outage is logged once when it starts and once when
the store answers again, not on every request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from proxy.adapters.store import Store, StoreUnavailableError
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, CompactionRecord, SessionState

logger = logging.getLogger("proxy.store")

_T = TypeVar("_T")


class Memory:
    """Best-effort access to the session store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._down = False

    async def _try(self, call: Awaitable[_T], default: _T) -> _T:
        try:
            value = await call
        except StoreUnavailableError as exc:
            if not self._down:
                logger.warning("session store unavailable, serving without it: %s", exc)
                self._down = True
            return default
        if self._down:
            logger.warning("session store is back")
            self._down = False
        return value

    async def find_checkpoint(self, tenant: str, hashes: Sequence[str]) -> Checkpoint | None:
        if not hashes:
            return None
        return await self._try(self.store.find_checkpoint(tenant, hashes), None)

    async def put_checkpoint(self, tenant: str, checkpoint: Checkpoint) -> Checkpoint:
        return await self._try(self.store.put_checkpoint(tenant, checkpoint), checkpoint)

    async def begin_turn(
        self, tenant: str, session: str | None, model: str | None, at: float
    ) -> SessionState:
        if session is None:
            return SessionState()
        return await self._try(
            self.store.begin_turn(tenant, session, model=model, at=at), SessionState()
        )

    async def record_compaction(
        self, tenant: str, session: str | None, record: CompactionRecord
    ) -> None:
        if session is not None:
            await self._try(self.store.record_compaction(tenant, session, record), None)

    async def record_usage(
        self, tenant: str, session: str | None, usage: dict[str, object], pressure: float
    ) -> None:
        if session is not None:
            await self._try(
                self.store.record_usage(tenant, session, usage=usage, pressure=pressure), None
            )

    async def archive(self, tenant: str, session: str | None, messages: Sequence[Message]) -> None:
        if session is not None:
            await self._try(self.store.archive(tenant, session, messages), None)

    async def acquire(self, tenant: str, name: str, ttl_s: float) -> str | None:
        # Without the store there is no one to coordinate with: act as the only replica.
        return await self._try(self.store.acquire(tenant, name, ttl_s=ttl_s), "local")

    async def release(self, tenant: str, name: str, token: str) -> None:
        await self._try(self.store.release(tenant, name, token), False)

    async def calibration(self, model: str | None) -> float | None:
        return await self._try(self.store.calibration(model or ""), None)

    async def set_calibration(self, model: str | None, factor: float) -> None:
        await self._try(self.store.set_calibration(model or "", factor), None)

    async def learned_window(self, model: str | None) -> int | None:
        return await self._try(self.store.learned_window(model or ""), None)

    async def learn_window(self, model: str | None, window: int) -> None:
        await self._try(self.store.learn_window(model or "", window), None)
