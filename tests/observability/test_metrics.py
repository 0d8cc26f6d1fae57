"""`/metrics` after real requests through the app: routes, latencies, compactions, summaries,
overflow retries, store errors and streams, read back with Prometheus' own parser."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.store import Store, open_store
from proxy.mock_upstream import MockUpstream, Reply
from proxy.observability.metrics import Metrics
from proxy.settings import RedisSettings, Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.observability.scrape import scrape, total, value
from tests.servers import free_port, serve
from tests.service.test_replicas import Replica, long_chat

CHAT = "/v1/chat/completions"
MODEL = "mock-model"
HEADERS = {"authorization": "Bearer sk-metrics"}
# Small enough that a few long turns cross the trigger (as in the session API's tests).
COMPACTING = {
    "context_window": 6000,
    "output_reserved": 500,
    "keep_recent": 2,
    "cooldown_turns": 0,
    "summary_max_tokens": 200,
    "strategy": "summarize",
    # The summarizer reads whole spans in one call: one summary, one call.
    "summary_brain": {"context_window": 100_000},
}
WORDS = "the build failed again on the staging cluster while the queue kept growing "


def hello(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


@asynccontextmanager
async def proxy(settings: Settings, store: Store | None = None) -> AsyncIterator[Replica]:
    """The app for `settings`, its lifespan running, and a client talking to it."""
    app = create_app(settings, store=store)
    async with (
        LifespanManager(app),
        Replica(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as http,
    ):
        http.service = app.state.service
        yield http


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await http.post(CHAT, json=body, headers=HEADERS, timeout=30)


async def test_requests_are_counted_by_route_and_status(client: httpx.AsyncClient) -> None:
    assert (await post(client, hello())).status_code == 200
    assert (await client.post(CHAT, content=b"{not json")).status_code == 400
    assert (await client.get("/v1/models", headers=HEADERS)).status_code == 200
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/v1/compaction/sessions")).status_code == 401
    assert (await client.get("/nowhere")).status_code == 404
    samples = await scrape(client)
    expected = {
        ("chat_completions", "200"): 1,
        ("chat_completions", "400"): 1,
        ("models", "200"): 1,
        ("health", "200"): 1,
        ("admin", "401"): 1,
        ("other", "404"): 1,
    }
    for (route, status), count in expected.items():
        assert value(samples, "requests_total", route=route, status=status) == count
    # The scrape itself is counted once it is over: it shows in the next one.
    assert value(await scrape(client), "requests_total", route="metrics", status="200") == 1


async def test_a_chat_completion_times_upstream_and_proxy_and_observes_pressure(
    client: httpx.AsyncClient,
) -> None:
    response = await post(client, hello())
    samples = await scrape(client)
    assert value(samples, "upstream_latency_seconds_count") == 1
    assert value(samples, "overhead_seconds_count") == 1
    assert 0 < value(samples, "overhead_seconds_sum") < 5
    assert value(samples, "context_pressure_count") == 1
    pressure = float(response.headers["x-context-pressure"])
    assert value(samples, "context_pressure_sum") == pytest.approx(pressure, abs=1e-4)
    assert total(samples, "compactions_total") == 0
    assert value(samples, "active_streams") == 0


async def test_each_app_counts_in_its_own_registry(settings: Settings) -> None:
    async with proxy(settings) as one, proxy(settings) as two:
        await post(one, hello())
        assert value(await scrape(one), "requests_total", route="chat_completions", status="200")
        assert not total(await scrape(two), "requests_total")


async def test_compactions_count_strategy_trigger_tokens_and_summaries() -> None:
    provider = MockUpstream(window=6000)
    async with serve(provider.app) as base:
        settings = make_settings(f"{base}/v1", context=COMPACTING)
        async with proxy(settings) as http:
            messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
            applied = []
            for turn in range(12):
                messages.append({"role": "user", "content": f"turn {turn}: " + WORDS * 60})
                response = await post(http, {"model": MODEL, "messages": messages})
                applied.append(response.headers["x-compaction-applied"])
                messages.append(response.json()["choices"][0]["message"])
                await http.settle()  # an agent's next request comes after the model's answer
            samples = await scrape(http)
    compactions = [strategy for strategy in applied if strategy != "none"]
    # With time between requests (an agent's model answering), each compaction found its
    # summary prepared: no request waited for one.
    assert compactions == ["summarize"] * len(compactions)
    assert len(compactions) >= 2
    counted = value(samples, "compactions_total", strategy="summarize", trigger="pressure")
    assert counted == len(compactions)
    before = value(samples, "compaction_tokens_before_total", strategy="summarize")
    after = value(samples, "compaction_tokens_after_total", strategy="summarize")
    assert before > after > 0
    assert total(samples, "compactions_total") == len(compactions)
    # Every summary was written in the background: ahead of a compaction, or of what one
    # dropped; the compactions after the first used them.
    calls = provider.summary_calls
    assert value(samples, "summarizer_calls_total") == calls > 0
    assert total(samples, "summaries_prepared_total") == calls
    assert value(samples, "summaries_used_total") == len(compactions)
    assert value(samples, "summaries_wasted_total") == 0
    assert value(samples, "summarizer_latency_seconds_count") == calls
    assert value(samples, "summarizer_failures_total") == 0


async def test_a_failed_summary_is_counted_and_the_span_truncated() -> None:
    provider = MockUpstream(window=3000)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    async with serve(provider.app) as base:
        brain = {"context_window": 100_000, "base_url": dead, "timeout_s": 2}
        settings = make_settings(f"{base}/v1", context={"summary_brain": brain})
        async with proxy(settings) as http:
            response = await post(http, {"model": MODEL, "messages": long_chat(30)})
            await http.settle()  # what it dropped is summarized in the background
            samples = await scrape(http)
    assert response.status_code == 200
    assert response.headers["x-compaction-applied"] == "truncate"
    assert value(samples, "summarizer_calls_total") == 1
    assert value(samples, "summarizer_failures_total") == 1
    assert value(samples, "summarizer_latency_seconds_count") == 1
    assert value(samples, "compactions_total", strategy="truncate", trigger="pressure") == 1


async def test_an_overflow_retried_with_success() -> None:
    provider = MockUpstream(window=2500)
    async with serve(provider.app) as base:
        models = {MODEL: {"context_window": 20_000}}  # the proxy believes a larger window
        async with proxy(make_settings(f"{base}/v1", models=models)) as http:
            response = await post(http, {"model": MODEL, "messages": long_chat(30)})
            samples = await scrape(http)
    assert response.status_code == 200
    assert provider.overflows == 1
    assert total(samples, "overflow_errors_total") == 1
    assert value(samples, "overflow_errors_total", kind="overflow_prompt") == 1
    assert value(samples, "retries_total", outcome="succeeded") == 1
    assert value(samples, "retries_total", outcome="failed") == 0
    assert value(samples, "compactions_total", strategy="emergency", trigger="overflow") == 1
    # Two attempts, each timed to its headers.
    assert value(samples, "upstream_latency_seconds_count") == 2


async def test_an_overflow_retried_in_vain() -> None:
    provider = MockUpstream(window=400)
    # The instructions alone are over the real window, and instructions are never cut.
    rules = {"role": "system", "content": "Follow the house rules. " * 150}
    async with serve(provider.app) as base:
        models = {MODEL: {"context_window": 20_000}}
        async with proxy(make_settings(f"{base}/v1", models=models)) as http:
            response = await post(http, {"model": MODEL, "messages": [rules, *long_chat(3)]})
            samples = await scrape(http)
    assert response.status_code == 400
    assert total(samples, "overflow_errors_total") == 2
    assert value(samples, "retries_total", outcome="failed") == 1
    assert value(samples, "retries_total", outcome="succeeded") == 0
    assert value(samples, "requests_total", route="chat_completions", status="400") == 1


async def test_store_errors_are_counted_and_the_request_served(upstream_url: str) -> None:
    down = RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    async with proxy(make_settings(upstream_url), store=open_store(down)) as http:
        response = await post(http, hello())
        samples = await scrape(http)
    assert response.status_code == 200
    # Looking up the checkpoint, the session and the model's facts all failed.
    assert value(samples, "store_errors_total") >= 3


async def active_streams(http: httpx.AsyncClient) -> float:
    return value(await scrape(http), "active_streams")


async def until_no_stream(http: httpx.AsyncClient) -> None:
    for _ in range(200):
        if await active_streams(http) == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("a stream is still counted as active")


@pytest.fixture
async def proxy_url(settings: Settings) -> AsyncIterator[str]:
    # Real sockets: the in-process ASGI transport buffers a whole stream before returning it.
    async with serve(create_app(settings)) as base_url:
        yield base_url


async def test_a_stream_is_active_while_relayed(proxy_url: str, upstream: MockUpstream) -> None:
    hold = asyncio.Event()
    upstream.queue(Reply(content="first-pc second-pc", hold=hold))
    async with (
        httpx.AsyncClient(base_url=proxy_url, headers=HEADERS) as http,
        http.stream("POST", CHAT, json=hello(stream=True)) as response,
    ):
        lines = response.aiter_lines()
        while "first-pc" not in await asyncio.wait_for(anext(lines), 5):
            pass
        assert await active_streams(http) == 1
        hold.set()
        assert [line async for line in lines][-2:] == ["data: [DONE]", ""]
        await until_no_stream(http)
        samples = await scrape(http)
    assert value(samples, "requests_total", route="chat_completions", status="200") == 1
    assert value(samples, "overhead_seconds_count") == 1


async def test_a_stream_the_client_leaves_is_no_longer_active(
    proxy_url: str, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="tick", endless=True, chunk_delay_s=0.01))
    async with httpx.AsyncClient(base_url=proxy_url, headers=HEADERS) as http:
        async with http.stream("POST", CHAT, json=hello(stream=True)) as response:
            await anext(response.aiter_lines())
            assert await active_streams(http) == 1
        await until_no_stream(http)


def test_a_failing_metric_update_is_swallowed_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.pressure("high")  # type: ignore[arg-type]  # what a bug would pass
    assert [r.getMessage() for r in caplog.records] == [
        "metric update pressure failed; the request goes on"
    ]
    metrics.pressure(0.5)  # and the next update works
    body, _ = metrics.exposition()
    assert b"compaction_proxy_context_pressure_count 1.0" in body
