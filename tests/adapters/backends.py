"""The stores the adapter tests run on: the embedded one and `RedisStore` on real redis-servers.

A test that takes `backend` runs three times: on `MemoryStore`, on a `RedisStore` talking to a
private redis-server on a unix socket, and on a `RedisStore` in cluster mode talking to a
private one-node Redis Cluster (which, like any cluster, refuses multi-key operations across
hash slots, so the key schema's hash tags are checked for real). The machine's own Redis is
never used.

pytest finds a module's fixtures in its namespace, so a test module that takes `backend`
imports all six fixture functions below by name; each is named `<fixture>_fixture`, so that a
test's `backend` argument does not shadow the import. Imported, a fixture is scoped to the
importing module as if defined there (one set of servers and clients per module), and the
autouse `cluster_node` starts with that module.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis

from proxy.adapters.store import MemoryStore, RedisStore, Store, open_store
from proxy.settings import RedisSettings
from tests import optional
from tests.servers import free_port

TTL_S = 1000.0
A = "tenant-a"
B = "tenant-b"

# -- private servers -------------------------------------------------------------------------


def start_redis_server(folder: Path, *args: str) -> subprocess.Popen[bytes]:
    """A redis-server process with `args`, persisting nothing (skips if none is installed)."""
    binary = optional.require("redis-server")
    command = [binary, *args, "--save", "", "--appendonly", "no", "--dir", str(folder)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def wait_until(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.01)


def answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _cluster_ok(client: redis.Redis) -> bool:
    info: dict[str, str] = client.cluster("INFO")
    return info["cluster_state"] == "ok"


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(10)


@pytest.fixture(name="redis_socket", scope="module")
def redis_socket_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private redis-server on a unix socket."""
    folder = tmp_path_factory.mktemp("redis")
    path = folder / "redis.sock"
    process = start_redis_server(folder, "--port", "0", "--unixsocket", str(path))
    try:
        wait_until(path.exists, "redis-server")
        yield path
    finally:
        stop_server(process)


@dataclass
class ClusterNode:
    port: int
    client: redis.Redis


@pytest.fixture(name="cluster_node", scope="module", autouse=True)
def cluster_node_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNode | None]:
    """A private one-node Redis Cluster on loopback, owning all 16384 slots.

    Started with the module, not when first needed: a new cluster node accepts writes only
    two seconds after it starts, and the embedded and single-server tests run meanwhile.
    """
    if optional.find("redis-server") is None:
        yield None
        return
    folder = tmp_path_factory.mktemp("cluster")
    port, bus = free_port(), free_port()
    args = ["--bind", "127.0.0.1", "--port", str(port), "--cluster-enabled", "yes"]
    args += ["--cluster-port", str(bus), "--cluster-config-file", str(folder / "nodes.conf")]
    process = start_redis_server(folder, *args)
    client = redis.Redis(port=port, decode_responses=True)
    try:
        wait_until(lambda: answers(client), "redis-server (cluster)")
        client.cluster("ADDSLOTSRANGE", 0, 16383)
        yield ClusterNode(port, client)
    finally:
        client.close()
        stop_server(process)


@pytest.fixture(name="cluster_port", scope="module")
def cluster_port_fixture(cluster_node: ClusterNode | None) -> int:
    if cluster_node is None:
        optional.skip(optional.TOOLS["redis-server"].missing)
    wait_until(lambda: _cluster_ok(cluster_node.client), "cluster")
    return cluster_node.port


# -- backends --------------------------------------------------------------------------------


class Clock:
    """A clock the test moves by hand, for the embedded store's expiry."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    """A store under test, with the means to look inside it."""

    store: Store
    clock: Clock
    raw: aioredis.Redis | None
    """A plain client on the same server (a one-node cluster serves every slot)."""

    async def wait(self, seconds: float) -> None:
        """Let `seconds` pass: the fake clock for the embedded store, real time for Redis."""
        if self.raw is None:
            self.clock.now += seconds
        else:
            await asyncio.sleep(seconds)

    async def messages_stored(self, tenant: str) -> int:
        if isinstance(self.store, MemoryStore):
            return sum(1 for (owner, _), _text in self.store._messages.live() if owner == tenant)
        assert self.raw is not None
        return len([key async for key in self.raw.scan_iter(match=f"cp:{{m:{tenant}:*")])


@pytest.fixture(name="kind", scope="module", params=["memory", "redis", "cluster"])
def kind_fixture(request: pytest.FixtureRequest) -> str:
    # Module scope makes pytest run each kind's tests together, the cluster's last.
    return str(request.param)


@pytest_asyncio.fixture(name="redis_pair", scope="module", loop_scope="module")
async def redis_pair_fixture(
    kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[RedisStore, aioredis.Redis] | None]:
    """One store per server for the module (a cluster client's start-up costs 80 ms)."""
    if kind == "memory":
        yield None
        return
    if kind == "redis":
        path: Path = request.getfixturevalue("redis_socket")
        settings = RedisSettings(url=f"unix://{path}", session_ttl_s=TTL_S)
        raw = aioredis.Redis(unix_socket_path=str(path), decode_responses=True)
    else:
        port: int = request.getfixturevalue("cluster_port")
        url = f"redis://127.0.0.1:{port}"
        settings = RedisSettings(url=url, mode="cluster", session_ttl_s=TTL_S)
        raw = aioredis.Redis(port=port, decode_responses=True)
    store = open_store(settings)
    assert isinstance(store, RedisStore)
    try:
        yield store, raw
    finally:
        await store.aclose()
        await raw.aclose()


@pytest_asyncio.fixture(name="backend", loop_scope="module")
async def backend_fixture(redis_pair: tuple[RedisStore, aioredis.Redis] | None) -> Backend:
    clock = Clock()
    if redis_pair is None:
        return Backend(MemoryStore(session_ttl_s=TTL_S, clock=clock), clock, None)
    optional.uses("redis-server")  # found once for the module, used by each of its tests
    store, raw = redis_pair
    await raw.flushall()
    store._indexed.clear()  # what it listed is gone with the flush: a new server, as it were
    store._archived.clear()
    return Backend(store, clock, raw)
