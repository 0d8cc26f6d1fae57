"""The store as the request path uses it: best effort, never the reason a request fails.

Every call goes through `Memory`, which turns a store outage into "nothing remembered":
no checkpoint found, a fresh session state, nothing recorded. The proxy then compacts from
the request alone and keeps serving. The outage is logged once when it starts and once when
the store answers again, not on every request.

A failed call opens a circuit breaker for the part of the store that failed (its scope): the
whole store (a single Redis, Sentinel's master, a cluster refusing every key), or one Redis
Cluster node. While the whole store is out, calls are not made at all (each is served as if
the store had nothing); while a node is, the store fails at once the calls that would go to
it (`Store.fence`), and the calls to the other nodes go on. Either way a probe pings the
failed part off the request path, at most once per `probe_interval_s`, until it answers: a
node answers when it is back, or when the cluster has promoted its replica (its slots are
served elsewhere). A hung Redis thus costs the requests in flight one store timeout (the
adapter bounds each call whole), and the next ones nothing; a dead master costs the requests
whose keys it served, never the others. Each outage is logged once when it starts and once
when it ends, per scope. Every call served around the store is counted (`store_errors`), and
every write among them too (`store_writes_lost`): what the outage did not remember.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from proxy.adapters.store import (
    WHOLE,
    EndedTurn,
    OpenedTurn,
    RecallIds,
    SessionNotIndexedError,
    Store,
    StoreUnavailableError,
)
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, CompactionRecord, SessionState, TurnPoint
from proxy.observability.metrics import Metrics

logger = logging.getLogger("proxy.store")

# How long a replica trusts its copy of a tenant's calibration and learned window.
FACT_TTL_S = 5.0
# Tenant and model pairs whose facts a replica keeps at most.
MAX_FACTS = 10_000
# How far a calibration moves before a replica writes it again within `FACT_TTL_S`: a
# correction that large reaches the other replicas at their next read, not a period later.
CALIBRATION_JUMP = 0.05
# How long a learned window or calibration lasts in the store unless configured: one day.
LEARNED_TTL_S = 86_400.0
# While the breaker is open, the store is asked to PING at most this often.
PROBE_INTERVAL_S = 1.0

_T = TypeVar("_T")


class Memory:
    """Best-effort access to the session store."""

    def __init__(
        self,
        store: Store,
        *,
        metrics: Metrics | None = None,
        probe_interval_s: float = PROBE_INTERVAL_S,
        learned_ttl_s: float = LEARNED_TTL_S,
    ) -> None:
        self.store = store
        # How long the store keeps what responses taught (calibration, learned windows).
        self._learned_ttl_s = learned_ttl_s
        self._metrics = metrics
        # The breaker: the summarizer's (`proxy.core.breaker`) lets every caller through
        # once its cool-off ends, and with a hung store each of them would wait; here no
        # request tries a failed part of the store while it is open, one background probe
        # does. One scope per part that failed (`WHOLE`, or a cluster node).
        self._down: set[str] = set()
        self._probe_interval_s = probe_interval_s
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._closed = False
        self._facts: dict[tuple[str, str, str], tuple[float, float | None]] = {}
        # When this replica last wrote each calibration, and what (`set_calibration`).
        self._written: dict[tuple[str, str, str], tuple[float, float]] = {}

    async def _try(self, call: Coroutine[Any, Any, _T], default: _T, *, write: bool = False) -> _T:
        """`call`'s value, or `default` when the store failed or its breaker is open;
        `write`: the call stores something (counted as lost when it is not made)."""
        try:
            return await self._must(call, write=write)
        except StoreUnavailableError:
            return default

    async def _must(self, call: Coroutine[Any, Any, _T], *, write: bool = False) -> _T:
        """`call`'s value; raises `StoreUnavailableError` when the store failed or its
        breaker is open, counted and logged as a call `_try` serves around the store."""
        if WHOLE in self._down:
            call.close()  # never awaited: closed, so Python does not warn about it
            self._served_around(write)
            raise StoreUnavailableError("the session store is unavailable (breaker open)")
        try:
            value = await call
        except StoreUnavailableError as exc:
            # A call to a fenced node lands here too, failed at once: counted, not logged.
            self._served_around(write)
            self._open(exc)
            raise
        # The store answered: as a whole, it is up (a call in flight when it went may come
        # back after the breaker opened). A node's outage ends by its probe only: a call
        # that succeeded went to other nodes.
        self._close(WHOLE)
        return value

    def _served_around(self, write: bool) -> None:
        # Counted every time, logged once per outage: the count shows how much of the
        # traffic an outage touched, the log when it started and ended.
        if self._metrics is not None:
            self._metrics.store_error()
            if write:
                self._metrics.store_write_lost()

    def _open(self, exc: StoreUnavailableError) -> None:
        scope = exc.scope
        # A call refused by the fence was refused because this breaker opened: its outage
        # is known, or ended while the refusal was on its way back (the probe found it back).
        if scope in self._down or exc.fenced:
            return
        logger.warning("session store unavailable%s, serving without it: %s", _at(scope), exc)
        self._down.add(scope)
        self.store.fence(scope, down=True)
        if self._metrics is not None:
            self._metrics.store_breaker(open_=True)
        if not self._closed:
            self._probes[scope] = asyncio.create_task(self._probe(scope))

    def _close(self, scope: str) -> None:
        if scope not in self._down:
            return
        logger.warning("session store is back%s", _at(scope))
        self._down.discard(scope)
        self.store.fence(scope, down=False)
        if self._metrics is not None:
            self._metrics.store_breaker(open_=bool(self._down))

    async def _probe(self, scope: str) -> None:
        """Ping `scope` at once, then once per `probe_interval_s`, until it answers (or its
        outage ended otherwise); off the request path, whether requests come or not."""
        try:
            while scope in self._down:
                try:
                    await self.store.ping(scope)
                except StoreUnavailableError:
                    logger.debug("session store still unavailable%s", _at(scope))
                    await asyncio.sleep(self._probe_interval_s)
                else:
                    self._close(scope)
        finally:
            self._probes.pop(scope, None)

    async def aclose(self) -> None:
        """Stop probing: a PING still in flight is cancelled, and none starts after this,
        so no connection outlives the store's own `aclose`."""
        self._closed = True
        probes = list(self._probes.values())
        for probe in probes:
            probe.cancel()
        for probe in probes:
            with contextlib.suppress(asyncio.CancelledError):
                await probe

    @property
    def down(self) -> bool:
        """Whether the store, or a part of it, is believed unreachable: its breaker is open,
        the calls there are skipped."""
        return bool(self._down)

    @property
    def outages(self) -> frozenset[str]:
        """The scopes whose breaker is open (`WHOLE`, or Redis Cluster nodes)."""
        return frozenset(self._down)

    async def find_checkpoint(
        self, tenant: str, session: str | None, hashes: Sequence[str]
    ) -> Checkpoint | None:
        # A body with no message has no hashes, and no session of its own: no checkpoint.
        if session is None or not hashes:
            return None
        return await self._try(self.store.find_checkpoint(tenant, session, hashes), None)

    async def put_checkpoint(
        self,
        tenant: str,
        session: str | None,
        checkpoint: Checkpoint,
        record: CompactionRecord | None = None,
        recalls: RecallIds | None = None,
    ) -> Checkpoint:
        """The checkpoint kept for the prefix (`checkpoint` itself when the store is down,
        or when there is no session to keep it in); `record` is recorded with it when it is
        the one kept, and `recalls` stored with it (`Store.put_checkpoint`)."""
        if session is None:
            return checkpoint
        call = self.store.put_checkpoint(tenant, session, checkpoint, record, recalls)
        return await self._try(call, checkpoint, write=True)

    async def begin_turn(
        self, tenant: str, session: str | None, model: str | None, at: float
    ) -> SessionState:
        if session is None:
            return SessionState()
        call = self.store.begin_turn(tenant, session, model=model, at=at)
        try:
            return await self._must(call, write=True)
        except SessionNotIndexedError as exc:
            return exc.state  # the turn counted: only its place in the session list is lost
        except StoreUnavailableError:
            return SessionState()

    async def open_turn(
        self, tenant: str, session: str | None, model: str | None, at: float, hashes: Sequence[str]
    ) -> OpenedTurn:
        """`begin_turn` and `find_checkpoint` at once (one round trip to Redis)."""
        if session is None:
            return OpenedTurn(SessionState(), None)
        call = self.store.open_turn(tenant, session, model=model, at=at, hashes=hashes)
        try:
            return await self._must(call, write=True)
        except SessionNotIndexedError as exc:
            # The turn counted and its checkpoint was read: only its place in the session
            # list is lost.
            return OpenedTurn(exc.state, exc.checkpoint)
        except StoreUnavailableError:
            return OpenedTurn(SessionState(), None)

    async def end_turn(self, tenant: str, session: str | None, ended: EndedTurn) -> None:
        """`record_turn`, `archive` and `record_usage` at once (`Store.end_turn`)."""
        if session is not None:
            await self._try(self.store.end_turn(tenant, session, ended), None, write=True)

    async def session(self, tenant: str, session: str | None) -> SessionState | None:
        if session is None:
            return None
        return await self._try(self.store.load_session(tenant, session), None)

    async def last_request(self, tenant: str, session: str | None) -> dict[str, Any] | None:
        """The session's last request without its messages (`EndedTurn.request`); None when
        none is stored (or the store is down)."""
        if session is None:
            return None
        return await self._try(self.store.last_request(tenant, session), None)

    async def record_compaction(
        self, tenant: str, session: str | None, record: CompactionRecord
    ) -> None:
        if session is not None:
            await self._try(self.store.record_compaction(tenant, session, record), None, write=True)

    async def record_usage(
        self, tenant: str, session: str | None, usage: dict[str, object], pressure: float
    ) -> None:
        if session is not None:
            await self._try(
                self.store.record_usage(tenant, session, usage=usage, pressure=pressure),
                None,
                write=True,
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
            await self._try(call, None, write=True)

    async def archive(
        self,
        tenant: str,
        session: str | None,
        messages: Sequence[Message],
        hashes: Sequence[str] | None = None,
    ) -> None:
        if session is not None:
            call = self.store.archive(tenant, session, messages, hashes=hashes)
            await self._try(call, None, write=True)

    async def find_summaries(
        self, tenant: str, session: str | None, keys: Sequence[str]
    ) -> dict[str, str]:
        if session is None:
            return {}
        return await self._try(self.store.find_summaries(tenant, session, keys), {})

    async def find_prepared(
        self, tenant: str, session: str | None, hashes: Sequence[str], keys: Sequence[str]
    ) -> tuple[Checkpoint | None, dict[str, str]]:
        """`find_checkpoint` and `find_summaries` at once (one round trip to Redis)."""
        if session is None:
            return None, {}
        return await self._try(self.store.find_prepared(tenant, session, hashes, keys), (None, {}))

    async def swap_tail(self, tenant: str, session: str, tail: str) -> str | None:
        """Remember this request's tail (`proxy.core.working_set.Seen`, as JSON) and give
        back the previous request's (None when there is none or the store is down: the
        request then has no working set told apart, and is planned as before)."""
        return await self._try(self.store.swap_tail(tenant, session, tail), None, write=True)

    async def put_summary(self, tenant: str, session: str | None, key: str, text: str) -> bool:
        """Whether the summary was stored (False: the store is down, or there is no session
        to keep it for)."""
        if session is None:
            return False
        call = self._stored(lambda: self.store.put_summary(tenant, session, key, text))
        return await self._try(call, False, write=True)

    async def put_recalls(
        self,
        tenant: str,
        session: str | None,
        recalls: Mapping[str, Sequence[str]],
        bodies: Mapping[str, Message],
    ) -> bool:
        """Whether the recall ids were stored (False: no session, or the store is down), so
        the caller keeps content it could not make recallable."""
        if session is None:
            return False
        call = self._stored(lambda: self.store.put_recalls(tenant, session, recalls, bodies))
        return await self._try(call, False, write=True)

    async def recalled(
        self, tenant: str, session: str | None, recall_id: str
    ) -> list[Message] | None:
        """The messages `recall_id` stands for in the session; None when it has no such id.

        Raises `StoreUnavailableError` when the store is down: unlike the other reads, an
        answer of "nothing" would tell the model the id is unknown, not to try again later.
        """
        if session is None:
            return None
        return await self._must(self.store.recalled(tenant, session, recall_id))

    @staticmethod
    async def _stored(call: Callable[[], Awaitable[None]]) -> bool:
        # Made inside: a skipped call closes this coroutine, and leaves none unawaited.
        await call()
        return True

    async def acquire(self, tenant: str, name: str, ttl_s: float) -> str | None:
        # Without the store there is no one to coordinate with: act as the only replica.
        return await self._try(self.store.acquire(tenant, name, ttl_s=ttl_s), "local")

    async def release(self, tenant: str, name: str, token: str) -> None:
        await self._try(self.store.release(tenant, name, token), False)

    # A tenant's model facts change slowly and are read on every request: each replica keeps
    # them for a few seconds instead of asking the store every time; its own writes apply at
    # once. They are the tenant's own: one tenant's responses never teach another's requests.

    async def calibration(self, tenant: str, model: str | None) -> float | None:
        return await self._fact("calibration", tenant, model, self.store.calibration)

    async def set_calibration(self, tenant: str, model: str | None, factor: float) -> None:
        """Remember the tenant's calibration for the model for `learned_ttl_s`.

        This replica uses the new factor at once. The store, which other replicas read at
        most every `FACT_TTL_S`, is written at most that often by this replica, or sooner
        when the factor jumped `CALIBRATION_JUMP` from what it wrote last: the agents of one
        tenant each move the factor a little with every response (their texts count
        differently), and a fleet's replicas writing every move would make the tenant's
        calibration key the busiest in Redis."""
        key = ("calibration", tenant, model or "")
        self._remember(key, factor)
        now = time.monotonic()
        written = self._written.get(key)
        if (
            written is not None
            and now - written[0] < FACT_TTL_S
            and abs(factor - written[1]) < CALIBRATION_JUMP
        ):
            return
        self._written.pop(key, None)
        self._written[key] = (now, factor)
        if len(self._written) > MAX_FACTS:
            del self._written[next(iter(self._written))]
        ttl_s = self._learned_ttl_s
        call = self.store.set_calibration(tenant, model or "", factor, ttl_s=ttl_s)
        await self._try(call, None, write=True)

    async def learned_window(self, tenant: str, model: str | None) -> int | None:
        value = await self._fact("window", tenant, model, self.store.learned_window)
        return int(value) if value is not None else None

    async def learn_window(self, tenant: str, model: str | None, window: int) -> None:
        """Remember the window an overflow taught the tenant for `learned_ttl_s`."""
        self._remember(("window", tenant, model or ""), float(window))
        ttl_s = self._learned_ttl_s
        call = self.store.learn_window(tenant, model or "", window, ttl_s=ttl_s)
        await self._try(call, None, write=True)

    async def _fact(
        self,
        kind: str,
        tenant: str,
        model: str | None,
        read: Callable[[str, str], Coroutine[Any, Any, float | int | None]],
    ) -> float | None:
        key = (kind, tenant, model or "")
        cached = self._facts.get(key)
        if cached is not None and time.monotonic() - cached[0] < FACT_TTL_S:
            return cached[1]
        try:
            value = await self._must(read(tenant, model or ""))
        except StoreUnavailableError:
            # What this replica last knew stands while the store cannot say: forgotten, a
            # calibration of 1.1 would compact as if our counts were the provider's (10 %
            # too loose), a learned window as if the configured one were right.
            return None if cached is None else cached[1]
        return self._remember(key, None if value is None else float(value))

    def _remember(self, key: tuple[str, str, str], value: float | None) -> float | None:
        # One entry per tenant and model: bounded, the least recently written dropped first,
        # so many tenants (or many keys) cannot grow a replica's memory without limit.
        self._facts.pop(key, None)
        self._facts[key] = (time.monotonic(), value)
        if len(self._facts) > MAX_FACTS:
            del self._facts[next(iter(self._facts))]
        return value


def _at(scope: str) -> str:
    """Where an outage is, for the log: nothing for the whole store."""
    return f" (node {scope})" if scope else ""
