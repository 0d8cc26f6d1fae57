"""A private redis-server for tests and the bench: a unix socket in a temp folder, never the
machine's."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from tests import optional


class RedisServer:
    """One redis-server process that a test can stop, kill, pause and start again on the same
    socket."""

    def __init__(self, folder: Path) -> None:
        """Raises `FileNotFoundError` when redis-server is not installed (in a test, the rest
        of it counts as optional either way: `tests.optional`)."""
        binary = optional.find("redis-server")
        if binary is None:
            raise FileNotFoundError(optional.TOOLS["redis-server"].missing)
        self._binary = binary
        self._folder = folder
        self.socket = folder / "redis.sock"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        # A killed server leaves its socket file behind: it would look started at once.
        self.socket.unlink(missing_ok=True)
        command = [
            self._binary, "--port", "0", "--unixsocket", str(self.socket),
            "--save", "", "--appendonly", "no", "--dir", str(self._folder),
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        # Until it answers, not until its socket file appears: the file comes a moment before
        # the server listens, and a store that meets a refusal then serves degraded a while.
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.01)

    def _answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(1)
                client.connect(str(self.socket))
                client.sendall(b"PING\r\n")
                return client.recv(7) == b"+PONG\r\n"
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)  # a paused server would not see TERM
            self._process.terminate()
            self._process.wait(10)
            self._process = None
        self.socket.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL: gone at once, as a crash (no clean shutdown, the socket file left)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def pause(self) -> None:
        """SIGSTOP: hung, not down. Connections are accepted by the kernel, never answered."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused server answers again (what was sent meanwhile included)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)
