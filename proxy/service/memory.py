"""The store as the request path uses it: best effort, never the reason a request fails.

Every call goes through `Memory`, which turns a store outage into "nothing remembered":
no checkpoint found, a fresh session state, nothing recorded. The proxy then compacts from
the request alone and keeps serving. The outage is logged once when it starts and once when
the store answers again, not on every request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from proxy.adapters.store import Store, StoreUnavailableError
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, CompactionRecord, SessionState, TurnPoint
from proxy.observability.metrics import Metrics

logger = logging.getLogger("proxy.store")

# How long a replica trusts its copy of a model's calibration and learned window.
FACT_TTL_S = 5.0

_T = TypeVar("_T")


class Memory:
    """Best-effort access to the session store."""

    def __init__(self, store: Store, *, metrics: Metrics | None = None) -> None:
        self.store = store
        self._metrics = metrics
        self._down = False
        self._facts: dict[tuple[str, str], tuple[float, float | None]] = {}

    async def _try(self, call: Awaitable[_T], default: _T) -> _T:
        try:
            value = await call
        except StoreUnavailableError as exc:
            # Counted every time, logged once per outage: the count shows how much of the
            # traffic an outage touched, the log when it started and ended.
            if self._metrics is not None:
                self._metrics.store_error()
            if not self._down:
                logger.warning("session store unavailable, serving without it: %s", exc)
                self._down = True
            return default
        if self._down:
            logger.warning("session store is back")
            self._down = False
        return value

    @property
    def down(self) -> bool:
        """Whether the store's last call failed (it is believed unreachable)."""
        return self._down

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

    async def session(self, tenant: str, session: str | None) -> SessionState | None:
        if session is None:
            return None
        return await self._try(self.store.load_session(tenant, session), None)

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

    async def record_turn(
        self,
        tenant: str,
        session: str | None,
        point: TurnPoint,
        context: Mapping[str, Any],
        request: Mapping[str, Any] | None,
    ) -> None:
        if session is not None:
            call = self.store.record_turn(tenant, session, point, context=context, request=request)
            await self._try(call, None)

    async def archive(
        self,
        tenant: str,
        session: str | None,
        messages: Sequence[Message],
        hashes: Sequence[str] | None = None,
    ) -> None:
        if session is not None:
            await self._try(self.store.archive(tenant, session, messages, hashes=hashes), None)

    async def find_summaries(self, tenant: str, keys: Sequence[str]) -> dict[str, str]:
        return await self._try(self.store.find_summaries(tenant, keys), {})

    async def put_summary(self, tenant: str, key: str, text: str) -> bool:
        """Whether the summary was stored (False: the store is down)."""
        return await self._try(self._stored(self.store.put_summary(tenant, key, text)), False)

    @staticmethod
    async def _stored(call: Awaitable[None]) -> bool:
        await call
        return True

    async def acquire(self, tenant: str, name: str, ttl_s: float) -> str | None:
        # Without the store there is no one to coordinate with: act as the only replica.
        return await self._try(self.store.acquire(tenant, name, ttl_s=ttl_s), "local")

    async def release(self, tenant: str, name: str, token: str) -> None:
        await self._try(self.store.release(tenant, name, token), False)

    # Per-model facts change slowly and are read on every request: each replica keeps them
    # for a few seconds instead of asking the store every time; its own writes apply at once.

    async def calibration(self, model: str | None) -> float | None:
        return await self._fact("calibration", model, self.store.calibration)

    async def set_calibration(self, model: str | None, factor: float) -> None:
        self._facts[("calibration", model or "")] = (time.monotonic(), factor)
        await self._try(self.store.set_calibration(model or "", factor), None)

    async def learned_window(self, model: str | None) -> int | None:
        value = await self._fact("window", model, self.store.learned_window)
        return int(value) if value is not None else None

    async def learn_window(self, model: str | None, window: int) -> None:
        self._facts[("window", model or "")] = (time.monotonic(), float(window))
        await self._try(self.store.learn_window(model or "", window), None)

    async def _fact(
        self, kind: str, model: str | None, read: Callable[[str], Awaitable[float | int | None]]
    ) -> float | None:
        key = (kind, model or "")
        cached = self._facts.get(key)
        if cached is not None and time.monotonic() - cached[0] < FACT_TTL_S:
            return cached[1]
        value = await self._try(read(model or ""), None)
        self._facts[key] = (time.monotonic(), None if value is None else float(value))
        return self._facts[key][1]
