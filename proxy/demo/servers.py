"""The demo's two servers (the proxy and the mock provider), uvicorn in one event loop.

Both listen on sockets the demo binds itself: so a port of 0 works (the URL is read back
from the socket) and a busy port is found before anything starts.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Final, Literal

import uvicorn
from starlette.types import ASGIApp

HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8080


@contextmanager
def stopped_by_signals(stop: asyncio.Event) -> Iterator[None]:
    """Inside: SIGINT and SIGTERM set `stop` (where the loop can take signals; elsewhere
    Ctrl-C is a KeyboardInterrupt). The demo and `compaction-proxy mock` both stop so."""
    loop = asyncio.get_running_loop()
    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop.set)
        except NotImplementedError:
            continue
        handled.append(signum)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


class PortUnavailableError(Exception):
    """The proxy's port cannot be bound (taken, or not ours to take)."""


class _Server(uvicorn.Server):
    """uvicorn, minus its signal handlers.

    Each server would install its own for SIGINT and SIGTERM, the last one started
    overriding the others, and raise the signal again once stopped. The demo catches the
    signals once, for everything it runs, and stops its servers itself.
    """

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening_socket(port: int | None) -> socket.socket:
    """A socket bound to `port` on loopback; None: 8080, or a free port if 8080 is taken.

    Raises `PortUnavailableError` when it cannot bind.
    """
    try:
        if port is not None:
            return bound(port)
        try:
            return bound(DEFAULT_PORT)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return bound(0)
    except OSError as exc:
        where = f"{HOST}:{DEFAULT_PORT if port is None else port}"
        raise PortUnavailableError(f"cannot listen on {where}: {exc.strerror}") from exc


def bound(port: int, host: str = HOST) -> socket.socket:
    """A socket bound to `host`:`port` (IPv4 or IPv6, as `host` is written)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # Started again right after the last run, it must not wait out TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@asynccontextmanager
async def serve(
    app: ASGIApp, sock: socket.socket, *, lifespan: Literal["on", "off"]
) -> AsyncIterator[str]:
    """Serve `app` on `sock` in this event loop; yields its base URL (no `/v1`)."""
    config = uvicorn.Config(
        app,
        lifespan=lifespan,
        log_level="warning",
        access_log=False,
        ws="none",
        server_header=False,
        date_header=False,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # uvicorn's own error, if it raised one
                raise RuntimeError("the server stopped while starting")
            await asyncio.sleep(0.01)
        host, port = sock.getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
