"""The client side of the overhead cases: blocks of requests at a fixed concurrency.

One aiohttp session on uvloop sends pre-serialized bodies, `concurrency` requests in flight,
and times each: the whole exchange, and for streams the first body bytes and the last. A
request counts as an error when it raises or answers anything but 200 (or, for a stream,
ends without `[DONE]`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
TIMEOUT_S = 120.0


@dataclass(slots=True)
class Block:
    """What one block of requests to one target measured."""

    latencies_ms: list[float] = field(default_factory=list)
    ttfb_ms: list[float] = field(default_factory=list)
    """Streams: time to the first body bytes."""
    stream_ms: list[float] = field(default_factory=list)
    """Streams: from the first body bytes to the last."""
    events: list[int] = field(default_factory=list)
    """Streams: SSE events received (`[DONE]` included)."""
    wall_s: float = 0.0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    compaction: Counter[str] = field(default_factory=Counter)
    """The proxy's `X-Compaction-Applied` header values (absent elsewhere)."""
    tokens: list[tuple[int, int]] = field(default_factory=list)
    """The proxy's `X-Compaction-Tokens-Before` and `-After`: what the client sent, what was
    forwarded."""

    def fail(self, reason: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(reason[:300])


def client_session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=max(concurrency, 1) * 2, force_close=False)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def _send(
    session: aiohttp.ClientSession, url: str, body: bytes, *, stream: bool, block: Block
) -> None:
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=HEADERS) as response:
            _read_compaction_headers(response, block)
            if response.status != 200:
                block.fail(f"HTTP {response.status}: {(await response.read())[:200]!r}")
                return
            if not stream:
                await response.read()
                block.latencies_ms.append((time.perf_counter() - start) * 1000)
                return
            await _read_stream(response, start, block)
    except (aiohttp.ClientError, TimeoutError) as exc:
        block.fail(f"{type(exc).__name__}: {exc}")


def _read_compaction_headers(response: aiohttp.ClientResponse, block: Block) -> None:
    applied = response.headers.get("x-compaction-applied")
    if applied is None:
        return
    block.compaction[applied] += 1
    before = response.headers.get("x-compaction-tokens-before", "")
    after = response.headers.get("x-compaction-tokens-after", "")
    if before.isdigit() and after.isdigit():
        block.tokens.append((int(before), int(after)))


async def _read_stream(response: aiohttp.ClientResponse, start: float, block: Block) -> None:
    first = 0.0
    events, tail = 0, b""
    async for data in response.content.iter_any():
        if not first:
            first = time.perf_counter()
        events += data.count(b"data:")
        tail = (tail + data)[-64:]
    end = time.perf_counter()
    if b"[DONE]" not in tail:
        block.fail("stream ended without [DONE]")
        return
    block.latencies_ms.append((end - start) * 1000)
    block.ttfb_ms.append((first - start) * 1000)
    block.stream_ms.append((end - first) * 1000)
    block.events.append(events)


async def run_block(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Sequence[bytes],
    *,
    concurrency: int,
    stream: bool = False,
    tick: Callable[[int], None] | None = None,
) -> Block:
    """Send `bodies` to `url`, `concurrency` at a time, in order of starting."""
    block = Block()
    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        while cursor < len(bodies):
            body = bodies[cursor]
            cursor += 1
            await _send(session, url, body, stream=stream, block=block)
            if tick is not None:
                tick(1)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
    block.wall_s = time.perf_counter() - start
    return block
