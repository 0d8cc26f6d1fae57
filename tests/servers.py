"""Real servers on loopback sockets, for tests where the wire itself matters."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Literal

import httpx
import uvicorn
from starlette.types import ASGIApp

COMPACTION_KEY_ENV = "COMPACTION_PROXY_RESPONSES__COMPACTION_KEY"
COMPACTION_KEY = "test-compaction-key-of-32-bytes!!"


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port another socket is listening on, for as long as the block runs."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def free_port() -> int:
    """A port that was free a moment ago (for servers we cannot hand a socket to)."""
    with _bound_socket() as sock:
        return int(sock.getsockname()[1])


def _server(app: ASGIApp, ws: Literal["none", "auto"] = "none") -> uvicorn.Server:
    config = uvicorn.Config(
        app, log_level="warning", ws=ws, lifespan="on", server_header=False, date_header=False
    )
    return uvicorn.Server(config)


@asynccontextmanager
async def serve(app: ASGIApp, *, ws: Literal["none", "auto"] = "none") -> AsyncIterator[str]:
    """Serve `app` with uvicorn in this event loop; yields its base URL. WebSockets only with
    `ws="auto"`, as `compaction-proxy serve` has them; without, uvicorn hands a WebSocket
    handshake to the app as a plain request."""
    sock = _bound_socket()
    server = _server(app, ws)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[str]:
    """Serve `app` with uvicorn on its own thread and loop, for synchronous clients."""
    sock = _bound_socket()
    server = _server(app)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.005)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def proxy_process(
    args: Sequence[str], env: dict[str, str] | None = None, stderr: IO[bytes] | None = None
) -> Iterator[str]:
    """Run `compaction-proxy serve ARGS` as its own process; yields its base URL. Its log
    goes to `stderr` when given, else to the test's. Its compaction key is the tests' own
    unless `env` sets one (in front of a mock, the proxy answers compaction requests, and
    refuses to start on a shared store without a key)."""
    port = free_port()
    command = [sys.executable, "-m", "proxy", "serve", "--port", str(port), *args]
    environment = {**os.environ, COMPACTION_KEY_ENV: COMPACTION_KEY, **(env or {})}
    process = subprocess.Popen(command, env=environment, stderr=stderr)
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, base_url)
        yield base_url
    finally:
        process.terminate()
        process.wait(10)


def _wait_healthy(process: subprocess.Popen[bytes], base_url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"compaction-proxy exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("compaction-proxy did not become healthy")


async def until(condition: Callable[[], bool], *, timeout_s: float) -> None:
    """Wait for `condition` (work in another process or thread), failing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout_s} s"
        await asyncio.sleep(0.05)
