"""The Redis store (`RedisStore`): single, Sentinel or Cluster, shared by every replica.

Conversations, not tenants, are the unit of sharding: every key of one conversation shares
its hash tag (`{s:<tenant>:<session>}`), so its Lua scripts and multi-key reads are valid
in a cluster and one tenant's conversations spread over every master. What a tenant's
conversations share (archived message bodies, locks, learned model facts) is one key per
item with a tag of its own, the tenant always in its name: no tenant can name another's
key. Redis key schema (values are JSON unless noted; `{...}` is the hash tag):

    cp:{s:<tenant>:<session>}:state      hash: turns, last_compaction_turn, model,
                                         last_seen, last_pressure, last_usage (JSON),
                                         compactions, tokens_sent, tokens_forwarded,
                                         recalls, last_context (JSON),
                                         archive_tip (a digest of the archive list)
    cp:{s:<tenant>:<session>}:history    list: the last 100 CompactionRecords
    cp:{s:<tenant>:<session>}:archive    list: content hashes of the archived messages
    cp:{s:<tenant>:<session>}:timeline   list: the last 200 TurnPoints
    cp:{s:<tenant>:<session>}:request    the last request's body without its messages
    cp:{s:<tenant>:<session>}:recall     hash: recall id -> JSON list of the content hashes
                                         it stands for, set once per id (their bodies are
                                         the tenant's msg keys)
    cp:{s:<tenant>:<session>}:refreshed  "1" for a tenth of the TTL after the archive last
                                         moved its bodies' expiry (they are not walked on
                                         every request)
    cp:{s:<tenant>:<session>}:checkpoints
                                         hash: prefix hash -> a Checkpoint of the session;
                                         the longest of a body's prefixes is found by one
                                         script given the body's chain hashes as one
                                         argument (a request's history is not sent as a
                                         hundred keys)
    cp:{s:<tenant>:<session>}:checkpoint_order
                                         list: those prefix hashes, oldest first; past
                                         `MAX_CHECKPOINTS` the oldest checkpoint goes
    cp:{s:<tenant>:<session>}:summary:<key>
                                         a summary prepared for the session's next
                                         compaction (`proxy.core.prepared` names the key)
    cp:{m:<tenant>:<content_hash>}       an archived message, stored once per tenant
    cp:{l:<tenant>:<name>}               a lock: its holder's random token (string)
    cp:{f:<tenant>:<model>}:calibration  float (string): the tenant's calibration for the
                                         model; expires after context.learned_ttl_s
    cp:{f:<tenant>:<model>}:window       int (string): the window an overflow error of the
                                         tenant's taught; expires after learned_ttl_s too
    cp:{t:<tenant>}:sessions             sorted set: session id by last_seen. One key per
                                         tenant, on one master: a sorted set is read
                                         whole from one node, and `begin_turn` writes it
                                         beside the session, so its node failing loses
                                         index updates, not turns (SessionNotIndexedError)
    cp:sessions                          sorted set: ["<tenant>", "<session>"] by last_seen,
                                         for the admin's cross-tenant list (no expiry; its
                                         members older than the TTL are pruned on write)

Keys of the schema before conversations were the unit (`cp:{t:<tenant>}:ckpt:*`, `:msg:*`,
`:summary:*`, `:lock:*`, `:calibration:*`, `:window:*` and the sessions' `:seq`) are
abandoned, never read: they expire with their TTL, as do a session's `:ckpt:<prefix>` keys
of the first conversation schema. A session archived under the old schema archives its
messages again at its next request (its `:archive` list starts empty); its checkpoints and
prepared summaries are made again; recall ids made before keep their hashes
but find no bodies.

Several keys of different tags are written in one round trip per master (`Call.batch`: a
pipeline per node, side by side; one pipeline on a single Redis), never as one script or
transaction. A script runs by EVALSHA on its keys' node, and by EVAL there the first time
(never SCRIPT LOAD, which a cluster client sends to every node, a dead one included).
`last_seen` is the caller's `at`: Unix time in seconds. How a failed node is told apart from
the others, and left alone until it or its replica answers: `nodes.py`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

import xxhash
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster, Sentinel
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.adapters.store import scripts
from proxy.adapters.store.contract import (
    DEFAULT_SESSION_TTL_S,
    HISTORY_LIMIT,
    TIMELINE_LIMIT,
    WHOLE,
    EndedTurn,
    OpenedTurn,
    RecallIds,
    SessionNotIndexedError,
    StoreUnavailableError,
    content_hashes,
)
from proxy.adapters.store.nodes import Call, Nodes, Op, RedisClient
from proxy.adapters.store.watch import PATIENCE, LoopClock, Watch
from proxy.core import jsoncodec
from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    find_checkpoint,
)
from proxy.settings import RedisSettings

_ALL_SESSIONS = "cp:sessions"
# The archive moves the expiry of the bodies it already stored at most once per this share
# of the TTL: they outlive their session's last request by at least nine tenths of it.
_REFRESH_SHARE = 0.1
_FAILURES = (RedisError, RedisClusterException, OSError, TimeoutError)
# A session's place in the indexes is moved at most this often by one replica (its state's
# `last_seen` is always exact), for at most this many sessions remembered.
_INDEX_EVERY_S = 10.0
# Checkpoints kept per session, the oldest dropped first: a conversation forwards over its
# latest; older ones serve only a client that resends an older history (a retry, a fork).
MAX_CHECKPOINTS = 16
_INDEXED_KEPT = 100_000


@contextmanager
def _unavailable(blame: Callable[[], str] = lambda: WHOLE) -> Iterator[None]:
    """Re-raise any Redis failure as `StoreUnavailableError` of the scope `blame` names."""
    try:
        yield
    except StoreUnavailableError:
        raise
    except _FAILURES as exc:
        raise StoreUnavailableError(f"Redis is not usable: {exc}", scope=blame()) from exc


def _tag(tenant: str, session_id: str) -> str:
    return f"cp:{{s:{tenant}:{session_id}}}"


def _session_keys(tenant: str, session_id: str) -> list[str]:
    """The session's state, history, archive, timeline, request and recall keys (in that
    order).

    The session's scripts refresh every one of them, so its recall ids live as long as it.
    """
    tag = _tag(tenant, session_id)
    names = ("state", "history", "archive", "timeline", "request", "recall")
    return [f"{tag}:{name}" for name in names]


def _checkpoint_keys(tenant: str, session_id: str) -> list[str]:
    """The session's checkpoints and their order."""
    tag = _tag(tenant, session_id)
    return [f"{tag}:checkpoints", f"{tag}:checkpoint_order"]


def _summary_key(tenant: str, session_id: str, key: str) -> str:
    return f"{_tag(tenant, session_id)}:summary:{key}"


def _refreshed_key(tenant: str, session_id: str) -> str:
    return f"{_tag(tenant, session_id)}:refreshed"


def _message_key(tenant: str, digest: str) -> str:
    """An archived message: a tag of its own, so a tenant's messages spread over the
    cluster; the tenant in its name, so no tenant reads another's."""
    return f"cp:{{m:{tenant}:{digest}}}"


def _lock_key(tenant: str, name: str) -> str:
    return f"cp:{{l:{tenant}:{name}}}"


def _model_key(tenant: str, model: str, fact: str) -> str:
    """A fact learned about `model` from `tenant`'s requests (both facts under one tag)."""
    return f"cp:{{f:{tenant}:{model}}}:{fact}"


def _tenant_index(tenant: str) -> str:
    return f"cp:{{t:{tenant}}}:sessions"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _optional(kind: Callable[[str], Any], value: str | None) -> Any:
    return None if value is None else kind(value)


def _state(fields: Mapping[str, str], history: Sequence[str]) -> SessionState:
    """A SessionState from the state hash and the history list."""
    usage, context = fields.get("last_usage"), fields.get("last_context")
    return SessionState(
        turns=int(fields.get("turns", 0)),
        last_compaction_turn=_optional(int, fields.get("last_compaction_turn")),
        model=fields.get("model"),
        last_seen=_optional(float, fields.get("last_seen")),
        last_pressure=_optional(float, fields.get("last_pressure")),
        last_usage=None if usage is None else json.loads(usage),
        history=tuple(CompactionRecord.from_json(json.loads(item)) for item in history),
        compactions=int(fields.get("compactions", 0)),
        tokens_sent=int(fields.get("tokens_sent", 0)),
        tokens_forwarded=int(fields.get("tokens_forwarded", 0)),
        recalls=int(fields.get("recalls", 0)),
        last_context=None if context is None else json.loads(context),
    )


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    """HGETALL as a Lua script returns it (k1, v1, k2, v2...) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _messages(bodies: Sequence[str | None]) -> list[Message]:
    """The bodies that are still there, as messages (an expired one is skipped)."""
    return [json.loads(body) for body in bodies if body is not None]


def _turn_args(
    point: TurnPoint, context: Mapping[str, Any], request: Mapping[str, Any] | None
) -> tuple[Any, ...]:
    """`scripts.RECORD_TURN`'s arguments after the TTL (and `scripts.END_TURN`'s)."""
    return (
        json.dumps(point.to_json()),
        TIMELINE_LIMIT,
        point.tokens_before,
        point.tokens_after,
        repr(point.pressure),
        json.dumps(dict(context)),
        "" if request is None else json.dumps(dict(request)),
        point.recalls,
    )


def _tip(joined: str) -> str:
    """What names an archived sequence of hashes (joined by commas): its digest."""
    return xxhash.xxh3_128_hexdigest(joined.encode())


@dataclass(frozen=True, slots=True)
class _Claim:
    """A sequence to archive (its hashes `joined`, named by `tip`), and what the replica
    claims the session's archive holds already: its first `length` hashes, named by
    `old_tip`, the rest starting at character `offset` (1-based, as Lua counts). `count`
    hashes in all."""

    joined: str
    tip: str
    count: int
    length: int = 0
    old_tip: str = ""
    offset: int = 1

    @property
    def args(self) -> tuple[str | int, ...]:
        """`_SEQUENCE`'s arguments from `joined` on."""
        return (self.joined, self.length, self.old_tip, self.tip, self.offset)


@dataclass(frozen=True, slots=True)
class _Unindexed:
    """Why a counted turn's session could not be indexed, and where."""

    cause: BaseException
    scope: str

    def error(self, state: SessionState, checkpoint: Checkpoint | None) -> SessionNotIndexedError:
        fenced = isinstance(self.cause, StoreUnavailableError) and self.cause.fenced
        error = SessionNotIndexedError(
            f"the session was not indexed: {self.cause}",
            scope=self.scope,
            state=state,
            checkpoint=checkpoint,
            fenced=fenced,
        )
        error.__cause__ = self.cause
        return error


class RedisStore:
    """A store on Redis (single, Sentinel or Cluster), shared by every replica using it."""

    def __init__(
        self,
        client: RedisClient,
        *,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        sentinel: Sentinel | None = None,
        timeout_s: float = 2.0,
        max_connections: int = 256,
    ) -> None:
        """`client` must decode responses; `sentinel` (if any) is closed with the store.
        A call ends after `timeout_s` of silence from Redis (see `watch.py`); `max_connections`
        calls run at once, the others wait for their turn."""
        self._client = client
        self._nodes = Nodes(client)
        self._sentinel = sentinel
        self._timeout_s = timeout_s
        self._clock = LoopClock(timeout_s)
        # Backpressure in every mode: the client's pool never has to refuse a connection
        # (redis-py's non-blocking pools raise "Too many connections" past their size, which
        # would lose the write), a call waits for its turn instead.
        self._slots = asyncio.Semaphore(max_connections)
        self._shas = {text: hashlib.sha1(text.encode()).hexdigest() for text in scripts.SCRIPTS}
        self._ttl_s = session_ttl_s
        self._ttl_ms = _ms(session_ttl_s)
        self._refresh_ms = _ms(session_ttl_s * _REFRESH_SHARE)
        # When this replica last listed each session in the indexes (`at`), so that it lists
        # a busy one again only every `_INDEX_EVERY_S`: five commands on two other nodes per
        # request bought an order to the second in the admin's list, which nobody reads.
        self._indexed: OrderedDict[tuple[str, str], float] = OrderedDict()
        # How long each session's archived sequence was when this replica last wrote it, and
        # its last hash: the bodies after that are sent with the turn's script, in its round
        # trip, instead of after it once the script says which are new (`end_turn`).
        self._archived: OrderedDict[tuple[str, str], tuple[int, str]] = OrderedDict()

    @classmethod
    def connect(cls, settings: RedisSettings) -> RedisStore:
        """A store on the client `settings.mode` selects; connects on first use."""
        # redis-py's own connect timeout and pool wait are the backstop; `_call` applies
        # `timeout_s` itself.
        backstop = settings.timeout_s * PATIENCE
        size = settings.max_connections
        limits: dict[str, Any] = {
            "session_ttl_s": settings.session_ttl_s,
            "timeout_s": settings.timeout_s,
            "max_connections": size,
        }
        if settings.mode == "cluster":
            # No retry: redis-py retries a cluster pipeline that met a dead node by closing
            # every connection to every node (the calls in flight to healthy masters too)
            # and sleeping 0.25 s. A failed call is blamed on its node instead (`nodes.py`).
            options = _client_options(backstop, retries=0)
            client = RedisCluster.from_url(settings.url, max_connections=size, **options)
            return cls(client, **limits)
        options = _client_options(backstop)
        if settings.mode == "sentinel":
            sentinel = Sentinel(  # type: ignore[no-untyped-call]
                settings.sentinel_addresses(),
                sentinel_kwargs={k: v for k, v in options.items() if k != "decode_responses"},
                **options,
            )
            master = sentinel.master_for(
                settings.sentinel_master, max_connections=size, **_master_credentials(settings.url)
            )
            return cls(master, sentinel=sentinel, **limits)
        # A blocking pool: a call past the limit waits for a free connection rather than fail
        # (redis-py's default pool raises at 100 connections, losing that call's write).
        pool = BlockingConnectionPool.from_url(
            settings.url, max_connections=size, timeout=backstop, **options
        )
        return cls(Redis.from_pool(pool), **limits)

    @asynccontextmanager
    async def _call(self) -> AsyncIterator[Call]:
        """One call to Redis: its turn, then all of it (a connection, connecting, the reply,
        the retry) under one `Watch`; any failure raised as `StoreUnavailableError` of the
        place that failed (`Call.scope`)."""
        # The wait for a turn is not bounded by `timeout_s`: under a burst it is the proxy
        # that is busy, not Redis, and a turn comes. A call that timed out meanwhile says
        # its node is hung: then a leg there fails at once instead of waiting a timeout more.
        loop = asyncio.get_running_loop()
        call = Call(self._nodes, self._clock, began=loop.time())
        with _unavailable(call.scope):
            async with self._slots:
                # One bound for the whole call: the socket timeout applies to each attempt
                # and the pool's wait on top, so a hung Redis would cost several of it.
                try:
                    async with asyncio.timeout(None) as deadline:
                        watch = Watch(deadline, self._timeout_s, self._clock, call.heard)
                        try:
                            await self._nodes.ready(call)
                            yield call
                        finally:
                            watch.cancel()
                except (TimeoutError, RedisTimeoutError):
                    self._nodes.timed_out(call.failed, loop.time())
                    raise

    async def _script(self, script: str, keys: Sequence[str], *args: Any) -> Any:
        """`script` run on the node serving `keys`, by its SHA once that node knows it."""
        try:
            return await self._client.evalsha(self._shas[script], len(keys), *keys, *args)
        except NoScriptError:
            # EVAL caches the script on the node that ran it. Not SCRIPT LOAD (what redis-py's
            # scripts do): a cluster client sends it to every node, a dead one included, and
            # every call meeting a node that had not run the script yet would fail with it.
            return await self._client.eval(script, len(keys), *keys, *args)

    async def ping(self, scope: str = WHOLE) -> None:
        async with self._call() as call:
            await self._nodes.ping(call, scope)

    def fence(self, scope: str, *, down: bool) -> None:
        self._nodes.fence(scope, down=down)

    async def aclose(self) -> None:
        with _unavailable():
            await self._client.aclose()
            if self._sentinel is not None:
                await self._sentinel.aclose()

    async def find_checkpoint(
        self, tenant: str, session_id: str, hashes: Sequence[str]
    ) -> Checkpoint | None:
        if not hashes:
            return None
        keys = _checkpoint_keys(tenant, session_id)
        client = self._client
        async with self._call() as call:
            longest = await call.on(
                keys[0],
                lambda: self._script(scripts.FIND_CHECKPOINT, keys, self._ttl_ms, ",".join(hashes)),
            )
            if longest is None:
                return None
            covered, text = longest
            first = Checkpoint.from_json(jsoncodec.loads(text))
            if first.covered == covered:
                return first
            # Its prefix's length is not its own (no chain hash collides in practice): the
            # longest that is right, as `find_checkpoint` tells them apart, from all of them.
            values = await call.on(keys[0], lambda: client.hmget(keys[0], list(hashes)))
        candidates = {
            h: Checkpoint.from_json(jsoncodec.loads(value))
            for h, value in zip(hashes, values, strict=True)
            if value is not None
        }
        return find_checkpoint(hashes, candidates)

    async def put_checkpoint(
        self,
        tenant: str,
        session_id: str,
        checkpoint: Checkpoint,
        record: CompactionRecord | None = None,
        recalls: RecallIds | None = None,
    ) -> Checkpoint:
        keys = _checkpoint_keys(tenant, session_id)
        text = json.dumps(checkpoint.to_json())
        args: tuple[Any, ...] = (self._ttl_ms, checkpoint.prefix_hash, text, MAX_CHECKPOINTS)
        if record is not None:
            # The session's state, history and archive, as `scripts.RECORD_COMPACTION` has them.
            keys = [*keys, *_session_keys(tenant, session_id)[:3]]
            args = (*args, json.dumps(record.to_json()), HISTORY_LIMIT)
        # The recall ids and bodies in the same round trip (a pipeline per node).
        ops = [
            Op.script(self._shas[scripts.PUT_CHECKPOINT], keys, args),
            *(self._recall_ops(tenant, session_id, recalls.ids, recalls.bodies) if recalls else ()),
        ]
        async with self._call() as call:
            existing = (await self._batch(call, ops, {0: scripts.PUT_CHECKPOINT}))[0]
        if existing is None:
            return checkpoint
        return Checkpoint.from_json(jsoncodec.loads(existing))

    async def drop_checkpoint(self, tenant: str, session_id: str, prefix_hash: str) -> bool:
        keys = _checkpoint_keys(tenant, session_id)
        async with self._call() as call:
            deleted = await call.on(
                keys[0], lambda: self._script(scripts.DROP_CHECKPOINT, keys, prefix_hash)
            )
        return bool(deleted)

    async def begin_turn(
        self, tenant: str, session_id: str, *, model: str | None, at: float
    ) -> SessionState:
        keys = _session_keys(tenant, session_id)
        args = (self._ttl_ms, repr(at), "0" if model is None else "1", model or "")
        (fields, history), unindexed = await self._counted(
            tenant, session_id, at, scripts.BEGIN_TURN, keys, args
        )
        state = _state(_pairs(fields), history)
        if unindexed is not None:
            raise unindexed.error(state, None)
        return state

    async def open_turn(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None,
        at: float,
        hashes: Sequence[str],
    ) -> OpenedTurn:
        keys = [*_session_keys(tenant, session_id), *_checkpoint_keys(tenant, session_id)]
        args = (
            self._ttl_ms,
            repr(at),
            "0" if model is None else "1",
            model or "",
            ",".join(hashes),
        )
        (fields, history, longest), unindexed = await self._counted(
            tenant, session_id, at, scripts.OPEN_TURN, keys, args
        )
        state = _state(_pairs(fields), history)
        checkpoint = await self._longest(tenant, session_id, hashes, longest)
        if unindexed is not None:
            raise unindexed.error(state, checkpoint)
        return OpenedTurn(state, checkpoint)

    async def _longest(
        self, tenant: str, session_id: str, hashes: Sequence[str], longest: Any
    ) -> Checkpoint | None:
        """The checkpoint `_LONGEST` returned (its prefix's length and its JSON, or None)."""
        if longest is None:
            return None
        covered, text = longest
        checkpoint = Checkpoint.from_json(jsoncodec.loads(text))
        if checkpoint.covered == covered:
            return checkpoint
        # Its prefix's length is not its own (no chain hash collides in practice): the
        # longest that is right, as `find_checkpoint` tells them apart.
        return await self.find_checkpoint(tenant, session_id, hashes)

    async def _counted(
        self,
        tenant: str,
        session_id: str,
        at: float,
        script: str,
        keys: Sequence[str],
        args: Sequence[Any],
    ) -> tuple[Any, _Unindexed | None]:
        """The reply of a script that counts a turn, run with the session's indexes when
        they are due; and why they could not be written, if so."""

        name = (tenant, session_id)
        due = at - self._indexed.get(name, -math.inf) >= _INDEX_EVERY_S
        async with self._call() as call:
            began = await call.on(keys[0], lambda: self._script(script, keys, *args))
            if not due:
                return began, None
            # Then the indexes, on their nodes, in the same call: one connection at a time
            # (a call holding two could leave every holder of a turn waiting on the pool for
            # a connection another one holds), a round trip more once every
            # `_INDEX_EVERY_S` per session. The turn is what the request needs; an index not
            # updated loses only the session's place in the list until its next turn.
            try:
                await call.batch(self._index(tenant, session_id, at))
            except StoreUnavailableError as failed:
                return began, _Unindexed(failed, failed.scope)
            except _FAILURES as failed:
                return began, _Unindexed(failed, call.scope())
        self._indexed[name] = at
        self._indexed.move_to_end(name)
        if len(self._indexed) > _INDEXED_KEPT:
            self._indexed.popitem(last=False)
        return began, None

    def _index(self, tenant: str, session_id: str, at: float) -> list[Op]:
        """List the session under `at`, in its tenant's index and the global one."""
        tenant_index = _tenant_index(tenant)
        stale = at - self._ttl_s
        member = json.dumps([tenant, session_id])
        return [
            Op("zadd", tenant_index, ({session_id: at},)),
            Op("zremrangebyscore", tenant_index, ("-inf", stale)),
            Op("pexpire", tenant_index, (self._ttl_ms,)),
            Op("zadd", _ALL_SESSIONS, ({member: at},)),
            Op("zremrangebyscore", _ALL_SESSIONS, ("-inf", stale)),
        ]

    async def record_compaction(
        self, tenant: str, session_id: str, record: CompactionRecord
    ) -> None:
        keys = _session_keys(tenant, session_id)
        args = (self._ttl_ms, json.dumps(record.to_json()), HISTORY_LIMIT)
        async with self._call() as call:
            await call.on(keys[0], lambda: self._script(scripts.RECORD_COMPACTION, keys, *args))

    async def record_usage(
        self, tenant: str, session_id: str, *, usage: Mapping[str, Any], pressure: float
    ) -> None:
        keys = _session_keys(tenant, session_id)
        args = (self._ttl_ms, json.dumps(dict(usage)), repr(pressure))
        async with self._call() as call:
            await call.on(keys[0], lambda: self._script(scripts.RECORD_USAGE, keys, *args))

    async def record_turn(
        self,
        tenant: str,
        session_id: str,
        point: TurnPoint,
        *,
        context: Mapping[str, Any],
        request: Mapping[str, Any] | None = None,
    ) -> None:
        keys = _session_keys(tenant, session_id)
        args = (self._ttl_ms, *_turn_args(point, context, request))
        async with self._call() as call:
            await call.on(keys[0], lambda: self._script(scripts.RECORD_TURN, keys, *args))

    async def end_turn(self, tenant: str, session_id: str, ended: EndedTurn) -> None:
        keys = [*_session_keys(tenant, session_id), _refreshed_key(tenant, session_id)]
        messages = ended.messages
        sequence = content_hashes(messages, ended.hashes) if messages else ()
        claim = self._claim(tenant, session_id, sequence)
        args = (
            *_turn_args(ended.point, ended.context, ended.request),
            "" if ended.usage is None else json.dumps(dict(ended.usage)),
            self._refresh_ms,
            *claim.args,
        )
        # The bodies past what this replica archived of the session last time go with the
        # script, in one round trip (a pipeline per node): a growing history's new messages.
        # The script's answer is the truth: bodies it counts as new that were not sent
        # (another replica's turns, a rewind) follow; any sent that it knew are set-if-absent.
        ops = [
            Op.script(self._shas[scripts.END_TURN], keys, (self._ttl_ms, *args)),
            *self._bodies(tenant, sequence, messages, claim.length, due=0),
        ]
        async with self._call() as call:
            replies = await self._batch(call, ops, {0: scripts.END_TURN})
            if sequence:
                known, due = replies[0]
                rest = self._bodies(
                    tenant, sequence[: claim.length], messages[: claim.length], known, due
                )
                if rest:
                    await call.batch(rest)
        if sequence:
            self._remember_archived(tenant, session_id, claim)

    def _claim(self, tenant: str, session_id: str, sequence: Sequence[str]) -> _Claim:
        """`sequence` joined, and how much of it this replica archived last time for the
        session as far as it can tell (what it archived then, when it is a prefix of this)."""
        joined = ",".join(sequence)
        tip = _tip(joined) if sequence else ""
        length, old_tip = self._archived.get((tenant, session_id), (0, ""))
        if 0 < length <= len(sequence):
            chars = sum(map(len, sequence[:length])) + length - 1
            if _tip(joined[:chars]) == old_tip:
                return _Claim(joined, tip, len(sequence), length, old_tip, chars + 2)
        return _Claim(joined, tip, len(sequence))

    def _remember_archived(self, tenant: str, session_id: str, claim: _Claim) -> None:
        name = (tenant, session_id)
        self._archived[name] = (claim.count, claim.tip)
        self._archived.move_to_end(name)
        if len(self._archived) > _INDEXED_KEPT:
            self._archived.popitem(last=False)

    async def _batch(self, call: Call, ops: Sequence[Op], scripts: Mapping[int, str]) -> list[Any]:
        """`call.batch(ops)`, where the ops at `scripts`' indexes are `Op.script`s of those
        scripts: one the place did not know yet is run again by EVAL there, which teaches it."""
        replies = await call.batch(ops)
        for index, script in scripts.items():
            if isinstance(replies[index], NoScriptError):
                replies[index] = await self._taught(call, ops[index], script)
        return replies

    async def _taught(self, call: Call, op: Op, script: str) -> Any:
        """`op`'s script run by EVAL on its place (which then knows it)."""
        return await call.on(op.key, lambda: self._client.eval(script, *op.args[1:]))

    async def timeline(self, tenant: str, session_id: str) -> list[TurnPoint]:
        timeline_key = _session_keys(tenant, session_id)[3]
        async with self._call() as call:
            found = await call.on(timeline_key, lambda: self._client.lrange(timeline_key, 0, -1))
        items = cast("list[str]", found)
        return [TurnPoint.from_json(json.loads(item)) for item in items]

    async def last_request(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        request_key = _session_keys(tenant, session_id)[4]
        async with self._call() as call:
            text = await call.on(request_key, lambda: self._client.get(request_key))
        if text is None:
            return None
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    async def load_session(self, tenant: str, session_id: str) -> SessionState | None:
        state, history, *_rest = _session_keys(tenant, session_id)
        async with self._call() as call:
            fields, records = await call.on(
                state, lambda: self._script(scripts.READ_SESSION, [state, history])
            )
        return _state(_pairs(fields), records) if fields else None

    async def list_sessions(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[tuple[str, str, SessionState]]:
        if limit <= 0:
            return []
        index = _ALL_SESSIONS if tenant is None else _tenant_index(tenant)
        async with self._call() as call:
            found = await call.on(
                index, lambda: self._client.zrevrange(index, offset, offset + limit - 1)
            )
            members = cast("list[str]", found)
            names = [_member(tenant, member) for member in members]
            states = await self._load_many(call, names)
            gone = [name for name, state in zip(names, states, strict=True) if state is None]
            if gone:
                await call.batch(_unindex(gone))
                for name in gone:
                    self._indexed.pop(name, None)
        return [
            (owner, session_id, state)
            for (owner, session_id), state in zip(names, states, strict=True)
            if state is not None
        ]

    async def _load_many(
        self, call: Call, names: Sequence[tuple[str, str]]
    ) -> list[SessionState | None]:
        """The states of many sessions in one round trip (by node, in a cluster)."""
        ops: list[Op] = []
        for tenant, session_id in names:
            state, history, *_rest = _session_keys(tenant, session_id)
            ops += [Op("hgetall", state), Op("lrange", history, (0, -1))]
        replies = await call.batch(ops)
        pairs = zip(replies[::2], replies[1::2], strict=True)
        return [_state(fields, history) if fields else None for fields, history in pairs]

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        keys = [*_session_keys(tenant, session_id), _refreshed_key(tenant, session_id)]
        async with self._call() as call:
            deleted = await call.on(keys[0], lambda: self._client.delete(*keys))
            self._indexed.pop((tenant, session_id), None)  # listed again at its next turn
            await call.batch(_unindex([(tenant, session_id)]))
        return bool(deleted)

    async def archive(
        self,
        tenant: str,
        session_id: str,
        messages: Sequence[Message],
        *,
        hashes: Sequence[str] | None = None,
    ) -> None:
        if not messages:
            return
        hashes = content_hashes(messages, hashes)
        state, history, seq, *_rest = _session_keys(tenant, session_id)
        keys = [seq, state, history, _refreshed_key(tenant, session_id)]
        claim = self._claim(tenant, session_id, hashes)
        args = (self._ttl_ms, self._refresh_ms, *claim.args)
        async with self._call() as call:
            known, due = await call.on(
                seq, lambda: self._script(scripts.ARCHIVE_SEQUENCE, keys, *args)
            )
            await call.batch(self._bodies(tenant, hashes, messages, known, due))
        self._remember_archived(tenant, session_id, claim)

    def _bodies(
        self,
        tenant: str,
        hashes: Sequence[str],
        messages: Sequence[Message],
        known: int,
        due: int,
    ) -> list[Op]:
        """The writes of the archived bodies a sequence whose first `known` hashes were
        archived before needs; with the known ones' expiry moved when `due`."""
        # The sequence first: bodies of its known part are stored already (or expired,
        # which `archived` tolerates); only the rest travel. Set if absent, as the
        # embedded store: a body another session stored keeps its text, and its expiry
        # moves.
        ttl = self._ttl_ms
        ops: list[Op] = []
        for digest, message in zip(hashes[known:], messages[known:], strict=True):
            key = _message_key(tenant, digest)
            ops.append(Op("set", key, (json.dumps(message),), {"nx": True, "px": ttl}))
            ops.append(Op("pexpire", key, (ttl,)))
        if due:
            ops += [Op("pexpire", _message_key(tenant, h), (ttl,)) for h in hashes[:known]]
        return ops

    async def archived(self, tenant: str, session_id: str) -> list[Message]:
        seq = _session_keys(tenant, session_id)[2]
        async with self._call() as call:
            found = await call.on(seq, lambda: self._client.lrange(seq, 0, -1))
            hashes = cast("list[str]", found)
            bodies = await call.batch([Op("get", _message_key(tenant, h)) for h in hashes])
        return _messages(bodies)

    async def put_recalls(
        self,
        tenant: str,
        session_id: str,
        recalls: Mapping[str, Sequence[str]],
        bodies: Mapping[str, Message],
    ) -> None:
        if not recalls and not bodies:
            return
        ops = self._recall_ops(tenant, session_id, recalls, bodies)
        async with self._call() as call:
            await call.batch(ops)

    def _recall_ops(
        self,
        tenant: str,
        session_id: str,
        recalls: Mapping[str, Sequence[str]],
        bodies: Mapping[str, Message],
    ) -> list[Op]:
        recall_key = _session_keys(tenant, session_id)[5]
        # Many hash tags (the session's, each body's): pipelines, not a transaction nor a
        # script. HSETNX and SET NX are each atomic: an id keeps the hashes first written
        # for it, a stored body is not rewritten.
        ops = [
            Op("hsetnx", recall_key, (recall_id, json.dumps(list(hashes))))
            for recall_id, hashes in recalls.items()
        ]
        if recalls:
            ops.append(Op("pexpire", recall_key, (self._ttl_ms,)))
        ops += [
            Op(
                "set",
                _message_key(tenant, digest),
                (json.dumps(message),),
                {"nx": True, "px": self._ttl_ms},
            )
            for digest, message in bodies.items()
        ]
        return ops

    async def recalled(self, tenant: str, session_id: str, recall_id: str) -> list[Message] | None:
        recall_key = _session_keys(tenant, session_id)[5]
        async with self._call() as call:
            listed = await call.on(recall_key, lambda: self._client.hget(recall_key, recall_id))
            if listed is None:
                return None
            hashes: list[str] = json.loads(listed)
            bodies = await call.batch([Op("get", _message_key(tenant, h)) for h in hashes])
        return _messages(bodies)

    async def put_summary(self, tenant: str, session_id: str, key: str, text: str) -> None:
        name = _summary_key(tenant, session_id, key)
        async with self._call() as call:
            await call.on(name, lambda: self._client.set(name, text, px=self._ttl_ms))

    async def find_summaries(
        self, tenant: str, session_id: str, keys: Sequence[str]
    ) -> dict[str, str]:
        if not keys:
            return {}
        names = [_summary_key(tenant, session_id, key) for key in keys]
        async with self._call() as call:
            values = await call.on(names[0], lambda: self._client.mget(names))
        return {
            key: str(value) for key, value in zip(keys, values, strict=True) if value is not None
        }

    async def swap_tail(self, tenant: str, session_id: str, tail: str) -> str | None:
        name = f"{_tag(tenant, session_id)}:tail"
        async with self._call() as call:
            # SET ... GET (Redis 6.2): the old value back and the new one set, atomically.
            old = await call.on(
                name, lambda: self._client.set(name, tail, px=self._ttl_ms, get=True)
            )
        return None if old is None else str(old)

    async def find_prepared(
        self, tenant: str, session_id: str, hashes: Sequence[str], keys: Sequence[str]
    ) -> tuple[Checkpoint | None, dict[str, str]]:
        names = [_summary_key(tenant, session_id, key) for key in keys]
        script_keys = [*_checkpoint_keys(tenant, session_id), *names]
        args = (self._ttl_ms, ",".join(hashes))
        async with self._call() as call:
            longest, values = await call.on(
                script_keys[0], lambda: self._script(scripts.FIND_PREPARED, script_keys, *args)
            )
        summaries = {
            key: str(value) for key, value in zip(keys, values, strict=True) if value is not None
        }
        return await self._longest(tenant, session_id, hashes, longest), summaries

    async def acquire(self, tenant: str, name: str, *, ttl_s: float) -> str | None:
        token = secrets.token_hex(16)
        key = _lock_key(tenant, name)
        async with self._call() as call:
            taken = await call.on(key, lambda: self._client.set(key, token, nx=True, px=_ms(ttl_s)))
        return token if taken else None

    async def release(self, tenant: str, name: str, token: str) -> bool:
        key = _lock_key(tenant, name)
        async with self._call() as call:
            deleted = await call.on(key, lambda: self._script(scripts.RELEASE, [key], token))
        return bool(deleted)

    async def calibration(self, tenant: str, model: str) -> float | None:
        value = await self._get(_model_key(tenant, model, "calibration"))
        return None if value is None else float(value)

    async def set_calibration(
        self, tenant: str, model: str, factor: float, *, ttl_s: float
    ) -> None:
        await self._set(_model_key(tenant, model, "calibration"), repr(factor), ttl_s)

    async def learned_window(self, tenant: str, model: str) -> int | None:
        value = await self._get(_model_key(tenant, model, "window"))
        return None if value is None else int(value)

    async def learn_window(self, tenant: str, model: str, window: int, *, ttl_s: float) -> None:
        await self._set(_model_key(tenant, model, "window"), str(window), ttl_s)

    async def _get(self, key: str) -> str | None:
        async with self._call() as call:
            value = await call.on(key, lambda: self._client.get(key))
        return cast("str | None", value)

    async def _set(self, key: str, value: str, ttl_s: float) -> None:
        async with self._call() as call:
            await call.on(key, lambda: self._client.set(key, value, px=_ms(ttl_s)))


def _unindex(names: Sequence[tuple[str, str]]) -> list[Op]:
    """Take the sessions `names` out of their tenants' indexes and the global one."""
    ops: list[Op] = []
    for tenant, session_id in names:
        ops.append(Op("zrem", _tenant_index(tenant), (session_id,)))
        ops.append(Op("zrem", _ALL_SESSIONS, (json.dumps([tenant, session_id]),)))
    return ops


def _member(tenant: str | None, member: str) -> tuple[str, str]:
    """(tenant, session id) of an index member: a session id, or JSON in the global index."""
    if tenant is not None:
        return tenant, member
    owner, session_id = json.loads(member)
    return owner, session_id


def _client_options(timeout_s: float, *, retries: int = 1) -> dict[str, Any]:
    """Connection options for every client, bounding how long a request waits on Redis."""
    return {
        # No socket timeout: `_call` bounds every call itself, its reads and writes included.
        # redis-py writes each command under `asyncio.wait_for` when one is set, a task per
        # command: under load every call waited a lap of the event loop behind every other
        # request before its bytes left, as long again as the wait for Redis's reply.
        "socket_timeout": None,
        "socket_connect_timeout": timeout_s,
        # redis-py retries 10 times by default, which would turn a down Redis into a 20 s
        # wait per call: one quick retry still heals a connection Redis closed while idle.
        # Not after a timeout: a Redis that did not answer in time will not in a retry.
        "retry": Retry(
            ExponentialWithJitterBackoff(cap=0.1, base=0.01),
            retries=retries,
            supported_errors=(RedisConnectionError,),
        ),
        "decode_responses": True,
    }


def _master_credentials(url: str) -> dict[str, Any]:
    """Username, password and db for the Sentinel-announced master, from `redis.url`."""
    if not url:
        return {}
    parsed: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    wanted: dict[str, Any] = {
        key: parsed[key] for key in ("username", "password", "db") if key in parsed
    }
    if url.startswith("rediss://"):
        wanted["ssl"] = True
    return wanted
