"""A private redis-server for tests: a unix socket in a temp folder, never the machine's."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest


class RedisServer:
    """One redis-server process that a test can stop and start again on the same socket."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
        self._binary = binary
        self._folder = folder
        self.socket = folder / "redis.sock"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        command = [
            self._binary, "--port", "0", "--unixsocket", str(self.socket),
            "--save", "", "--appendonly", "no", "--dir", str(self._folder),
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None
        self.socket.unlink(missing_ok=True)
