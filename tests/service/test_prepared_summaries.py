"""Summaries off the request path: a slow summarizer costs no request its latency, summaries
are still written and used, and an outage of the store causes no summary storm."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.web import create_app
from tests.conftest import make_settings
from tests.observability.scrape import scrape, value
from tests.redis_server import RedisServer
from tests.servers import serve
from tests.service.agent_run import CHATTY, chatty_turns

# Each turn adds about 6 % of the window: a compaction cycle (from where a compaction lands
# to the trigger) lasts about ten turns, longer than one summary takes.
CONTEXT = {
    "context_window": 8000,
    "output_reserved": 500,
    "keep_recent": 4,
    "cooldown_turns": 0,
    "summary_max_tokens": 300,
}


async def agent(app: Any, turns: int, messages: list[Any]) -> list[tuple[str, float]]:
    return await chatty_turns(app, messages, turns, repeat=30, key="sk-prepared")


async def test_a_slow_summarizer_delays_no_request_and_its_summaries_are_used() -> None:
    # A summary takes six turns (as 3.0 s to 0.5 s did), and more than a turn plus the 1 s
    # this allows the proxy: a request that waited for one could not pass as a slow one.
    latency, summary_latency = 0.25, 1.5
    provider = MockUpstream(window=8000, latency_s=latency, summary_latency_s=summary_latency)
    async with serve(provider.app) as base:
        app = create_app(make_settings(f"{base}/v1", context=CONTEXT))
        async with LifespanManager(app):
            service: ProxyService = app.state.service
            done = await agent(app, 40, [{"role": "system", "content": "Be brief."}])
            await service.settle()
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
                samples = await scrape(http)
    compactions = [strategy for strategy, _ in done if strategy != "none"]
    slowest = max(seconds for _, seconds in done)
    # Every request took the provider's latency and the proxy's overhead, never a summary's.
    assert slowest < latency + 1.0 < summary_latency, done
    assert len(compactions) >= 3
    assert provider.overflows == 0
    assert max(provider.prompt_tokens) <= 8000
    # Summaries were written (in the background) and compactions used them: a summary takes
    # longer than the few turns from the preparation level to the trigger here, so the
    # compaction truncates and the summary of what it dropped is folded into the next one.
    assert provider.summary_calls >= 2
    assert value(samples, "summarizer_calls_total") == provider.summary_calls
    assert value(samples, "summaries_used_total") >= 1


async def test_redis_killed_mid_session_makes_no_summary_storm(redis_server: RedisServer) -> None:
    provider = MockUpstream(window=8000, summary_latency_s=0.2)
    async with serve(provider.app) as base:
        settings = make_settings(f"{base}/v1", context=CONTEXT, redis={"url": redis_server.url})
        app = create_app(settings)
        async with LifespanManager(app):
            service: ProxyService = app.state.service
            messages: list[Any] = [{"role": "system", "content": "Be brief."}]
            await agent(app, 12, messages)
            await service.settle()
            redis_server.stop()
            # Without the store no checkpoint is found: every request over the trigger is
            # compacted again from the request alone, and each could ask for a summary.
            before = provider.summary_calls
            burst = [*messages, {"role": "user", "content": CHATTY * 200}]
            await asyncio.gather(*(_one(app, burst) for _ in range(50)))
            await service.settle()
            storm = provider.summary_calls - before
            before = provider.summary_calls
            during = await agent(app, 20, messages)
            await service.settle()
            calls = provider.summary_calls - before
            redis_server.start()
            after = await agent(app, 4, messages)
    # Fifty concurrent compactions of one conversation: one summary in flight, its result
    # kept in process and found by the others.
    assert storm == 1
    compactions = [strategy for strategy, _ in during if strategy != "none"]
    assert len(compactions) >= 5
    # An agent going on: each request past the trigger compacts anew (the request grew, and
    # no checkpoint is found) and asks for one summary at most, of what its compaction
    # dropped that the previous one's summary does not cover; none is prepared ahead.
    assert calls <= len(compactions), (calls, during)
    assert all(strategy in ("none", "summarize", "truncate") for strategy, _ in after)


async def _one(app: Any, messages: list[Any]) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        body = {"model": "mock-model", "messages": messages}
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-prepared"}
        )
    assert response.status_code == 200


async def test_a_summary_prepared_for_history_the_client_then_rewrote_is_counted_wasted() -> None:
    provider = MockUpstream(window=8000)
    async with serve(provider.app) as base:
        app = create_app(make_settings(f"{base}/v1", context=CONTEXT))
        async with LifespanManager(app):
            service: ProxyService = app.state.service
            messages: list[Any] = [{"role": "system", "content": "Be brief."}]
            done: list[tuple[str, float]] = []
            while not provider.summary_calls:  # up to the preparation level
                done += await agent(app, 1, messages)
                await service.settle()
            prepared = provider.summary_calls
            # The client rewrites an early answer (an edit, a retry): the prepared summary
            # no longer matches what the next compaction would condense.
            messages[2] = {"role": "assistant", "content": "A different answer."}
            await _one(app, [*messages, {"role": "user", "content": CHATTY * 150}])
            await service.settle()
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
                samples = await scrape(http)
    assert {strategy for strategy, _ in done} == {"none"}
    assert prepared >= 1
    assert value(samples, "summaries_used_total") == 0
    assert value(samples, "summaries_wasted_total") == prepared
