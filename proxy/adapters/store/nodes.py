"""Where each Redis call goes, and what the Redis store knows of each place.

A single Redis, or the master Sentinel names, is one place: `WHOLE`. A Redis Cluster is one
place per master, named `host:port` as redis-py names its nodes; a key goes where the
client's slot map says its hash slot is served. A call to the store is made of legs, each
on one place (`Call.on`, `Call.at`, and `Call.batch`, which runs one pipeline per place side
by side), so that:

- a failure is blamed on the place that failed (`Call.scope`): the node a leg was sent to,
  or the nodes still silent when the call timed out; the whole store when it cannot tell;
- a place the breaker fenced off (`Nodes.fence`) or that timed out on another call since
  this one began fails a leg at once, before anything is sent: calls for the other places
  go on, and none waits on a dead node first;
- a call waits past `timeout_s` only while the places it waits on answer other calls
  (`Call.heard`): a dead master does not make calls to healthy ones wait, nor the reverse.

- a failure is blamed on the whole store when the cluster as a whole refuses (CLUSTERDOWN)
  or no slot map with a master for every slot can be learned.

A node's probe (`Nodes.ping`) learns the slot map again first: once the cluster has promoted
a replica, the dead node serves no slot and its keys answer at the new master. The slot map
is learned here, never by redis-py behind a call (`Nodes.ready`): redis-py's own learning
asks its default node for the command table too, and drops every connection to every node
when anything in it fails.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.cluster import PRIMARY
from redis.exceptions import (
    ClusterDownError,
    DataError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.adapters.store.contract import WHOLE, StoreUnavailableError
from proxy.adapters.store.watch import LoopClock

RedisClient = Redis | RedisCluster

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Op:
    """One command of a batch, on one key: `pipe.<name>(key, *args, **options)`."""

    name: str
    key: str
    args: tuple[Any, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def script(cls, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Op:
        """A script run by its SHA on the place of its keys (one hash tag). Its reply is a
        `NoScriptError` when that place does not know the script yet: run it by EVAL then."""
        return cls(_EVALSHA, keys[0], (sha, len(keys), *keys, *args))


class Nodes:
    """The places of one client: which serves a key, which are fenced off, when each last
    answered and last timed out (the event loop's clock)."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._fenced: set[str] = set()
        self._answered: dict[str, float] = {}
        self._timed_out: dict[str, float] = {}
        # Whether the cluster client has learned the slot map once: redis-py 8's async cluster
        # client breaks connections when several calls make it learn the map at once (the
        # first burst of calls failed with "Connection closed by server"), so one call does.
        self._learned = self._cluster is None
        self._learning = asyncio.Lock()

    async def ready(self, call: Call) -> None:
        """Learn the cluster's slot map before a call that needs it: once at first, and again
        after redis-py marked it stale (a node refused or timed out)."""
        cluster = self._cluster
        if cluster is None or (self._learned and not cluster._initialize):
            return
        async with self._learning:
            if not self._learned:
                await call.at(WHOLE, cluster.initialize)
                self._learned = True
            elif cluster._initialize:
                # Learned here, not by redis-py on its next command: redis-py would also ask
                # its default node (the first master, a dead one as likely as any) for its
                # command table, and on any failure drop every connection to every node,
                # the calls in flight to healthy masters included. The slot map alone, asked
                # of the nodes not fenced first, fails without harm while a dead master's
                # slots are served by no one; then the call fails, blamed whole.
                fenced = next(iter(self._fenced), None)
                await call.at(
                    WHOLE, lambda: cluster.nodes_manager.initialize(last_failed_node_name=fenced)
                )
                cluster._initialize = False

    def pipeline(self) -> Any:
        """A pipeline (not a transaction) of this client."""
        client = self.client
        if isinstance(client, Redis):
            return _Pipeline(client.connection_pool, client.response_callbacks, False, None)
        return client.pipeline(transaction=False)

    def of(self, key: str) -> str:
        """The place serving `key`: its master in a cluster whose slot map the client has
        learned, else `WHOLE`."""
        if self._cluster is None:
            return WHOLE
        try:
            node = self._cluster.get_node_from_key(key)
        except SlotNotCoveredError:
            return WHOLE  # no slot map yet: the call learns it, and is blamed whole
        return WHOLE if node is None else node.name

    def fence(self, scope: str, *, down: bool) -> None:
        if scope == WHOLE:
            return
        if down:
            self._fenced.add(scope)
        else:
            self._fenced.discard(scope)

    def check(self, node: str, began: float) -> None:
        """Raise `StoreUnavailableError` for `node` when it is fenced, or timed out on another
        call since `began`: a call there would only wait for the same failure."""
        if node in self._fenced:
            raise StoreUnavailableError(f"Redis node {node} is down", scope=node, fenced=True)
        if self._timed_out.get(node, -math.inf) > began:
            raise StoreUnavailableError(
                f"Redis{_at(node)} timed out on another call meanwhile", scope=node
            )

    def answered(self, node: str, at: float) -> None:
        self._answered[node] = at

    def last_answered(self, node: str) -> float:
        return self._answered.get(node, -math.inf)

    def timed_out(self, nodes: set[str], at: float) -> None:
        for node in nodes:
            self._timed_out[node] = at

    async def ping(self, call: Call, scope: str) -> None:
        """Check `scope` answers (see `Store.ping`); raises `StoreUnavailableError`."""
        cluster = self._cluster
        if cluster is None:
            await call.at(WHOLE, self.client.ping)
        elif scope == WHOLE:
            await self._serving(call, cluster)
        else:
            await self._node_back(call, cluster, scope)

    async def _serving(self, call: Call, cluster: RedisCluster) -> None:
        """The cluster as a whole serves: its slot map can be learned (a master for every
        slot), and a master not fenced off says the cluster's state is ok (a PING of any
        node would answer while the cluster refuses every key).

        Not learned again when known: every time redis-py learns it, it has every pooled
        connection reconnect, and readiness asks this every few seconds."""
        if not self._learned or cluster._initialize:
            await self.ready(call)
        masters = [node for node in cluster.get_primaries() if node.name not in self._fenced]
        if not masters:
            raise StoreUnavailableError("no master of the Redis Cluster is reachable")
        master = masters[0]
        info = await call.at(master.name, lambda: master.execute_command("CLUSTER INFO"))
        state = info.get("cluster_state") if isinstance(info, dict) else None
        if state != "ok":
            raise StoreUnavailableError(f"the Redis Cluster's state is {state}")

    async def _node_back(self, call: Call, cluster: RedisCluster, scope: str) -> None:
        # Asked of the other nodes first (the failed one last). A master the cluster has
        # replaced is no longer listed, and its slots are served by the promoted replica;
        # while it is only marked failed its slots are served by no one, and this fails.
        manager = cluster.nodes_manager
        await call.at(WHOLE, lambda: manager.initialize(last_failed_node_name=scope))
        node = cluster.get_node(node_name=scope)
        if node is None or node.server_type != PRIMARY:
            return
        # Asked of the node itself, not through the client: a refusal there would make the
        # client learn the slot map again on its next call, which fails (and drops every
        # connection, to healthy nodes too) while the failed master's slots are unserved.
        await call.at(scope, lambda: node.execute_command("PING"), fenced=True)


class Call:
    """One call to the store: the places it waits on now, and those that failed it."""

    def __init__(self, nodes: Nodes, clock: LoopClock, *, began: float) -> None:
        """`began`: the loop's time (as `Nodes.timed_out` is told); `clock` tells when a
        place answered, in the time the proxy could hear it (`watch.py`)."""
        self._nodes = nodes
        self._clock = clock
        self._began = began
        self._waiting: dict[str, int] = {}
        self.failed: set[str] = set()
        """The places whose legs raised or were still waited on when the call ended."""

    def scope(self) -> str:
        """The place to blame for the call's failure: the one that failed, else `WHOLE`."""
        return next(iter(self.failed)) if len(self.failed) == 1 else WHOLE

    def heard(self) -> float:
        """When the place this call waits on that has been silent longest last answered
        (now, when the call waits on no place: its time is the proxy's, not Redis's)."""
        waiting = [node for node, legs in self._waiting.items() if legs]
        if not waiting:
            return self._clock.now()
        return min(self._nodes.last_answered(node) for node in waiting)

    async def on(self, key: str, make: Callable[[], Awaitable[_T]]) -> _T:
        """`make()`'s value, made on the place serving `key` (every key it touches is
        there: one hash tag)."""
        return await self.at(self._nodes.of(key), make)

    async def at(self, node: str, make: Callable[[], Awaitable[_T]], *, fenced: bool = False) -> _T:
        """`make()`'s value, made on `node`; at once a `StoreUnavailableError` when the node
        cannot answer (`Nodes.check`), unless `fenced` (a probe asks it anyway)."""
        if not fenced:
            self._check(node)
        self._waiting[node] = self._waiting.get(node, 0) + 1
        try:
            value = await make()
        except AttributeError as exc:
            # After a node refused, redis-py's cluster client closes that node's idle
            # connections in the background, and one taken for a call meanwhile is written to
            # after it closed (its writer gone): the node failed, not the proxy.
            self.failed.add(node)
            raise RedisConnectionError(f"a connection to {node} closed under the call") from exc
        except BaseException as exc:
            # A refusal, a reset, or a cancellation by the call's timeout while waiting here.
            # A cluster that refuses every key (CLUSTERDOWN), or whose slot map the client
            # could not learn (a slot without a master), is down as a whole.
            whole = isinstance(exc, ClusterDownError | RedisClusterException)
            self.failed.add(WHOLE if whole else node)
            raise
        finally:
            self._waiting[node] -= 1
        self._nodes.answered(node, self._clock.now())
        return value

    def _check(self, node: str) -> None:
        try:
            self._nodes.check(node, self._began)
        except StoreUnavailableError:
            self.failed.add(node)
            raise

    async def batch(self, ops: Sequence[Op]) -> list[Any]:
        """The replies to `ops`, in order: one pipeline per place (not a transaction), the
        places side by side. Nothing is sent when a place cannot answer; a failed place
        fails the batch, the others' commands are done."""
        groups: dict[str, list[int]] = {}
        for index, op in enumerate(ops):
            groups.setdefault(self._nodes.of(op.key), []).append(index)
        for node in groups:
            self._check(node)
        replies: list[Any] = [None] * len(ops)

        async def run(indexes: Sequence[int]) -> None:
            pipe = self._nodes.pipeline()
            for index in indexes:
                _queue(pipe, ops[index])
            answered = await pipe.execute(raise_on_error=False)
            for index, reply in zip(indexes, answered, strict=True):
                replies[index] = _checked(reply)

        legs = [
            self.at(node, partial(run, indexes), fenced=True) for node, indexes in groups.items()
        ]
        if len(legs) <= 1:  # a single Redis, or nothing to do: no task to make
            for leg in legs:
                await leg
            return replies
        done = await asyncio.gather(*legs, return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return replies


_EVALSHA = "EVALSHA"


def _checked(reply: Any) -> Any:
    """A pipeline's reply to one op. A script the place does not know is the caller's to
    run again; any other error fails the batch, as the pipeline would have raised it."""
    if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
        raise reply
    return reply


class _Pipeline(Pipeline):
    """redis-py's pipeline (of a single Redis, or the master Sentinel names), sent and read
    here: one write of the commands packed at once, their replies read in order, with the
    client's retry (one, for a connection Redis closed while idle).

    redis-py's own `execute` packs each argument through its encoder, times and counts the
    batch for its observability hooks, and gives the connection back under `asyncio.shield`,
    a task of its own, to keep a second cancellation from splitting the pool's bookkeeping
    mid-update; the call then waits a lap of the event loop for that task, as long under
    load as the wait for the reply. Here the connection goes back at once (the pool's
    release does not suspend: an uncontended lock, so nothing can cancel it halfway), and a
    turn's write costs a third less CPU. These pipelines never WATCH nor MULTI."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack, self.command_stack = self.command_stack, []
        if not stack:
            return []
        pool = self.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        packed = _packed([args for args, _ in stack])

        async def exchange() -> list[Any]:
            await connection.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for args, options in stack:
                try:
                    replies.append(await self.parse_response(connection, args[0], **options))
                except ResponseError as error:
                    replies.append(error)
            return replies

        async def failed(error: BaseException) -> None:
            await connection.disconnect()

        try:
            # A failed or cancelled send or read has closed the connection already (redis-py's
            # connection does on any error): the pool reconnects it before its next use.
            replies: list[Any] = await connection.retry.call_with_retry(exchange, failed)
        finally:
            await pool.release(connection)
        if raise_on_error:
            self.raise_first_error(stack, replies)
        return replies


def _packed(commands: Sequence[Sequence[Any]]) -> bytes:
    """`commands` in Redis's protocol (RESP), each argument encoded as redis-py's encoder
    would (text as UTF-8, numbers as their repr, bytes as they are)."""
    out: list[bytes] = []
    for args in commands:
        out.append(b"*%d\r\n" % len(args))
        for arg in args:
            data = _encoded(arg)
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _encoded(arg: Any) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, int | float) and not isinstance(arg, bool):
        return repr(arg).encode()
    raise DataError(f"Invalid input of type: {type(arg).__name__!r}")


def _queue(pipe: Any, op: Op) -> None:
    """Add `op` to a pipeline. A script as a raw command: the cluster pipeline refuses its
    `evalsha` method (a script's keys could span slots), while ours keep to one hash tag,
    which it routes like any command's keys."""
    if op.name == _EVALSHA:
        pipe.execute_command(_EVALSHA, *op.args)
    else:
        getattr(pipe, op.name)(op.key, *op.args, **op.options)


def _at(node: str) -> str:
    return f" node {node}" if node else ""
