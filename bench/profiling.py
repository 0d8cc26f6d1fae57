"""What dominates a missed target: py-spy on the proxy process while the case runs again.

py-spy samples the proxy's Python stacks (only while they run: idle waits are not sampled)
and writes them collapsed, one stack per line with its count. The report gives the share of
samples per function where the time is spent itself (the innermost frame: C calls such as
JSON parsing or hashing count for the Python function that made them; `Runner.run` is
uvloop's event loop itself, in C: sockets, callbacks, waits), per package of that innermost
frame, and per function of the proxy's own code with what it calls. Idle thread-pool workers
are left out.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.cases.overhead import CaseSpec
from bench.load import client_session, run_block
from bench.stack import Stack


@dataclass(frozen=True, slots=True)
class Profile:
    case: str
    samples: int
    self_time: list[tuple[str, float]]
    """(function, share of samples) for the innermost frames, largest first."""
    packages: list[tuple[str, float]]
    proxy_inclusive: list[tuple[str, float]]
    raw: Path


def _frame_parts(frame: str) -> tuple[str, str]:
    """("Turns.begin", "proxy/service/turns.py") from "Turns.begin (proxy/service/turns.py:122)"."""
    name, _, location = frame.rpartition(" (")
    return name, location.rstrip(")").rsplit(":", 1)[0]


# Innermost frames that are waits, not work: an idle worker of a thread pool, blocked in
# its queue (py-spy does not always tell such a thread from a running one).
_IDLE = frozenset({("_worker", "concurrent/futures/thread.py")})
# The command line's frames, under every stack: their inclusive share says nothing.
_ENTRY = ("proxy/cli.py", "proxy/__main__.py")


def _package(path: str) -> str:
    parts = path.split("/")
    if parts[0] == "proxy" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0].removesuffix(".py")


def summarize(raw: Path, case: str, top: int = 12) -> Profile:
    """The shares of a py-spy raw (collapsed stacks) file."""
    own: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_parts(frame) for frame in stack.split(";")]
        name, path = frames[-1]
        if (name, path) in _IDLE:
            continue
        total += count
        own[f"{name} ({path})"] += count
        packages[_package(path)] += count
        own_code = {f"{n} ({p})" for n, p in frames if p.startswith("proxy/") and p not in _ENTRY}
        for proxy_frame in own_code:
            inclusive[proxy_frame] += count
    share = 1 / total if total else 0.0
    return Profile(
        case,
        total,
        [(name, n * share) for name, n in own.most_common(top)],
        [(name, n * share) for name, n in packages.most_common(top)],
        [(name, n * share) for name, n in inclusive.most_common(top)],
        raw,
    )


def py_spy() -> Path | None:
    binary = Path(sys.executable).with_name("py-spy")
    return binary if binary.exists() else None


async def profile_case(spec: CaseSpec, stack: Stack, *, seconds: float, out: Path) -> Profile:
    """Record the proxy for `seconds` while `spec`'s requests are sent to it alone."""
    binary = py_spy()
    if binary is None:
        raise RuntimeError("py-spy is not installed in this virtualenv")
    raw = out / f"profile-{spec.key}.txt"
    duration = str(max(1, round(seconds)))  # py-spy takes whole seconds
    pid = str(stack.proxy.process.pid)
    recorder = await asyncio.create_subprocess_exec(
        str(binary), "record", "-p", pid, "-d", duration, "-r", "250", "-f", "raw",
        "-o", str(raw), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    url = f"{stack.proxy.base_url}/chat/completions"
    batch = max(spec.concurrency * 4, 20)
    finished = asyncio.create_task(recorder.communicate())
    async with client_session(spec.concurrency) as session:
        while not finished.done():
            bodies = spec.source.take("proxy", batch)
            await run_block(session, url, bodies, concurrency=spec.concurrency, stream=spec.stream)
    _, errors = await finished
    if recorder.returncode != 0 or not raw.exists():
        raise RuntimeError(f"py-spy failed: {errors.decode(errors='replace').strip()[-300:]}")
    return summarize(raw, spec.key)
