"""The servers a benchmark runs, each its own process, and what they cost (from /proc).

CPU time is the run time of the process's threads and of its descendants', read before and
after a block of requests: from /proc/PID/task/*/schedstat (nanoseconds), else `utime +
stime` of /proc/PID/stat (clock ticks, 10 ms). Peak memory is
`VmHWM`, the resident set's high-water mark; it is reset before each case where the kernel
allows (writing 5 to /proc/PID/clear_refs), so each case reports its own peak.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
# LiteLLM's proxy takes tens of seconds to start on this machine; ours about two.
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending += _children(current)
    return tree


def _scheduled_seconds(pid: int) -> float | None:
    """Run time of the process's live threads in nanoseconds' precision (schedstat), or None
    when the kernel does not keep it."""
    total = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9 if total else None


def _cpu_seconds(pid: int) -> float:
    scheduled = _scheduled_seconds(pid)
    if scheduled is not None:
        return scheduled
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name is in parentheses and may hold spaces: split after it.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _status_kib(pid: int, key: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


@dataclass(slots=True)
class ProcessMeter:
    """CPU and peak memory of one server process (and any workers it started)."""

    pid: int

    def cpu_seconds(self) -> float:
        return sum(_cpu_seconds(pid) for pid in process_tree(self.pid))

    def peak_rss_mib(self) -> float:
        return sum(_status_kib(pid, "VmHWM") for pid in process_tree(self.pid)) / 1024

    def reset_peak(self) -> bool:
        """Start a new high-water mark; False when the kernel does not allow it."""
        done = True
        for pid in process_tree(self.pid):
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                done = False
        return done


@dataclass(slots=True)
class Server:
    """A server process started by the suite, with its base URL (ending in /v1)."""

    name: str
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path
    meter: ProcessMeter = field(init=False)

    def __post_init__(self) -> None:
        self.meter = ProcessMeter(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class StartError(RuntimeError):
    """A server did not come up; the message says why, with the end of its log."""


def start(
    name: str,
    command: Sequence[str],
    *,
    port: int,
    log: Path,
    ready_path: str = "/v1/models",
    env: dict[str, str] | None = None,
) -> Server:
    """Start `command` (which serves on `port`) and wait until GET `ready_path` answers."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(command), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    server = Server(name, f"http://127.0.0.1:{port}/v1", process, log)
    try:
        _wait_ready(server, f"http://127.0.0.1:{port}{ready_path}", START_TIMEOUT_S)
    except StartError:
        server.stop()
        raise
    return server


def _wait_ready(server: Server, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise StartError(
                f"{server.name} exited with code {server.process.returncode}: {tail(server.log)}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise StartError(
        f"{server.name} did not answer {url} within {timeout_s:.0f} s: {tail(server.log)}"
    )


def tail(log: Path, lines: int = 6) -> str:
    """The last lines of a log, on one line, for an error message."""
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:]) or "(empty log)"


def python_module(module: str, *args: str) -> list[str]:
    """A command running `python -m module args` with this interpreter."""
    return [sys.executable, "-m", module, *args]
