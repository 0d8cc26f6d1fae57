"""What a provider's answers teach (a window from an overflow error, the calibration from
usage) is the tenant's own, believed only when it is about the request sent, and expires."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from proxy.adapters.store import MemoryStore, Store
from proxy.core.session import tenant_of
from proxy.mock_upstream import MockUpstream, Reply
from proxy.service import ProxyService
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve
from tests.service.agent_run import chat_requests

CONTEXT = {"output_reserved": 200, "keep_recent": 4, "summary_max_tokens": 200}
A = "Bearer sk-tenant-a"
B = "Bearer sk-tenant-b"
MODEL = "mock-model"


def long_chat(turns: int, topic: str = "migration") -> list[dict[str, Any]]:
    """A plain conversation of `turns` exchanges, each about a hundred tokens."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Plan the {topic}."}]
    for i in range(turns):
        messages.append({"role": "assistant", "content": f"Step {i}: " + f"{topic} " * 90})
        messages.append({"role": "user", "content": f"Go on after step {i}."})
    return messages


class Clock:
    """The embedded store's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Proxy(httpx.AsyncClient):
    service: ProxyService

    async def chat(self, key: str, messages: list[dict[str, Any]]) -> httpx.Response:
        body = {"model": MODEL, "messages": messages}
        response = await self.post(
            "/v1/chat/completions", json=body, headers={"authorization": key}, timeout=30
        )
        assert response.status_code == 200, response.text
        await self.service.settle()  # usage (calibration) is recorded in the background
        return response


@asynccontextmanager
async def proxy(
    upstream_url: str, *, window: int, store: Store | None = None, **context: Any
) -> AsyncIterator[Proxy]:
    """The proxy (no key of its own: each caller's key is its tenant), the model's window
    configured as `window`."""
    settings = make_settings(
        upstream_url, context={**CONTEXT, **context}, models={MODEL: {"context_window": window}}
    )
    app = create_app(settings, store=store)
    async with (
        LifespanManager(app),
        Proxy(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as http,
    ):
        http.service = app.state.service
        yield http


async def test_a_window_one_tenant_learned_does_not_cap_another() -> None:
    provider = MockUpstream(window=2500)  # the configured 20,000 is wrong
    async with serve(provider.app) as base, proxy(f"{base}/v1", window=20_000) as http:
        await http.chat(A, long_chat(30))  # about 3,300 tokens: overflow, learned, retried
        assert provider.overflows == 1
        provider.window = None  # from now on only the proxy's own belief limits a request
        other = await http.chat(B, long_chat(30, "audit"))
        forwarded_b = chat_requests(provider)[-1].json()["messages"]
        again = await http.chat(A, long_chat(30, "audit"))
    assert other.headers["x-compaction-applied"] == "none"
    assert forwarded_b == long_chat(30, "audit")
    # The tenant that met the overflow keeps its lesson: its next conversation fits 2,500.
    assert again.headers["x-compaction-applied"] != "none"


async def test_a_calibration_one_tenant_learned_does_not_apply_to_another() -> None:
    provider = MockUpstream(token_factor=2.0)
    async with serve(provider.app) as base, proxy(f"{base}/v1", window=10_000) as http:
        await http.chat(A, long_chat(10))  # the provider counts twice our count: factor 2
        assert await http.service.memory.calibration(tenant_of(A), MODEL) is not None
        provider.token_factor = 1.0
        # About 5,500 tokens: under the trigger (about 8,000) as counted, over it at twice.
        other = await http.chat(B, long_chat(50, "audit"))
        again = await http.chat(A, long_chat(50, "audit"))
    assert other.headers["x-compaction-applied"] == "none"
    assert again.headers["x-compaction-applied"] != "none"


async def test_an_overflow_sentence_about_another_request_teaches_nothing() -> None:
    # A 400 quoting the user's own text (a pasted log) reads as an overflow stating a window
    # of 1,000 tokens and a prompt of 1,200; about 4,400 were sent.
    echo = (
        "Invalid content in messages[3]: 'This model's maximum context length is 1000 tokens. "
        "However, your messages resulted in 1200 tokens. Please reduce the length'"
    )
    provider = MockUpstream()
    provider.queue(
        Reply(status=400, error={"error": {"message": echo, "type": "invalid_request_error"}})
    )
    async with serve(provider.app) as base, proxy(f"{base}/v1", window=20_000) as http:
        await http.chat(A, long_chat(40))
        learned = await http.service.memory.learned_window(tenant_of(A), MODEL)
        later = await http.chat(A, long_chat(40, "audit"))
    assert learned is None
    assert later.headers["x-compaction-applied"] == "none"
    assert chat_requests(provider)[-1].json()["messages"] == long_chat(40, "audit")


async def test_a_learned_window_expires_after_learned_ttl_s() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    provider = MockUpstream(window=2500)
    async with serve(provider.app) as base:
        url = f"{base}/v1"
        async with proxy(url, window=20_000, store=store, learned_ttl_s=600) as http:
            await http.chat(A, long_chat(30))  # learned
        provider.window = None
        # Fresh replicas on the same store: nothing cached, the store's word only.
        async with proxy(url, window=20_000, store=store, learned_ttl_s=600) as http:
            before = await http.chat(A, long_chat(30, "audit"))
        clock.now += 601  # far from the session TTL (30 days): only the lesson expired
        async with proxy(url, window=20_000, store=store, learned_ttl_s=600) as http:
            after = await http.chat(A, long_chat(30, "review"))
            assert await store.load_session(tenant_of(A), after.headers["x-session-id"])
    assert before.headers["x-compaction-applied"] != "none"
    assert after.headers["x-compaction-applied"] == "none"
