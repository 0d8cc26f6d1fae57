"""What does the proxy add? The same requests sent directly and through the proxy.

Starts the fast local server of `http_client.py` and a `compaction-proxy serve` in front of
it (separate processes), then alternates rounds of direct and proxied requests from one
aiohttp client: latency percentiles at concurrency 1, throughput at a higher concurrency.
A first look; the full benchmark suite (history sizes, streaming, LiteLLM) builds on it.

    python -m bench.overhead [--requests 2000] [--rounds 3] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import aiohttp
import uvloop

from bench.http_client import REQUEST_BODY, SERVER_CODE, free_port, wait_listening

HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


async def _latencies(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        async with session.post(url, data=REQUEST_BODY, headers=HEADERS) as response:
            await response.read()
            assert response.status == 200, response.status
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def _throughput(session: aiohttp.ClientSession, url: str, count: int, workers: int) -> float:
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            async with session.post(url, data=REQUEST_BODY, headers=HEADERS) as response:
                await response.read()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return count / (time.perf_counter() - start)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(urls: dict[str, str], args: argparse.Namespace) -> None:
    latency: dict[str, list[float]] = {name: [] for name in urls}
    rps: dict[str, list[float]] = {name: [] for name in urls}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for url in urls.values():  # warm up both paths
            await _latencies(session, url, 200)
        for _ in range(args.rounds):
            for name, url in urls.items():
                latency[name] += await _latencies(session, url, args.requests // args.rounds)
                rps[name].append(await _throughput(session, url, args.requests, args.concurrency))
    print(f"{args.requests} requests, {args.rounds} rounds, direct and proxied interleaved")
    print("| path | p50 ms | p99 ms | req/s at concurrency", args.concurrency, "|")
    print("|---|---:|---:|---:|")
    for name in urls:
        p50, p99 = _pct(latency[name], 0.5), _pct(latency[name], 0.99)
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {statistics.median(rps[name]):,.0f} |")
    added50 = _pct(latency["proxy"], 0.5) - _pct(latency["direct"], 0.5)
    added99 = _pct(latency["proxy"], 0.99) - _pct(latency["direct"], 0.99)
    print(f"added by the proxy at concurrency 1: p50 {added50:.3f} ms, p99 {added99:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    server_port, proxy_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER_CODE, str(server_port)])
    proxy = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", "/dev/null",
         "--port", str(proxy_port), "--log-level", "warning",
         "--upstream", f"http://127.0.0.1:{server_port}/v1"]
    )  # fmt: skip
    try:
        wait_listening(server_port)
        wait_listening(proxy_port)
        urls = {
            "direct": f"http://127.0.0.1:{server_port}/v1/chat/completions",
            "proxy": f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
        }
        uvloop.run(_measure(urls, args))
    finally:
        for process in (proxy, server):
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
