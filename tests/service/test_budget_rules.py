"""The request path's budget: one window rule for `serve` and `inspect`, a usable input in
small windows, honest numbers, and the overflow the proxy answers itself when nothing fits.

The client is the official SDK; the provider is the strict mock (its window, its own larger
tokenizer), served on a real socket so that `inspect` can ask its `/v1/models` too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.dry_run import Options, inspect_file
from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.settings import Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve_in_thread

KEY = "sk-budget"
WORDS = "the build failed again on the staging cluster while the queue kept growing "


@pytest.fixture
def upstream() -> MockUpstream:
    return MockUpstream(
        window=8192, token_factor=1.1, strict=True, roles_alternate=True, models=("mock-model",)
    )


@pytest.fixture
def mock_url(upstream: MockUpstream) -> Iterator[str]:
    with serve_in_thread(upstream.app) as base_url:
        yield f"{base_url}/v1"


@asynccontextmanager
async def proxy(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings)
    async with LifespanManager(app):
        yield app


def sdk(app: FastAPI) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    return openai.AsyncOpenAI(
        api_key=KEY, base_url="http://proxy/v1", http_client=http, max_retries=0
    )


def service(app: FastAPI) -> ProxyService:
    found: ProxyService = app.state.service
    return found


async def context_of(app: FastAPI, session: str) -> dict[str, Any]:
    await service(app).settle()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as api:
        response = await api.get(
            f"/v1/compaction/sessions/{session}", headers={"authorization": f"Bearer {KEY}"}
        )
    assert response.status_code == 200, response.text
    context: dict[str, Any] = response.json()["context"]
    return context


async def one_request(app: FastAPI, model: str, session: str) -> None:
    async with sdk(app) as client:
        await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-session-id": session},
        )


WINDOW_CASES: dict[str, tuple[dict[str, Any], str, int]] = {
    "models entry": ({"models": {"mock-model": {"context_window": 5000}}}, "mock-model", 5000),
    "context.context_window over the listing": (
        {"context": {"context_window": 6000}},
        "mock-model",
        6000,
    ),
    "known model": ({}, "gpt-4o", 128_000),
    "reported by the upstream": ({}, "mock-model", 8192),
    "default": ({}, "unlisted-model", 128_000),
}


@pytest.mark.parametrize("case", WINDOW_CASES, ids=list(WINDOW_CASES))
async def test_inspect_and_serve_agree_on_every_window(
    case: str, mock_url: str, upstream: MockUpstream, tmp_path: Path
) -> None:
    sections, model, expected = WINDOW_CASES[case]
    settings = make_settings(mock_url, **sections)
    async with proxy(settings) as app:
        await one_request(app, model, "s-" + case.replace(" ", "-"))
        served = await context_of(app, "s-" + case.replace(" ", "-"))
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    )
    inspected = await inspect_file(request, settings, Options())
    assert served["window"] == inspected.window == expected
    asked = any(r.path.endswith("/models") for r in upstream.requests)
    # The upstream is asked only when nothing explicit or well known gives the window.
    assert asked == (case in ("reported by the upstream", "default"))


async def test_a_small_window_keeps_a_usable_budget(mock_url: str, upstream: MockUpstream) -> None:
    upstream.window = 4096
    async with proxy(make_settings(mock_url)) as app:
        await one_request(app, "mock-model", "small")
        context = await context_of(app, "small")
    # The default reserve (4,096) takes at most a quarter of a 4,096-token window.
    assert context["window"] == 4096
    assert context["output_reserved"] == 1024
    assert context["pressure"] < 0.05


async def test_tokens_before_is_what_the_client_sent_on_every_request(
    mock_url: str, upstream: MockUpstream
) -> None:
    settings = make_settings(mock_url, context={"cooldown_turns": 0})
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    reported: list[tuple[int, int, str]] = []
    async with proxy(settings) as app, sdk(app) as client:
        counter = service(app).counter_for("mock-model")
        for turn in range(14):
            messages.append({"role": "user", "content": f"step {turn}: " + WORDS * 30})
            raw = await client.chat.completions.with_raw_response.create(
                model="mock-model", messages=messages
            )
            completion = raw.parse()
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
            sent = counter.messages(messages[:-1])
            before = int(raw.headers["x-compaction-tokens-before"])
            reported.append((before, sent, raw.headers["x-compaction-applied"]))
        calibration = (await context_of(app, raw.headers["x-session-id"]))["calibration"]
    compacted = [i for i, (_, _, applied) in enumerate(reported) if applied != "none"]
    assert compacted, reported
    reused = [i for i in range(compacted[0] + 1, len(reported)) if reported[i][2] == "none"]
    assert reused, reported  # turns that forwarded the stored checkpoint
    for before, sent, _ in reported[compacted[0] :]:
        # Our count of the whole request, calibrated (the calibration moves a little).
        assert abs(before - sent * calibration) <= 0.05 * before


async def test_a_running_ask_too_big_for_the_window_is_refused_not_cut(
    mock_url: str, upstream: MockUpstream
) -> None:
    # What the model would answer now goes as the user sent it or not at all: a paste the
    # window cannot hold gets the overflow the provider would give, nothing forwarded.
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "The task."},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": WORDS * 700},
    ]
    async with proxy(make_settings(mock_url)) as app, sdk(app) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="mock-model", messages=messages)
    assert raised.value.code == "context_length_exceeded"
    assert not [r for r in upstream.requests if r.path.endswith("/chat/completions")]


async def test_a_request_nothing_can_fit_is_answered_by_the_proxy(
    mock_url: str, upstream: MockUpstream
) -> None:
    instructions: Any = {"role": "system", "content": WORDS * 900}  # ~12k tokens of instructions
    async with proxy(make_settings(mock_url)) as app, sdk(app) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model="mock-model", messages=[instructions, {"role": "user", "content": "hi"}]
            )
        await app.state.service.settle()
        api = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://proxy")
        auth = {"authorization": f"Bearer {KEY}"}
        sessions = (await api.get("/v1/compaction/sessions", headers=auth)).json()["data"]
        url = f"/v1/compaction/sessions/{sessions[0]['id']}"
        detail = (await api.get(url, headers=auth)).json()
    assert raised.value.code == "context_length_exceeded"
    message = raised.value.message
    assert "maximum context length is 8192 tokens" in message
    # The numbers the proxy used: the room the provider leaves, and the usable input it
    # compacted toward (the window less the answer's reserve and the margin).
    assert "the provider leaves 8192 tokens for the prompt" in message
    assert "the proxy compacts toward 5898 (the window less 2048 reserved" in message
    assert not [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    # Recorded as refused, with the tokens it carried: nothing was forwarded.
    (point,) = detail["timeline"]
    assert point["action"] == "refused"
    assert point["tokens_before"] > 8192  # about 11.7k: over the window
    assert point["tokens_after"] == 0
    assert sessions[0]["tokens_sent"] == point["tokens_before"]


@pytest.mark.parametrize("strategy", ["truncate", "clear_tool_results", "summarize"])
async def test_no_strategy_forwards_a_request_that_could_be_made_to_fit(
    strategy: str, mock_url: str, upstream: MockUpstream
) -> None:
    # The oversized message sits in the recent window: only the landing steps can help.
    settings = make_settings(mock_url, context={"strategy": strategy})
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "The task."},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": WORDS * 700},
        {"role": "assistant", "content": "Read it."},
        {"role": "user", "content": "Now what?"},
    ]
    async with proxy(settings) as app, sdk(app) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="mock-model", messages=messages
        )
    assert raw.http_response.status_code == 200
    assert upstream.overflows == 0
    assert float(raw.headers["x-context-pressure"]) <= 1.0
