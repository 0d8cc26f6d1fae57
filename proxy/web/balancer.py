"""`serve --workers N`: N worker processes on one port, each connection handed to the worker
that holds the fewest.

Worker processes that share one listening socket split connections as the kernel wakes
them: a burst of connections (a fleet of agents starting at once, a load balancer opening
its pool) is accepted whole by whichever worker wakes first, since an event loop accepts
every pending connection in one go. Clients keep their connections alive, so the split
lasts: eight agents went 8-0 or 7-1 over two workers in most runs, and two workers served
no more than one. Here the parent process accepts every connection and passes it (its file
descriptor, over a Unix socket) to the worker with the fewest open connections, the rule of
Envoy's exact connection balance; each worker tells the parent how many of its connections
have closed whenever one does. A connection stays with its worker for its life, so a
conversation's requests find that worker's per-message caches warm.

The parent does nothing else: it starts the workers, restarts one that dies, stops them all
on SIGTERM or SIGINT, and exits when a worker cannot start (a broken config or app would
fail the same way on every restart). A worker exits when the parent is gone.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType

import uvicorn

logger = logging.getLogger("proxy")

READY = b"R"
"""A worker's message: its app has started and it takes connections."""
CLOSED = b"C"
"""A worker's message, followed by a number in ASCII: how many of the connections it was
handed have closed."""
HANDOFF = b"H"
"""The parent's message, carrying one accepted connection's descriptor."""

_TICK_S = 0.5
_ACCEPTS_PER_WAKE = 64


@dataclass(slots=True, eq=False)
class _Worker:
    process: BaseProcess
    channel: socket.socket  # the parent's end of a SOCK_SEQPACKET pair
    ready: bool = False  # started and not known to be gone: it takes connections
    started: bool = False  # it said READY once
    open: int = 0  # connections handed to it and not yet closed
    handed: int = 0  # every connection handed to it: ties go to the one handed fewer

    def load(self) -> tuple[int, int]:
        return (self.open, self.handed)


@dataclass(slots=True)
class Balancer:
    """The parent process of `serve --workers N`."""

    config: uvicorn.Config
    count: int
    _workers: list[_Worker] = field(default_factory=list)
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _listener: socket.socket | None = None
    _listening: bool = False
    _resume_at: float = 0.0  # no accepting before (after an accept failed)
    _stopping: bool = False
    _failed: bool = False

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; 0, or 1 when a worker could not start."""
        self._listener = self.config.bind_socket()
        self._listener.listen(self.config.backlog)
        self._listener.setblocking(False)
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        previous_wakeup = signal.set_wakeup_fd(wake_write.fileno())
        handlers = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        self._selector.register(wake_read, selectors.EVENT_READ, None)
        logger.info("started %d workers (parent process %d)", self.count, os.getpid())
        try:
            for _ in range(self.count):
                self._workers.append(self._spawn())
            while not self._stopping:
                self._listen_while_a_worker_is_ready()
                for key, _ in self._selector.select(_TICK_S):
                    if key.fileobj is wake_read:
                        _drain(wake_read)
                    elif key.fileobj is self._listener:
                        self._accept()
                    else:
                        self._read(key.data)
                self._replace_the_dead()
        finally:
            self._listener.close()
            for worker in self._workers:
                _terminate(worker)
            for worker in self._workers:
                worker.process.join()
                worker.channel.close()
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            wake_read.close()
            wake_write.close()
            self._selector.close()
            logger.info("stopped the workers (parent process %d)", os.getpid())
        return 1 if self._failed else 0

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _spawn(self) -> _Worker:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        from proxy.web.workers import run_worker

        context = multiprocessing.get_context("spawn")
        process = context.Process(target=run_worker, args=(self.config, child_end))
        process.start()
        child_end.close()  # pickled for the child when it started: the parent's copy goes
        parent_end.setblocking(False)
        worker = _Worker(process, parent_end)
        self._selector.register(parent_end, selectors.EVENT_READ, worker)
        return worker

    def _listen_while_a_worker_is_ready(self) -> None:
        # With no worker to take them (or after a failed accept), connections wait in the
        # listen backlog.
        assert self._listener is not None
        ready = any(worker.ready for worker in self._workers)
        ready = ready and time.monotonic() >= self._resume_at
        if ready and not self._listening:
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        elif self._listening and not ready:
            self._selector.unregister(self._listener)
        self._listening = ready

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                connection, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: wait a moment, not in a spin
                logger.warning("could not accept a connection: %s", exc)
                self._resume_at = time.monotonic() + _TICK_S
                return
            with connection:
                if connection.family in (socket.AF_INET, socket.AF_INET6):
                    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._hand(connection)

    def _hand(self, connection: socket.socket) -> None:
        """Pass `connection` to the ready worker with the fewest open; the parent's copy is
        closed by the caller (the client is served by the worker's)."""
        for worker in sorted((w for w in self._workers if w.ready), key=_Worker.load):
            try:
                socket.send_fds(worker.channel, [HANDOFF], [connection.fileno()])
            except OSError:
                continue  # gone, or so far behind that its queue is full: the next one
            worker.open += 1
            worker.handed += 1
            return
        logger.warning("no worker could take a connection: it is closed")

    def _read(self, worker: _Worker) -> None:
        while True:
            try:
                message = worker.channel.recv(16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message = b""
            if not message:  # the worker is gone: `_replace_the_dead` restarts it
                self._selector.unregister(worker.channel)
                worker.ready = False
                return
            if message == READY:
                worker.ready = worker.started = True
            elif message.startswith(CLOSED) and message[1:].isdigit():
                worker.open = max(0, worker.handed - int(message[1:]))

    def _replace_the_dead(self) -> None:
        for index, worker in enumerate(self._workers):
            if worker.process.is_alive() or self._stopping:
                continue
            worker.process.join()
            if _registered(self._selector, worker):
                self._selector.unregister(worker.channel)
            worker.channel.close()
            if not worker.started:
                # A broken config, app or store setting fails the same way on every restart.
                logger.error(
                    "worker process %d could not start (exit code %s): stopping",
                    worker.process.pid,
                    worker.process.exitcode,
                )
                self._failed = self._stopping = True
                return
            logger.warning(
                "worker process %d exited (code %s) with %d connections: starting another",
                worker.process.pid,
                worker.process.exitcode,
                worker.open,
            )
            self._workers[index] = self._spawn()


def _registered(selector: selectors.BaseSelector, worker: _Worker) -> bool:
    try:
        selector.get_key(worker.channel)
    except KeyError:
        return False
    return True


def _terminate(worker: _Worker) -> None:
    if worker.process.is_alive() and worker.process.pid is not None:
        os.kill(worker.process.pid, signal.SIGTERM)


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(512):
            pass
    except (BlockingIOError, InterruptedError):
        return
