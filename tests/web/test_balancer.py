"""`serve --workers N`'s parent process: every connection to the worker holding the fewest,
a dead worker replaced, the workers stopped with the parent (and gone without it), and a
worker that cannot start stopping the whole server.

Real processes and sockets throughout: which worker holds a connection is read from
/proc (the server end's socket inode, among each worker's descriptors)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.processes import process_tree
from tests import optional
from tests.redis_server import RedisServer
from tests.servers import COMPACTION_KEY, COMPACTION_KEY_ENV, free_port

optional.skip_unless(
    Path("/proc/net/tcp").exists(), "reads sockets' owners from Linux's /proc/net/tcp"
)


@contextmanager
def _server(
    redis_server: RedisServer, workers: int = 2
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    command = [
        sys.executable, "-m", "proxy", "serve", "--port", str(port), "--workers", str(workers),
        "--upstream", "http://127.0.0.1:9/v1", "--redis", redis_server.url,
    ]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, COMPACTION_KEY_ENV: COMPACTION_KEY})
    try:
        _wait(lambda: _healthy(port) and len(_workers(process.pid)) == workers, process)
        # Every worker is ready when a burst reaches each of them.
        _wait(lambda: _spread(process.pid, port, workers) == workers)
        _quiet(process.pid, port)
        yield process, port
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(20)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _wait(condition: Callable[[], bool], process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        assert time.monotonic() < deadline, "not true after 30 s"
        time.sleep(0.05)


def _workers(pid: int) -> list[int]:
    """The worker processes, a dead one included until the parent has reaped it (not
    multiprocessing's resource tracker)."""
    workers = []
    for child in process_tree(pid)[1:]:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in command:
            workers.append(child)
    return workers


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _quiet(parent: int, port: int) -> None:
    """Wait until the workers hold no connection of `port` and the parent has read that
    they closed: the tests' own probes must not weigh on the split they measure."""
    _wait(lambda: not _port_sockets(port) & _held(parent))
    time.sleep(0.3)  # a worker tells the parent as it closes; the parent reads it next


def _port_sockets(port: int) -> set[str]:
    """The inodes of the sockets on the server's side of `port`'s connections."""
    local = f"0100007F:{port:04X}"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return {row[9] for row in rows if row[1] == local}


def _server_end_inode(port: int, client_port: int) -> str:
    """The inode of the server's end of the loopback connection from `client_port`."""
    local, remote = f"0100007F:{port:04X}", f"0100007F:{client_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2] == remote:
            return fields[9]
    raise AssertionError(f"no server end for client port {client_port}")


def _held(parent: int) -> set[str]:
    """The inodes of every socket the workers hold."""
    return set().union(*(_socket_inodes(pid) for pid in _workers(parent)))


def _holders(parent: int, port: int, connections: list[socket.socket]) -> Counter[int]:
    """How many of `connections` each worker holds."""
    owned = {pid: _socket_inodes(pid) for pid in _workers(parent)}
    held: Counter[int] = Counter()
    for connection in connections:
        inode = _server_end_inode(port, connection.getsockname()[1])
        (holder,) = [pid for pid, inodes in owned.items() if inode in inodes]
        held[holder] += 1
    return held


def _ask(connection: socket.socket) -> bytes:
    """One kept-alive GET /healthz on `connection`; its status line."""
    connection.sendall(b"GET /healthz HTTP/1.1\r\nhost: proxy\r\n\r\n")
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = connection.recv(4096)
        assert chunk, "the connection closed"
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":")[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    while len(body) < length:
        body += connection.recv(4096)
    return head.split(b"\r\n")[0]


def _burst(port: int, count: int) -> list[socket.socket]:
    """`count` connections opened at once, as a fleet starting together opens them, each
    answered once."""
    connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    for connection in connections:
        assert _ask(connection) == b"HTTP/1.1 200 OK"
    return connections


def test_a_burst_of_kept_alive_connections_is_split_evenly(redis_server: RedisServer) -> None:
    with _server(redis_server) as (process, port):
        connections = _burst(port, 8)
        try:
            # Workers sharing a listening socket split such a burst as the kernel woke them:
            # 8-0 or 7-1 in most runs. The parent hands each to the worker holding fewest.
            assert sorted(_holders(process.pid, port, connections).values()) == [4, 4]
            for connection in connections:  # each stays with its worker, and is served
                assert _ask(connection) == b"HTTP/1.1 200 OK"
            held = _holders(process.pid, port, connections[4:])
            closed = {_server_end_inode(port, c.getsockname()[1]) for c in connections[:4]}
            for connection in connections[:4]:
                connection.close()
            # The workers close their ends and tell the parent, which counts them off: the
            # next four connections even the split again.
            _wait(lambda: not closed & _held(process.pid))
            time.sleep(0.3)  # a worker tells the parent as it closes; the parent reads it next
            more = _burst(port, 4)
            after = _holders(process.pid, port, connections[4:] + more)
            assert sorted(after.values()) == [4, 4], (held, after)
            for connection in more:
                connection.close()
        finally:
            for connection in connections:
                connection.close()


def test_a_dead_worker_is_replaced_and_the_others_serve_meanwhile(
    redis_server: RedisServer,
) -> None:
    with _server(redis_server) as (process, port):
        first, second = _workers(process.pid)
        os.kill(first, signal.SIGKILL)
        # A connection handed over in the moment the worker dies dies with it, as one it had
        # accepted would. Once the parent has seen it go, every connection is served: by
        # the worker left while the replacement starts, then by either.
        _wait(lambda: first not in _workers(process.pid))
        for _ in range(6):
            with socket.create_connection(("127.0.0.1", port)) as connection:
                assert _ask(connection) == b"HTTP/1.1 200 OK"
        _wait(lambda: len(_workers(process.pid)) == 2)
        replacement = next(pid for pid in _workers(process.pid) if pid != second)
        _wait(lambda: _served_by(process.pid, port, replacement))
        assert process.poll() is None


def _served_by(parent: int, port: int, worker: int) -> bool:
    connections = _burst(port, 2)
    try:
        return worker in _holders(parent, port, connections)
    finally:
        for connection in connections:
            connection.close()


def _spread(parent: int, port: int, count: int) -> int:
    """Over how many workers a burst of `count` connections went."""
    connections = _burst(port, count)
    try:
        return len(_holders(parent, port, connections))
    finally:
        for connection in connections:
            connection.close()


def test_sigterm_stops_the_parent_and_every_worker(redis_server: RedisServer) -> None:
    with _server(redis_server) as (process, _):
        workers = _workers(process.pid)
        process.terminate()
        assert process.wait(20) == 0
    assert not any(_alive(pid) for pid in workers)


def test_workers_exit_when_the_parent_is_killed(redis_server: RedisServer) -> None:
    with _server(redis_server) as (process, port):
        workers = _workers(process.pid)
        process.kill()
        process.wait(10)
        _wait(lambda: not any(_alive(pid) for pid in workers))
        assert not _healthy(port)


def _broken_app() -> object:
    raise RuntimeError("this app cannot start")


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    # The app (its config, its store settings) fails the same way in every worker and on
    # every restart: the parent exits instead of restarting workers forever.
    script = (
        "import sys, uvicorn\n"
        "from proxy.web.balancer import Balancer\n"
        f"config = uvicorn.Config('{__name__}:_broken_app', factory=True, port={free_port()})\n"
        "sys.exit(Balancer(config, 2).run())\n"
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "could not start" in result.stderr
    assert time.monotonic() - started < 30
