"""Which HTTP client should the proxy use upstream? Measure, don't guess.

Starts a fast local HTTP server in a subprocess (uvicorn + a raw ASGI app that answers
every POST with a fixed chat-completion body), then sends the same requests through
each candidate client at a fixed concurrency, interleaving the candidates in rounds
so that machine noise hits them all alike. Reports requests per second and the
client process's CPU time per request (the cost the proxy would pay per forward).

    python -m bench.http_client [--requests 4000] [--concurrency 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

REQUEST_BODY = json.dumps(
    {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hello " * 300}],
    }
).encode()

SERVER_CODE = r"""
import json, sys, uvicorn
BODY = json.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
  "message": {"role": "assistant", "content": "hi " * 200}, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 300, "completion_tokens": 200, "total_tokens": 500}}).encode()
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error",
            loop="uvloop", http="httptools", access_log=False)
"""

Send = Callable[[], Awaitable[int]]
Factory = Callable[[str], AbstractAsyncContextManager[Send]]


class _Httpx:
    """Plain httpx.AsyncClient (httpcore's pool)."""

    def __init__(self, url: str) -> None:
        import httpx

        self._url = url
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        self._client = httpx.AsyncClient(limits=limits)

    async def __aenter__(self) -> Send:
        async def send() -> int:
            response = await self._client.post(self._url, content=REQUEST_BODY)
            return len(response.content)

        return send

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()


class _Httpx2(_Httpx):
    """httpx2.AsyncClient (the openai SDK's own client)."""

    def __init__(self, url: str) -> None:
        import httpx2

        self._url = url
        limits = httpx2.Limits(max_connections=100, max_keepalive_connections=100)
        self._client = httpx2.AsyncClient(limits=limits)  # type: ignore[assignment]


class _HttpxAiohttp(_Httpx):
    """httpx's API over aiohttp's connection pool (httpx-aiohttp's transport)."""

    def __init__(self, url: str) -> None:
        import httpx
        from httpx_aiohttp import AiohttpTransport

        self._url = url
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        self._client = httpx.AsyncClient(transport=AiohttpTransport(limits=limits))


class _Aiohttp:
    """aiohttp.ClientSession alone."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def __aenter__(self) -> Send:
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))

        async def send() -> int:
            async with self._session.post(self._url, data=REQUEST_BODY) as response:
                return len(await response.read())

        return send

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()


CANDIDATES: dict[str, Factory] = {
    "httpx": _Httpx,
    "httpx2": _Httpx2,
    "httpx+aiohttp transport": _HttpxAiohttp,
    "aiohttp": _Aiohttp,
}


async def _run(send: Send, requests: int, concurrency: int) -> tuple[float, float]:
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send()

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def _measure(url: str, args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CANDIDATES}
    for _ in range(args.rounds):
        for name, factory in CANDIDATES.items():
            async with factory(url) as send:
                await _run(send, args.concurrency * 4, args.concurrency)  # warm the pool
                wall, cpu = await _run(send, args.requests, args.concurrency)
            results[name].append((args.requests / wall, cpu / args.requests * 1000))
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the benchmark server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import uvloop

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER_CODE, str(port)])
    try:
        wait_listening(port)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        results = uvloop.run(_measure(url, args))
    finally:
        server.terminate()
        server.wait()

    print(f"concurrency {args.concurrency}, {args.requests} requests x {args.rounds} rounds")
    print("| client | req/s (median) | client CPU ms/request (median) |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        rps = statistics.median(r for r, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(f"| {name} | {rps:,.0f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
