"""The summarizer's circuit breaker, through the proxy app: a brain that keeps failing is
skipped for a cool-off (compaction goes on without it), shown in /metrics and /readyz, and
asked again afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream, Reply
from proxy.service import ProxyService
from proxy.web import create_app
from tests.conftest import make_settings
from tests.observability.scrape import scrape, value
from tests.servers import serve_in_thread
from tests.service.agent_run import chatty_turns

DOWN = Reply(status=500, error={"error": {"message": "the brain is down", "type": "server_error"}})


@pytest.fixture
def brain() -> MockUpstream:
    return MockUpstream(default=DOWN)


@pytest.fixture
def brain_url(brain: MockUpstream) -> Iterator[str]:
    with serve_in_thread(brain.app) as base_url:
        yield f"{base_url}/v1"


def summaries_asked(brain: MockUpstream) -> int:
    return sum(r.path.endswith("/chat/completions") for r in brain.requests)


async def turns(app: FastAPI, messages: list[Any], count: int) -> list[str]:
    """`count` more long user turns through the proxy; the strategies applied."""
    # Settled between turns: whether a summary is ready at the trigger must not depend on
    # how fast a loaded machine writes it.
    done = await chatty_turns(app, messages, count, repeat=40, key="sk-breaker", settle=True)
    return [strategy for strategy, _ in done]


async def ops(app: FastAPI) -> tuple[dict[str, Any], float]:
    """/readyz's body and the breaker gauge."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        ready = (await http.get("/readyz")).json()
        samples = await scrape(http)
    return ready, value(samples, "summarizer_breaker_open")


async def used(app: FastAPI) -> float:
    """How many compactions used a summary written in the background."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        return value(await scrape(http), "summaries_used_total")


async def test_a_failing_summarizer_is_skipped_for_its_cool_off_then_asked_again(
    upstream_url: str, brain: MockUpstream, brain_url: str
) -> None:
    context = {
        "context_window": 6000,
        "cooldown_turns": 0,
        "summary_brain": {"base_url": brain_url, "breaker_failures": 2, "breaker_cool_off_s": 4},
    }
    app = create_app(make_settings(upstream_url, context=context))
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    async with LifespanManager(app):
        service: ProxyService = app.state.service
        applied = await turns(app, messages, 24)
        await service.settle()  # the summaries are asked in the background
        compactions = [a for a in applied if a != "none"]
        # Two failures open the breaker; every later compaction went on without asking.
        assert summaries_asked(brain) == 2
        assert len(compactions) > 2
        assert set(compactions) == {"truncate"}
        ready, gauge = await ops(app)
        assert ready["status"] == "ready"
        assert "circuit open after 2 failed summaries" in ready["details"]["summarizer"]
        assert gauge == 1
        # After the cool-off, with the brain back, the next compaction asks it and succeeds.
        brain.default = None
        await asyncio.sleep(4.1)
        assert await used(app) == 0
        later = await turns(app, messages, 12)
        await service.settle()
        # Summaries written in the background once the brain answered, used by compactions.
        assert summaries_asked(brain) > 2
        assert "summarize" in later
        assert await used(app) >= 1
        ready, gauge = await ops(app)
        assert (ready, gauge) == ({"status": "ready"}, 0)
