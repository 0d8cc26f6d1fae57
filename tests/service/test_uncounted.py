"""A turn far below every level is forwarded before its new messages are counted.

Counting a new 3,000-token tool result takes 0.6 ms of tiktoken; a turn whose count cannot
change what is forwarded (`Compactor.uncounted`) is handed to the HTTP client first and
counted while the provider works. The provider here is the mock behind a real socket,
reached by the proxy's own HTTP client; the encoder is the real one, watched for the new
message's text, and the client watched for the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from proxy.adapters.tokenizer import TiktokenEncoder
from proxy.adapters.upstream import AiohttpUpstream, UpstreamRequest, UpstreamResponse
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.adapters.test_tokenizer import cached_encoder
from tests.conftest import make_settings
from tests.servers import serve

Sent = Awaitable[UpstreamResponse]
Sending = Callable[[AiohttpUpstream, UpstreamRequest], Sent]
NEW = "NEW-RESULT " + "the upload worker retried the queue after a backoff " * 60
HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing upload tests."},
]


def _body() -> dict[str, Any]:
    messages = [*HISTORY, {"role": "user", "content": NEW}]
    return {"model": "mock-model", "messages": messages}


_IN_MOCK: ContextVar[bool] = ContextVar("in_mock", default=False)


class Provider:
    """The mock, whose own counting (it meters prompts as a provider does, in this same
    process) is not the proxy's."""

    def __init__(self, mock: MockUpstream) -> None:
        self._mock = mock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _IN_MOCK.set(True)
        try:
            await self._mock.app(scope, receive, send)
        finally:
            _IN_MOCK.reset(token)


class Watched:
    """The order of two things: the proxy handing the request that carries `NEW` to its
    HTTP client, and its encoder counting `NEW`."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def forwarding(self, send: Sending) -> Sending:
        def sent(upstream: AiohttpUpstream, request: UpstreamRequest) -> Sent:
            body = request.body
            if isinstance(body, bytes) and b"NEW-RESULT" in body:
                self.events.append("forwarded")
            return send(upstream, request)

        return sent

    def spy(self, count: Callable[[TiktokenEncoder, str], int]) -> Callable[..., int]:
        def counted(encoder: TiktokenEncoder, text: str) -> int:
            if text.startswith("NEW-RESULT") and not _IN_MOCK.get():
                self.events.append("counted")
            return count(encoder, text)

        return counted


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Watched:
    cached_encoder(O200K_BASE)  # skips without the real encoding: the bound needs a BPE one
    watched = Watched()
    monkeypatch.setattr(TiktokenEncoder, "count", watched.spy(TiktokenEncoder.count))
    monkeypatch.setattr(AiohttpUpstream, "send", watched.forwarding(AiohttpUpstream.send))
    return watched


async def _proxied(watched: Watched, window: int) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(Provider(MockUpstream())) as base_url:
        settings = make_settings(f"{base_url}/v1", context={"context_window": window})
        app = create_app(settings)
        async with LifespanManager(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://proxy", headers={"authorization": "Bearer k"}
            ) as client:
                yield client


@pytest.mark.parametrize(
    ("window", "order"),
    [
        (128_000, ["forwarded", "counted"]),
        # The new result's bytes bound its tokens above this small window's trigger, though
        # its count is far below: whether to compact is decided by the count, first.
        (4_000, ["counted", "forwarded"]),
    ],
    ids=["far-below-the-trigger-forwarded-first", "may-reach-the-trigger-counted-first"],
)
async def test_a_turn_is_counted_first_only_when_its_count_could_change_what_goes_out(
    watched: Watched, window: int, order: list[str]
) -> None:
    async for client in _proxied(watched, window):
        response = await client.post("/v1/chat/completions", json=_body())
    assert response.status_code == 200
    assert watched.events == order
    # Counted all the same: what the answer reports is the exact count.
    watched.events.clear()
    exact = TokenCounter(cached_encoder(O200K_BASE)).request(_body())
    assert response.headers["x-compaction-tokens-after"] == str(exact)
    assert response.headers["x-compaction-applied"] == "none"
