"""The store under load: many concurrent streams, each a conversation of its own, through
`compaction-proxy serve` on a private redis-server (a unix socket in the work folder).

What it shows is whether a burst is remembered: the proxy's `store_errors` and
`store_writes_lost` counters (from its /metrics) and, asked of Redis itself once the
proxy's background writes are done, how many of the conversations have their session state
and their turn's timeline stored. Before the pool was sized and blocking, redis-py's default
pool of 100 connections refused the rest: thousands of store errors, most conversations with
nothing stored, and every client still saw a 200.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from bench.measures import PROXY
from bench.processes import Server, free_port, python_module, start
from bench.stack import proxy_command, proxy_config
from tests.redis_server import RedisServer

# The size's streams: the full run's 1,000 is the target; smoke only checks the case runs.
STREAMS = {"default": 1000, "quick": 1000, "smoke": 50}
HEADERS = {"authorization": "Bearer sk-bench-store", "content-type": "application/json"}
# How long the proxy's writes after each answer (the turn's timeline) may take to land.
SETTLE_S = 30.0


@dataclass(frozen=True, slots=True)
class StoreLoadResult:
    streams: int
    completed: int
    """Streams answered 200 and read to their `[DONE]`."""
    store_errors: float
    writes_lost: float
    stored: int
    """Conversations whose session state and timeline Redis holds."""
    seconds: float
    """From the first request sent to the last stream's end."""
    problem: str | None = None


def _body(index: int) -> bytes:
    message = {"role": "user", "content": f"Conversation {index}: plan the migration."}
    return json.dumps(
        {"model": "mock-model", "messages": [message], "stream": True}, separators=(",", ":")
    ).encode()


async def _stream(session: aiohttp.ClientSession, url: str, index: int) -> str | None:
    """The stream's session id when it was answered whole, else None."""
    async with session.post(url, data=_body(index), headers=HEADERS) as response:
        body = await response.read()
        if response.status != 200 or b"data: [DONE]" not in body:
            return None
        return response.headers.get("x-session-id")


async def _burst(url: str, streams: int) -> list[str | None]:
    connector = aiohttp.TCPConnector(limit=streams * 2)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await asyncio.gather(*(_stream(session, url, i) for i in range(streams)))


async def _metrics(base_url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/metrics") as reply:
        text = await reply.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def _stored(redis_url: str, sessions: set[str]) -> int:
    """How many of `sessions` Redis holds a state and a timeline for, waiting for the
    proxy's background writes up to `SETTLE_S`."""
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + SETTLE_S
        while True:
            # Keys as redis_store.py lays them out: cp:{s:<tenant>:<session>}:<part>.
            found = {
                part: {key.split(":")[3].rstrip("}") async for key in client.scan_iter(
                    match=f"cp:{{s:*}}:{part}", count=1000
                )}
                for part in ("state", "timeline")
            }  # fmt: skip
            stored = len(sessions & found["state"] & found["timeline"])
            if stored == len(sessions) or time.monotonic() > deadline:
                return stored
            await asyncio.sleep(0.5)
    finally:
        await client.aclose()


async def _measure(mock: Server, redis_url: str, work: Path, streams: int) -> StoreLoadResult:
    config = proxy_config(mock.base_url) | {"redis": {"url": redis_url}}
    path = work / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proxy = start(
        PROXY, proxy_command(path, port), port=port, log=work / "proxy.log", ready_path="/healthz"
    )
    try:
        started = time.monotonic()
        sessions = await _burst(f"{proxy.base_url}/chat/completions", streams)
        seconds = time.monotonic() - started
        answered = {s for s in sessions if s is not None}
        stored = await _stored(redis_url, answered)
        counters = await _metrics(proxy.base_url.removesuffix("/v1"))
    finally:
        proxy.stop()
    return StoreLoadResult(
        streams=streams,
        completed=sum(s is not None for s in sessions),
        store_errors=counters.get("compaction_proxy_store_errors_total", float("nan")),
        writes_lost=counters.get("compaction_proxy_store_writes_lost_total", float("nan")),
        stored=stored,
        seconds=seconds,
    )


async def run_store_load(work: Path, *, streams: int) -> StoreLoadResult:
    """`streams` concurrent streamed chat completions, each its own conversation, through
    the proxy on a private Redis; what the store kept of them."""
    folder = work / "store-load"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        redis = RedisServer(folder)
        redis.start()
    except (FileNotFoundError, RuntimeError) as exc:
        nan = float("nan")
        return StoreLoadResult(streams, 0, nan, nan, 0, nan, problem=str(exc))
    servers: list[Server] = []
    try:
        mock_port = free_port()
        mock = start(
            "mock",
            python_module("bench.mock_server", "--port", str(mock_port)),
            port=mock_port,
            log=folder / "mock.log",
        )
        servers.append(mock)
        return await _measure(mock, redis.url, folder, streams)
    finally:
        for server in servers:
            server.stop()
        redis.stop()
