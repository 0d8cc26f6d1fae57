"""Is the mock fast enough? The fast raw mock beside `proxy.mock_upstream`'s app.

Both serve the same 10k-token chat completions, each in its own process, timed side by side
at concurrency 1 (latency) and 32 (throughput). The overhead cases use the raw mock; this
check shows how much headroom it leaves above the proxy's own throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.conversation import FixedPool
from bench.load import client_session, run_block
from bench.measures import Measure
from bench.processes import free_port, python_module, start
from bench.progress import Progress

RAW, FULL = "raw ASGI mock (bench/mock_server.py)", "proxy.mock_upstream (Starlette)"


@dataclass(slots=True)
class MockCheck:
    latency: dict[str, Measure]
    throughput: dict[str, Measure]


async def check_mocks(
    raw_url: str, pool: FixedPool, *, requests: int, work: Path, progress: Progress
) -> MockCheck:
    port = free_port()
    command = python_module("bench.mock_server", "--port", str(port), "--app", "mock-upstream")
    full = start("mock-upstream", command, port=port, log=work / "mock-upstream.log")
    urls = {RAW: f"{raw_url}/chat/completions", FULL: f"{full.base_url}/chat/completions"}
    check = MockCheck(
        {name: Measure(name) for name in urls}, {name: Measure(name) for name in urls}
    )
    try:
        for concurrency, measures in ((1, check.latency), (32, check.throughput)):
            async with client_session(concurrency) as session:
                for name, url in urls.items():
                    await run_block(session, url, pool.take(name, 50), concurrency=concurrency)
                for _ in range(2):
                    for name, url in urls.items():
                        bodies = pool.take(name, requests // 2)
                        block = await run_block(
                            session, url, bodies, concurrency=concurrency, tick=progress.tick
                        )
                        measures[name].add(block, 0.0, len(bodies))
    finally:
        full.stop()
    return check
