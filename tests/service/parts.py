"""A `ProxyService` built directly over the real parts, in one process: the mock provider
through `AsgiUpstream`, a store (the embedded one unless the test brings one), the real
encodings. No web layer: requests go in as `Incoming` values and come out as `Reply`s."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore, Store
from proxy.adapters.tokenizer import load_encoders
from proxy.core import jsoncodec
from proxy.mock_upstream import MockUpstream
from proxy.service import Incoming, ProxyService, Reply, ServiceConfig

KEY = "Bearer k"


@dataclass
class Running:
    service: ProxyService
    mock: MockUpstream
    upstream: AsgiUpstream

    async def ask(
        self,
        body: dict[str, Any],
        *,
        session: str | None = "s1",
        path: str = "chat/completions",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Reply:
        """`body` sent to the service as a client sends it, with key `KEY`."""
        sent = [("authorization", KEY), *headers]
        if session is not None:
            sent.append(("x-session-id", session))
        incoming = Incoming("POST", path, "", sent)
        raw = jsoncodec.dumps(body)
        if path == "responses":
            return await self.service.response(incoming, raw)
        if path == "responses/compact":
            return await self.service.compact(incoming, raw)
        return await self.service.chat_completion(incoming, raw)


@asynccontextmanager
async def running(
    config: ServiceConfig | None = None,
    *,
    store: Store | None = None,
    mock: MockUpstream | None = None,
    app: ASGIApp | None = None,
) -> AsyncIterator[Running]:
    """A service over `store` (a new embedded one when None) and the mock (or `app`), closed
    afterwards as the app's lifespan closes it."""
    mock = mock or MockUpstream()
    upstream = AsgiUpstream(app or mock.app)
    await upstream.open()
    service = ProxyService(
        upstream=upstream,
        store=store or MemoryStore(),
        encoders=load_encoders(),
        config=config or ServiceConfig(),
    )
    try:
        yield Running(service, mock, upstream)
    finally:
        await service.aclose()
        await upstream.aclose()


async def read(reply: Reply) -> bytes:
    """The whole body of `reply`, streamed or not (closed afterwards, as the route does)."""
    try:
        if isinstance(reply.body, bytes):
            return reply.body
        return b"".join([chunk async for chunk in reply.body])
    finally:
        reply.close()


def header(reply: Reply, name: str) -> str | None:
    return next((v for k, v in reply.headers if k.lower() == name.lower()), None)
