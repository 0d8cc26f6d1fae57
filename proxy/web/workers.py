"""One worker process of `serve --workers N` (N > 1): its app, and its server.

The parent (`proxy.web.balancer`) starts each worker in a fresh process, which builds its app
by importing a factory, so the settings cannot be handed over as an object: the parent leaves
its inputs (the config file and the command-line flags) in the environment, which each worker
inherits with the rest of the environment, and each worker reads them as `serve` did. A
worker has no listening socket: it serves the connections the parent hands it. The workers share
sessions, checkpoints and summaries through Redis (the settings refuse more than one worker
on the embedded store), and their metrics through prometheus-client's multiprocess files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from proxy.observability.logs import configure_logging
from proxy.settings import load_settings
from proxy.web.balancer import CLOSED, READY

_RECOUNT_S = 1.0
WORKER_ARGS = "COMPACTION_PROXY_WORKER_ARGS_JSON"
"""The parent's config path and flags, for its workers (not a settings key)."""


def worker_app() -> FastAPI:
    """The proxy app as `serve` configured it, built in a worker process."""
    from proxy.web import create_app

    given = json.loads(os.environ[WORKER_ARGS])
    config = Path(given["config"]) if given["config"] else None
    settings = load_settings(config, given["overrides"])
    configure_logging(settings.log.level, settings.log.format)
    return create_app(settings, freeze_heap=True)


def run_worker(config: uvicorn.Config, channel: socket.socket) -> None:
    """A worker process's life: serve the connections the parent hands over `channel`."""
    config.configure_logging()
    _Worker(config, channel).run()


class _Worker(uvicorn.Server):
    """uvicorn's server without a listening socket of its own: its connections come from the
    parent (`proxy.web.balancer`), which is told when each one closes."""

    def __init__(self, config: uvicorn.Config, channel: socket.socket) -> None:
        super().__init__(config)
        self._channel = channel
        self._adopting: set[asyncio.Task[None]] = set()  # held: the loop keeps weak ones
        self._received = 0  # connections the parent handed over
        self._reported = 0  # closed connections last reported to the parent

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the app's lifespan; no listener
        config, loop = self.config, asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            served = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )
            return _Counted(served, self._closed)

        self._channel.setblocking(False)
        loop.add_reader(self._channel.fileno(), self._take, loop, protocol)
        self._channel.send(READY)
        loop.call_later(_RECOUNT_S, self._recount, loop)

    def _take(
        self, loop: asyncio.AbstractEventLoop, protocol: Callable[[], asyncio.Protocol]
    ) -> None:
        while True:
            try:
                message, descriptors, _, _ = socket.recv_fds(self._channel, 16, 8)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message, descriptors = b"", []
            if not message:  # the parent is gone: nobody will hand this worker anything
                loop.remove_reader(self._channel.fileno())
                self.should_exit = True
                return
            for descriptor in descriptors:
                self._received += 1
                connection = socket.socket(fileno=descriptor)
                connection.setblocking(False)
                task = loop.create_task(self._adopt(loop, protocol, connection))
                self._adopting.add(task)
                task.add_done_callback(self._adopting.discard)

    async def _adopt(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: Callable[[], asyncio.Protocol],
        connection: socket.socket,
    ) -> None:
        try:
            await loop.connect_accepted_socket(protocol, connection)
        except OSError:
            connection.close()
            self._closed()

    def _closed(self) -> None:
        """Tell the parent how many of the connections it handed over have closed.

        A count, not an event per connection: a connection upgraded to a WebSocket goes on
        under uvicorn's WebSocket protocol, whose end `_Counted` does not see, and the count
        (what uvicorn still serves, taken from what was handed) catches it at the next
        recount. The parent gone, or its queue full: its count errs high, never low."""
        alive = len(self.server_state.connections) + len(self._adopting)
        closed = max(self._reported, self._received - alive)
        if closed != self._reported:
            with contextlib.suppress(OSError):
                self._channel.send(CLOSED + str(closed).encode())
                self._reported = closed

    def _recount(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.should_exit:
            self._closed()
            loop.call_later(_RECOUNT_S, self._recount, loop)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._channel.fileno())
        await super().shutdown(sockets)


class _Counted(asyncio.Protocol):
    """uvicorn's protocol for one connection, and a call to `closed` when it is lost."""

    def __init__(self, served: asyncio.Protocol, closed: Callable[[], None]) -> None:
        self._served = served
        self._closed = closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._served.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._served.data_received(data)

    def eof_received(self) -> bool | None:
        return self._served.eof_received()

    def pause_writing(self) -> None:
        self._served.pause_writing()

    def resume_writing(self) -> None:
        self._served.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._served.connection_lost(exc)
        finally:
            self._closed()
