"""A mock OpenAI-compatible upstream, for tests, demos and benchmarks.

It answers like a provider does, over real HTTP when served by uvicorn: chat completions
(whole and as SSE, with content and tool-call deltas, usage, the provider's headers),
scripted errors, `/v1/models`, and an echo of any other `/v1/*` request. Every request it
receives is recorded, so a test can check what the proxy actually forwarded.

Replies are scripted with `MockUpstream.queue(Reply(...))`; with nothing queued it answers
with `MockUpstream.default`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    id: str = "call_1"


@dataclass(slots=True)
class Reply:
    """One scripted answer to a chat completion."""

    content: str | None = "Hello from the mock upstream."
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    error: JSON | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunk_delay_s: float = 0.0
    # Streams pause after their first content chunk until this event is set.
    hold: asyncio.Event | None = None
    # Streams keep producing a chunk every `chunk_delay_s` until the client goes away.
    endless: bool = False


@dataclass(frozen=True, slots=True)
class Recorded:
    """A request as the upstream received it."""

    method: str
    path: str
    raw_path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class MockUpstream:
    """The mock server's state and its ASGI app (`.app`)."""

    def __init__(self, *, latency_s: float = 0.0, default: Reply | None = None) -> None:
        self.latency_s = latency_s
        self.default = default or Reply()
        self.requests: list[Recorded] = []
        self.streams_abandoned = 0
        self.requests_abandoned = 0
        self._replies: deque[Reply] = deque()
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route(
                    "/v1/{path:path}",
                    self._echo,
                    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                ),
            ]
        )

    def queue(self, *replies: Reply) -> None:
        """Answer the next chat completions with `replies`, in order."""
        self._replies.extend(replies)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    async def _record(self, request: Request) -> Recorded:
        recorded = Recorded(
            method=request.method,
            path=request.url.path,
            raw_path=request.scope["raw_path"].decode("latin-1"),
            query=request.url.query,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            body=await request.body(),
        )
        self.requests.append(recorded)
        if self.latency_s and await _client_leaves_within(request, self.latency_s):
            self.requests_abandoned += 1
        return recorded

    async def _chat(self, request: Request) -> Response:
        body = (await self._record(request)).json()
        reply = self._replies.popleft() if self._replies else self.default
        headers = {**_provider_headers(next(self._ids)), **reply.headers}
        if reply.status >= 400:
            error = reply.error or {"error": {"message": "mock error", "type": "server_error"}}
            return JSONResponse(error, status_code=reply.status, headers=headers)
        completion = _Completion(body, reply, f"chatcmpl-mock-{next(self._ids)}")
        if body.get("stream") is True:
            return StreamingResponse(
                self._sse(completion), media_type="text/event-stream", headers=headers
            )
        return JSONResponse(completion.whole(), headers=headers)

    async def _sse(self, completion: _Completion) -> AsyncIterator[bytes]:
        reply = completion.reply
        finished = False
        try:
            for index, chunk in enumerate(completion.chunks()):
                if index and reply.chunk_delay_s:
                    await asyncio.sleep(reply.chunk_delay_s)
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                if index == 1 and reply.hold is not None:
                    await reply.hold.wait()
            while reply.endless:
                await asyncio.sleep(reply.chunk_delay_s or 0.05)
                yield b"data: " + json.dumps(completion.delta({"content": "."})).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                self.streams_abandoned += 1

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        model = {"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _echo(self, request: Request) -> Response:
        recorded = await self._record(request)
        echo = {
            "method": recorded.method,
            "path": recorded.path,
            "query": recorded.query,
            "body": recorded.body.decode("utf-8", "replace"),
        }
        return JSONResponse(echo, headers={"x-request-id": f"req_echo_{next(self._ids)}"})


async def _client_leaves_within(request: Request, seconds: float) -> bool:
    """Wait `seconds` (the body already read); True if the client hung up meanwhile."""

    async def disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(disconnect(), seconds)
    except TimeoutError:
        return False
    return True


class _Completion:
    """The chat completion a `Reply` stands for, whole or as stream chunks."""

    def __init__(self, request: JSON, reply: Reply, completion_id: str) -> None:
        self.request = request
        self.reply = reply
        self.id = completion_id
        self.created = int(time.time())
        self.model = str(request.get("model", "mock-model"))

    def _base(self, obj: str) -> JSON:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _finish_reason(self) -> str:
        return "tool_calls" if self.reply.tool_calls else "stop"

    def usage(self) -> JSON:
        # Words stand in for tokens here; what matters is that usage is reported at all.
        prompt = sum(len(json.dumps(m).split()) for m in self.request.get("messages", []))
        completion = len((self.reply.content or "").split()) + sum(
            len(call.arguments.split()) + 1 for call in self.reply.tool_calls
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def whole(self) -> JSON:
        message: JSON = {"role": "assistant", "content": self.reply.content}
        if self.reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": _function(c.name, c.arguments)}
                for c in self.reply.tool_calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason()}
        return {**self._base("chat.completion"), "choices": [choice], "usage": self.usage()}

    def delta(self, delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**self._base("chat.completion.chunk"), "choices": [choice]}

    def _call_delta(self, call: JSON) -> JSON:
        return self.delta({"tool_calls": [call]})

    def chunks(self) -> Iterator[JSON]:
        yield self.delta({"role": "assistant", "content": ""})
        for word in _pieces(self.reply.content or ""):
            yield self.delta({"content": word})
        for index, call in enumerate(self.reply.tool_calls):
            head = {"index": index, "id": call.id, "type": "function"}
            yield self._call_delta({**head, "function": _function(call.name, "")})
            for piece in _pieces(call.arguments):
                yield self._call_delta({"index": index, "function": {"arguments": piece}})
        yield self.delta({}, self._finish_reason())
        if (self.request.get("stream_options") or {}).get("include_usage"):
            yield {**self._base("chat.completion.chunk"), "choices": [], "usage": self.usage()}


def _function(name: str, arguments: str) -> JSON:
    return {"name": name, "arguments": arguments}


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _provider_headers(number: int) -> dict[str, str]:
    return {
        "x-request-id": f"req_mock_{number}",
        "openai-processing-ms": "1",
        "x-ratelimit-remaining-requests": "9999",
        "x-ratelimit-remaining-tokens": "999999",
    }
