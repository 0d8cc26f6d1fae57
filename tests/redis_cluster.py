"""A private Redis Cluster for tests: masters with their replicas, on loopback ports of its own.

Built by hand (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE), so only redis-server is needed, never
the machine's Redis. Each node has its cluster bus on a port of its own (the default, port +
10000, may not be free). `cluster-require-full-coverage no`, as docs/operations.md advises:
while a dead master's replica is being promoted, the other masters serve their slots.

A test kills a master (`kill`: SIGKILL, as a crash) and waits for the cluster to promote its
replica (`wait_for_failover`); `keys_by_master` counts where the keys went.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests import optional
from tests.servers import free_port

SLOTS = 16384


@dataclass
class Node:
    port: int
    bus: int
    process: subprocess.Popen[bytes] | None

    @property
    def name(self) -> str:
        """As redis-py names it (`host:port`)."""
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)


class LocalCluster:
    """`masters` masters with `replicas` replicas each, started by `start`, gone at `stop`."""

    def __init__(
        self, folder: Path, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        """Raises `FileNotFoundError` when redis-server is not installed."""
        binary = optional.find("redis-server")
        if binary is None:
            raise FileNotFoundError(optional.TOOLS["redis-server"].missing)
        self._binary = binary
        self._folder = folder
        self._masters = masters
        self._replicas = replicas
        self._node_timeout_ms = node_timeout_ms
        self.nodes: list[Node] = []

    @property
    def url(self) -> str:
        """A startup node for a client (the client learns the others from it)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> None:
        count = self._masters * (1 + self._replicas)
        self.nodes = []
        for _ in range(count):
            self.nodes.append(self._started())
        masters = self.nodes[: self._masters]
        step = SLOTS // self._masters
        for index, node in enumerate(masters):
            last = SLOTS - 1 if index == self._masters - 1 else (index + 1) * step - 1
            with node.client() as client:
                client.execute_command("CLUSTER ADDSLOTSRANGE", index * step, last)
        with self.nodes[0].client() as first:
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER MEET", "127.0.0.1", node.port, node.bus)
        ids = [self._id(node) for node in masters]
        _until(lambda: all(self._knows(node, len(self.nodes)) for node in self.nodes), "MEET")
        for index, node in enumerate(self.nodes[self._masters :]):
            with node.client() as client:
                client.execute_command("CLUSTER REPLICATE", ids[index % self._masters])
        _until(self._healthy, "the cluster")

    def _started(self) -> Node:
        """A node that answers. A port free a moment ago can be taken by then (the suite's
        own client sockets draw from the same range): a node that exits is started again on
        other ports, and the error says why the last one exited."""
        for _ in range(5):
            node = self._spawn(free_port(), free_port())
            deadline = time.monotonic() + 20
            while node.process is not None and node.process.poll() is None:
                if _answers(node):
                    return node
                if time.monotonic() > deadline:
                    self.kill(node)
                    break
                time.sleep(0.05)
        log = self._folder / f"node-{node.port}.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        raise RuntimeError(f"redis-server did not come up on :{node.port}:\n{tail}")

    def _spawn(self, port: int, bus: int) -> Node:
        command = [
            self._binary, "--bind", "127.0.0.1", "--port", str(port),
            "--cluster-enabled", "yes", "--cluster-port", str(bus),
            "--cluster-config-file", f"nodes-{port}.conf",
            "--cluster-node-timeout", str(self._node_timeout_ms),
            "--cluster-require-full-coverage", "no",
            "--save", "", "--appendonly", "no", "--dir", str(self._folder),
            "--logfile", f"node-{port}.log",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        return Node(port, bus, process)

    def _id(self, node: Node) -> str:
        with node.client() as client:
            return str(client.execute_command("CLUSTER MYID"))

    def _knows(self, node: Node, count: int) -> bool:
        with node.client() as client:
            known: dict[str, dict[str, str]] = client.execute_command("CLUSTER NODES")
        flags = [entry["flags"] for entry in known.values()]
        return len(flags) == count and not any("handshake" in flag for flag in flags)

    def _healthy(self) -> bool:
        """Every live node says the cluster is ok, and every replica has synced."""
        for node in self.live():
            with node.client() as client:
                if client.cluster("INFO")["cluster_state"] != "ok":
                    return False
                info = client.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
        return len(self.masters()) == self._masters

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.process is not None]

    def masters(self) -> list[Node]:
        """The live nodes that serve slots now (as the first live node sees the cluster)."""
        with self.live()[0].client() as client:
            shards = client.execute_command("CLUSTER SLOTS")
        ports = {int(shard[2][1]) for shard in shards}
        return [node for node in self.live() if node.port in ports]

    def master_of(self, key: str) -> Node:
        """The node serving `key` now."""
        with self.live()[0].client() as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        return self.master_of_slot(slot)

    def master_of_slot(self, slot: int) -> Node:
        """The node serving `slot` now."""
        with self.live()[0].client() as client:
            shards = client.execute_command("CLUSTER SLOTS")
        port = next(int(s[2][1]) for s in shards if int(s[0]) <= slot <= int(s[1]))
        return next(node for node in self.nodes if node.port == port)

    def keys_by_master(self, match: str = "*") -> dict[str, int]:
        """How many keys matching `match` each master holds, by node name."""
        counts: dict[str, int] = {}
        for node in self.masters():
            with node.client() as client:
                counts[node.name] = sum(1 for _ in client.scan_iter(match=match, count=1000))
        return counts

    def kill(self, node: Node) -> None:
        """SIGKILL: gone at once, as a crash (no clean shutdown, nothing saved)."""
        if node.process is not None:
            node.process.kill()
            node.process.wait(10)
            node.process = None

    def wait_for_failover(self, dead: Node, timeout_s: float = 30) -> Node:
        """The replica the cluster promoted in `dead`'s place, once every slot is served
        again (while `dead` is only marked failed, its slots are served by no one)."""
        _until(lambda: self._covered_without(dead), f"the failover of :{dead.port}", timeout_s)
        return next(node for node in self.masters() if node not in self.nodes[: self._masters])

    def _covered_without(self, dead: Node) -> bool:
        for node in self.live():
            with node.client() as client:
                shards = client.execute_command("CLUSTER SLOTS")
            served = sum(int(s[1]) - int(s[0]) + 1 for s in shards if int(s[2][1]) != dead.port)
            if served != SLOTS:
                return False
        return True

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                node.process.terminate()
                node.process.wait(10)
                node.process = None


@contextmanager
def local_cluster(folder: Path, **options: int) -> Iterator[LocalCluster]:
    """A started `LocalCluster` (the test is skipped when redis-server is not installed)."""
    try:
        cluster = LocalCluster(folder, **options)
    except FileNotFoundError as exc:
        optional.skip(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _answers(node: Node) -> bool:
    try:
        with node.client() as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def _until(ready: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up")
        time.sleep(0.05)
