"""Sessions in Redis: restarts, replicas, outages; and an upstream smaller than configured."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore, Store
from proxy.adapters.upstream import Upstream
from proxy.core.session import tenant_of
from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_server import RedisServer
from tests.servers import free_port, proxy_process, serve, serve_in_thread, until
from tests.service.agent_run import chat_requests
from tests.service.stores import STORES

CONTEXT = {
    "output_reserved": 200,
    "keep_recent": 4,
    "summary_max_tokens": 200,
    # The summarizer reads whole spans in one call (no splitting into parts here).
    "summary_brain": {"context_window": 100_000},
}
HEADERS = {"authorization": "Bearer sk-replicas"}
# long_chat(30) is about 3,300 tokens: over the trigger of this window, and its summary
# request (everything before the recent window) still fits it in one call.
WINDOW = 4000


def long_chat(turns: int) -> list[dict[str, Any]]:
    """A plain conversation of `turns` exchanges, each about a hundred tokens."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan the migration."}]
    for i in range(turns):
        messages.append({"role": "assistant", "content": f"Step {i}: " + "details " * 90})
        messages.append({"role": "user", "content": f"Go on after step {i}."})
    return messages


class Replica(httpx.AsyncClient):
    """A client of one in-process proxy, which can wait for the proxy's background work."""

    service: ProxyService

    async def settle(self) -> None:
        """Wait for the summaries (and the rest) the proxy started in the background."""
        await self.service.settle()


@asynccontextmanager
async def proxy(
    upstream_url: str,
    redis_url: str,
    *,
    window: int | None = None,
    store: Store | None = None,
    upstream: Upstream | None = None,
) -> AsyncIterator[Replica]:
    """The proxy in front of `upstream_url` (or `upstream`, in process), on Redis at
    `redis_url` (or on `store`); `window` configures the model's window (else the upstream's
    /v1/models tells it)."""
    models = {"mock-model": {"context_window": window}} if window else {}
    settings = make_settings(upstream_url, redis={"url": redis_url}, context=CONTEXT, models=models)
    app = create_app(settings, store=store, upstream=upstream)
    async with (
        LifespanManager(app),
        Replica(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as http,
    ):
        http.service = app.state.service
        yield http


@asynccontextmanager
async def two_replicas(
    kind: str, request: pytest.FixtureRequest, provider: MockUpstream
) -> AsyncIterator[tuple[Replica, Replica]]:
    """Two replicas of the proxy on one store: Redis ("redis", the mock on a socket), or the
    embedded store both are handed ("embedded", the mock in process: the same on every run,
    and needing no redis-server)."""
    if kind == "embedded":
        shared = MemoryStore()
        async with (
            proxy("http://unused.invalid/v1", "", store=shared, upstream=AsgiUpstream(provider.app))
            as one,
            proxy("http://unused.invalid/v1", "", store=shared, upstream=AsgiUpstream(provider.app))
            as two,
        ):  # fmt: skip
            yield one, two
        return
    redis_server: RedisServer = request.getfixturevalue("redis_server")
    async with (
        serve(provider.app) as base,
        proxy(f"{base}/v1", redis_server.url) as one,
        proxy(f"{base}/v1", redis_server.url) as two,
    ):
        yield one, two


async def chat(http: httpx.AsyncClient, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "mock-model", "messages": messages}
    response = await http.post("/v1/chat/completions", json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    return response


async def test_restart_reuses_the_stored_checkpoint(redis_server: RedisServer) -> None:
    provider = MockUpstream(window=WINDOW)
    async with serve(provider.app) as base:
        async with proxy(f"{base}/v1", redis_server.url) as http:
            first = await chat(http, long_chat(30))
            await http.settle()
        # Nothing was prepared (the conversation came over the trigger at once): truncated
        # at once, and what was dropped summarized in the background for the next compaction.
        assert first.headers["x-compaction-applied"] == "truncate"
        assert provider.summary_calls == 1
        before = chat_requests(provider)[-1].json()["messages"]
        async with proxy(f"{base}/v1", redis_server.url) as http:  # a new process, same Redis
            again = await chat(http, [*long_chat(30), {"role": "assistant", "content": "ok"},
                                      {"role": "user", "content": "next"}])  # fmt: skip
        after = chat_requests(provider)[-1].json()["messages"]
    assert provider.summary_calls == 1  # no new summary: the checkpoint was found
    assert after[: len(before)] == before  # the same forwarded prefix, byte for byte
    assert again.headers["x-compaction-applied"] == "none"


@pytest.mark.parametrize("kind", STORES)
async def test_two_replicas_make_one_summary(kind: str, request: pytest.FixtureRequest) -> None:
    provider = MockUpstream(window=WINDOW, latency_s=0.3)
    async with two_replicas(kind, request, provider) as (one, two):
        messages = long_chat(30)
        replies = await asyncio.gather(chat(one, messages), chat(two, messages))
        await asyncio.gather(one.settle(), two.settle())
    assert provider.summary_calls == 1
    bodies = [r.json()["messages"] for r in chat_requests(provider)]
    assert bodies[0] == bodies[1]  # both forwarded the one stored compaction
    assert {r.headers["x-session-id"] for r in replies} == {replies[0].headers["x-session-id"]}


async def test_redis_stopping_mid_session_fails_no_request(redis_server: RedisServer) -> None:
    provider = MockUpstream(window=WINDOW)
    async with serve(provider.app) as base, proxy(f"{base}/v1", redis_server.url) as http:
        await chat(http, long_chat(10))
        redis_server.stop()
        during = await chat(http, long_chat(30))  # compacts from the request alone
        redis_server.start()
        after = await chat(http, long_chat(31))
    assert during.headers["x-compaction-applied"] != "none"
    assert after.status_code == 200
    assert provider.overflows == 0


async def test_upstream_window_smaller_than_configured_is_learned() -> None:
    provider = MockUpstream(window=2500, token_factor=1.1)
    async with (
        serve(provider.app) as base,
        proxy(f"{base}/v1", "", window=20_000) as http,
    ):
        messages = long_chat(30)  # over the real window, well under the configured one
        for _ in range(6):
            reply = await chat(http, messages)
            messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
    assert provider.overflows == 1  # the first one, caught and retried; none after
    assert max(provider.prompt_tokens) <= 2500


async def test_second_overflow_goes_back_with_should_retry_false() -> None:
    provider = MockUpstream(window=400)
    # The instructions alone are over the real window, and instructions are never cut.
    rules = {"role": "system", "content": "Follow the house rules. " * 150}
    async with serve(provider.app) as base, proxy(f"{base}/v1", "", window=20_000) as http:
        body = {"model": "mock-model", "messages": [rules, *long_chat(3)]}
        response = await http.post("/v1/chat/completions", json=body, headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert response.headers["x-should-retry"] == "false"
    assert provider.overflows == 2  # the original and the one retry, never more


async def test_compaction_off_forwards_untouched() -> None:
    provider = MockUpstream(window=100_000)
    async with serve(provider.app) as base, proxy(f"{base}/v1", "", window=3000) as http:
        body = {"model": "mock-model", "messages": long_chat(30)}
        raw = json.dumps(body).encode()
        response = await http.post(
            "/v1/chat/completions",
            content=raw,
            headers={**HEADERS, "x-compaction": "off", "content-type": "application/json"},
        )
    assert response.status_code == 200
    assert chat_requests(provider)[-1].body == raw


async def test_streamed_overflow_is_retried_before_anything_is_relayed() -> None:
    provider = MockUpstream(window=2500)
    async with serve(provider.app) as base, proxy(f"{base}/v1", "", window=20_000) as http:
        body = {"model": "mock-model", "messages": long_chat(30), "stream": True}
        response = await http.post("/v1/chat/completions", json=body, headers=HEADERS)
    assert response.status_code == 200
    assert response.text.rstrip().endswith("data: [DONE]")
    assert '"usage"' not in response.text.replace('"usage":null', "")  # we asked, not the client
    assert provider.overflows == 1


async def test_reported_usage_calibrates_the_estimates() -> None:
    provider = MockUpstream(token_factor=1.25)
    async with serve(provider.app) as base:
        settings = make_settings(f"{base}/v1", context=CONTEXT)
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
            for turns in range(3, 9):
                body = {"model": "mock-model", "messages": long_chat(turns)}
                await http.post("http://proxy/v1/chat/completions", json=body, headers=HEADERS)
            tenant = tenant_of(HEADERS["authorization"])
            factor = await app.state.service.memory.calibration(tenant, "mock-model")
    assert factor is not None
    assert 1.15 < factor < 1.3


async def test_two_proxy_processes_on_one_redis_make_one_summary(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    provider = MockUpstream(window=WINDOW, latency_s=0.3)
    config = tmp_path / "proxy.yaml"
    config.write_text(json.dumps({"context": CONTEXT, "log": {"level": "warning"}}))
    with serve_in_thread(provider.app) as base:
        args = ["--config", str(config), "--upstream", f"{base}/v1", "--redis", redis_server.url]
        with proxy_process(args) as one, proxy_process(args) as two:
            body = {"model": "mock-model", "messages": long_chat(30)}
            async with httpx.AsyncClient(timeout=60, headers=HEADERS) as http:
                replies = await asyncio.gather(
                    http.post(f"{one}/v1/chat/completions", json=body),
                    http.post(f"{two}/v1/chat/completions", json=body),
                )
            # The summary is written in the background: wait for it, then for a second one.
            await until(lambda: provider.summary_calls >= 1, timeout_s=20)
            await asyncio.sleep(1.0)
    assert [r.status_code for r in replies] == [200, 200]
    assert provider.summary_calls == 1
    first, second = (r.json()["messages"] for r in chat_requests(provider))
    assert first == second


async def test_summarizer_down_truncates_and_the_request_succeeds() -> None:
    provider = MockUpstream(window=WINDOW)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    async with serve(provider.app) as base:
        brain = {**CONTEXT["summary_brain"], "base_url": dead, "timeout_s": 2}  # type: ignore[dict-item]
        settings = make_settings(f"{base}/v1", context={**CONTEXT, "summary_brain": brain})
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
            body = {"model": "mock-model", "messages": long_chat(30)}
            response = await http.post(
                "http://proxy/v1/chat/completions", json=body, headers=HEADERS
            )
    assert response.status_code == 200
    assert response.headers["x-compaction-applied"] == "truncate"
    assert provider.summary_calls == 0


@pytest.mark.parametrize("kind", STORES)
async def test_fifty_identical_requests_on_two_replicas_make_one_summary(
    kind: str, request: pytest.FixtureRequest
) -> None:
    # Fast summaries: the race is between one replica storing the summary and the other
    # taking the lock; the lock is held until the summary is stored, and a job that gets it
    # afterwards finds the stored summary. Each replica runs one job per conversation.
    provider = MockUpstream(window=WINDOW)
    async with two_replicas(kind, request, provider) as (one, two):
        for trial in range(10):
            before = provider.summary_calls
            messages = long_chat(30)
            # A session and a span of its own (the same span would reuse the stored summary).
            messages[0] = {"role": "user", "content": f"Plan migration {trial}."}
            messages[1] = {"role": "assistant", "content": f"Step 0 of trial {trial}."}
            replies = await asyncio.gather(
                *(chat(one if i % 2 else two, messages) for i in range(50))
            )
            await asyncio.gather(one.settle(), two.settle())
            assert provider.summary_calls - before == 1, trial
            assert len({r.headers["x-session-id"] for r in replies}) == 1
            session = replies[0].headers["x-session-id"]
            state = await one.service.memory.session(tenant_of(HEADERS["authorization"]), session)
            assert state is not None
            assert state.compactions == 1, trial  # the stored one, not one per request
