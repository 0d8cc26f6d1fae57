"""The fast mock upstream of the overhead benchmarks: a raw ASGI app on `bench/lean_server.py`.

`bench/http_client.py`'s server, extended to answer chat completions whole and as SSE
streams, after a fixed latency. It does as little as a server can (no framework, no JSON
parsing: the stream flags are found by a byte search, the answers are built once at start),
so that what a benchmark measures is the proxy in front of it, not the mock. Its own speed
is measured by the suite (the "mock check" section of the report).

Every chat completion is answered the same way, summary requests included: the proxy treats
the answer's text as the summary. `usage.prompt_tokens` is the body's length over four, near
enough to a real count that the proxy's calibration stays within its bounds.

    python -m bench.mock_server --port P [--upstream-latency-ms 0] [--chunks 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MODELS = ("mock-model", "mock-compact")
ANSWER = "The mock upstream answers. " * 8
COMPLETION_TOKENS = 48

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# Clients serialize with or without spaces after the colon.
_STREAM_FLAGS = (b'"stream":true', b'"stream": true')
_USAGE_FLAGS = (b'"include_usage":true', b'"include_usage": true')


def _usage(prompt: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": prompt + COMPLETION_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def _whole(prompt: int) -> bytes:
    message = {"role": "assistant", "content": ANSWER}
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": "mock-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": _usage(prompt),
        }
    ).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock-model",
        "choices": [choice],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def stream_events(chunks: int) -> list[bytes]:
    """The SSE events of a streamed answer: a role chunk, `chunks` content chunks, the finish
    chunk (without the usage chunk and `[DONE]`, which the app adds)."""
    words = [f"tok{i} " for i in range(chunks)]
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": word}) for word in words]
    events.append(_chunk({}, "stop"))
    return events


def _usage_event(prompt: int) -> bytes:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock-model",
        "choices": [],
        "usage": _usage(prompt),
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _models() -> bytes:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "bench"} for name in MODELS]
    return json.dumps({"object": "list", "data": data}).encode()


async def _read_body(receive: Receive) -> bytes:
    parts = []
    more = True
    while more:
        message = await receive()
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


class _MockApp:
    """The raw ASGI app: answers are built once, each request costs a byte search."""

    def __init__(self, *, latency_s: float, chunks: int, chunk_delay_s: float) -> None:
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self.events = stream_events(chunks)
        self.models = _models()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        path: str = scope["path"]
        if path.endswith("/models"):
            await _respond(send, 200, _JSON, self.models)
        elif not path.endswith("/chat/completions"):
            await _respond(send, 404, _JSON, _NOT_FOUND)
        else:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if any(flag in body for flag in _STREAM_FLAGS):
                await self._stream(send, body)
            else:
                await _respond(send, 200, _JSON, _whole(len(body) // 4))

    async def _stream(self, send: Send, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        for event in self.events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        if any(flag in body for flag in _USAGE_FLAGS):
            usage = _usage_event(len(body) // 4)
            await send({"type": "http.response.body", "body": usage, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


_NOT_FOUND = b'{"error": {"message": "not found", "type": "invalid_request_error"}}'


async def _respond(send: Send, status: int, headers: list[Any], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(*, latency_s: float, chunks: int, chunk_delay_s: float = 0.0) -> ASGIApp:
    """The mock as a raw ASGI app."""
    return _MockApp(latency_s=latency_s, chunks=chunks, chunk_delay_s=chunk_delay_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-latency-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0)
    parser.add_argument(
        "--app",
        choices=["raw", "mock-upstream"],
        default="raw",
        help="raw: this module's app; mock-upstream: proxy.mock_upstream's, for comparison",
    )
    args = parser.parse_args()

    if args.app == "mock-upstream":
        import uvicorn

        from proxy.mock_upstream import MockUpstream

        app = MockUpstream(latency_s=args.upstream_latency_ms / 1000, models=MODELS).app
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=args.port,
            log_level="error",
            loop="uvloop",
            http="httptools",
            access_log=False,
            lifespan="off",
            backlog=4096,
        )
        return
    import uvloop

    from bench.lean_server import serve

    raw = create_app(
        latency_s=args.upstream_latency_ms / 1000,
        chunks=args.chunks,
        chunk_delay_s=args.chunk_delay_ms / 1000,
    )
    # Hundreds of connections at once from the client and the proxies' pools.
    uvloop.run(serve(raw, host="127.0.0.1", port=args.port, backlog=4096))


if __name__ == "__main__":
    main()
