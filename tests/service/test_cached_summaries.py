"""Summaries read from the provider's prompt cache: a long tool-using session through the
proxy app (the official SDK in front, the mock provider behind it in-process), its summaries
written by the conversation's own model as the conversation's prefix plus one instruction,
against the same session with a summary brain of its own (the transcript form). The session
is a chat completions one, or a stateless Responses API one (reasoning items and their
`encrypted_content` sent back every turn), whose prefix form is a Responses API request.

The share of summary input the mock's prompt cache served is read where an operator reads
it: the proxy's metrics and the session API's history. Run with `-s` to see the numbers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.core.summary import AFTER_TASK, WHOLE
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.service.agent_run import SCRIPT, AgentRun, sdk_for
from tests.service.responses_run import ResponsesRun

WINDOW = 16_000
CONTEXT = {
    "context_window": WINDOW,
    "output_reserved": 1000,
    "keep_recent": 6,
    "cooldown_turns": 0,
    "strategy": "summarize",
}
ADMIN = "admin-token"
KEY = "sk-cached-summaries"
TURNS = 30
INPUT = "compaction_proxy_summarizer_input_tokens_total"


@dataclass(frozen=True)
class Session:
    """What a session's summaries cost, as the proxy reports it."""

    metrics: dict[tuple[str, str], float]
    """Summary input tokens by (form, cached), from the proxy's registry."""
    history: list[dict[str, Any]]
    """The session's compaction records, from the session API."""
    counted: dict[str, float]
    """Other counters of the proxy's registry (summaries used, refusals, compactions)."""

    def tokens(self, form: str) -> tuple[float, float]:
        """The input and the cached tokens of the summaries asked in `form`."""
        cached = self.metrics.get((form, "true"), 0.0)
        return cached + self.metrics.get((form, "false"), 0.0), cached

    def share(self, form: str) -> float:
        total, cached = self.tokens(form)
        return cached / total if total else 0.0


@asynccontextmanager
async def proxy(upstream: ASGIApp, brain: dict[str, Any]) -> AsyncIterator[FastAPI]:
    context = {**CONTEXT, "summary_brain": brain}
    settings = make_settings("http://provider.invalid/v1", context=context, admin={"token": ADMIN})
    app = create_app(settings, upstream=AsgiUpstream(upstream))
    async with LifespanManager(app):
        yield app


async def agent_session(
    upstream: ASGIApp, brain: dict[str, Any] | None = None, *, api: str = "chat"
) -> Session:
    """`TURNS` user turns of a tool-using agent through the proxy, over the chat completions
    API or the Responses API (`api`), the proxy's background work settled between turns (as
    it is when the agent's model takes longer than a summary); what its summaries cost."""
    async with proxy(upstream, brain or {}) as app:
        async with sdk_for(app, KEY) as sdk:
            system = [{"role": "system", "content": "You write code. " * 60}]
            run = AgentRun(sdk, False, system) if api == "chat" else ResponsesRun(sdk, False)
            for turn in range(TURNS):
                await run.turn(f"Step {turn}: continue with the next module.")
                await app.state.service.settle()
        registry = app.state.metrics.registry
        metrics = {
            (form, cached): registry.get_sample_value(INPUT, {"form": form, "cached": cached})
            or 0.0
            for form in ("prefix", "transcript")
            for cached in ("true", "false")
        }
        counted = {
            name: registry.get_sample_value(f"compaction_proxy_{name}_total") or 0.0
            for name in ("summaries_used", "summarizer_prefix_refusals", "summarizer_calls")
        }
        return Session(metrics, await history(app), counted)


async def history(app: FastAPI) -> list[dict[str, Any]]:
    """The compaction records of the one session, as the session API shows them."""
    headers = {"authorization": f"Bearer {ADMIN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        [row] = (await http.get("/v1/compaction/sessions", headers=headers)).json()["data"]
        url = f"/v1/compaction/sessions/{row['id']}"
        records: list[dict[str, Any]] = (await http.get(url, headers=headers)).json()["history"]
    return records


def strict_provider() -> MockUpstream:
    """The agent's model, behind a strict template (tool pairing, alternating roles); on the
    Responses API a reasoning model that checks its reasoning items come back intact."""
    return MockUpstream(
        agent=SCRIPT, window=WINDOW, strict=True, roles_alternate=True, responses_reasoning=True
    )


# Where each API's conversation, and so its prefix form, goes.
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_summaries_asked_as_the_conversation_s_prefix_are_read_from_the_cache(
    api: str,
) -> None:
    prefix_provider, transcript_provider = strict_provider(), strict_provider()
    prefix = await agent_session(prefix_provider.app, api=api)
    transcript = await agent_session(transcript_provider.app, {"model": "mock-summarizer"}, api=api)
    print(  # shown with -s: the measured shares
        f"{api}: summary input served from the provider's cache: prefix form "
        f"{prefix.share('prefix'):.1%} of {prefix.tokens('prefix')[0]:.0f} tokens "
        f"({prefix_provider.summary_calls} summaries); transcript form "
        f"{transcript.share('transcript'):.1%} of {transcript.tokens('transcript')[0]:.0f} "
        f"tokens ({transcript_provider.summary_calls} summaries)"
    )
    assert prefix_provider.summary_calls >= 2
    assert transcript_provider.summary_calls >= 2
    # The prefix form goes by the conversation's API; the transcript form is a chat request.
    assert {r.path for r in prefix_provider.summary_requests} == {PATHS[api]}
    assert {r.path for r in transcript_provider.summary_requests} == {PATHS["chat"]}
    # The conversation's own model reads most of each summary's input from the cache; a
    # brain of its own gets a fresh prompt, which nothing of the conversation's cache serves.
    assert prefix.tokens("transcript") == (0, 0)
    assert transcript.tokens("prefix") == (0, 0)
    assert prefix.share("prefix") >= 0.8
    assert transcript.share("transcript") <= 0.2
    # The metrics say what the provider billed, and the strict template took every request.
    for provider, session, form in [
        (prefix_provider, prefix, "prefix"),
        (transcript_provider, transcript, "transcript"),
    ]:
        billed = (
            sum(u.prompt_tokens for u in provider.summary_usage),
            sum(u.cached_tokens for u in provider.summary_usage),
        )
        assert session.tokens(form) == billed
        assert provider.strict_rejections == provider.overflows == 0
        # Each compaction's record carries what the summaries it used cost.
        summarized = [r for r in session.history if r["summarizer_tokens"]]
        assert summarized
        assert all(r["summarizer_input_tokens"] > 0 for r in summarized)
    recorded = [r for r in prefix.history if r["summarizer_input_tokens"]]
    cached = sum(r["summarizer_cached_tokens"] for r in recorded)
    assert cached >= 0.8 * sum(r["summarizer_input_tokens"] for r in recorded)
    assert not any(r["summarizer_cached_tokens"] for r in transcript.history)


def refusing_the_prefix_form(app: ASGIApp) -> ASGIApp:
    """`app` behind a gateway that refuses a summary asked as the conversation's prefix
    (a strict template, a context limit of its own) with a 400, and passes the rest."""

    async def gateway(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if _prefix_form(body):
            error = {"error": {"message": "unsupported conversation", "type": "invalid_request"}}
            payload = json.dumps(error).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return gateway


def _prefix_form(body: bytes) -> bool:
    """Whether `body` asks for a summary in the prefix form: its last message (a chat
    message, or a Responses API message item's text part) is the closing instruction."""
    sent = json.loads(body) if body else {}
    messages = sent.get("messages") or sent.get("input")
    closing = messages[-1].get("content") if isinstance(messages, list) and messages else None
    if isinstance(closing, list) and closing and isinstance(closing[0], dict):
        closing = closing[0].get("text")
    return isinstance(closing, str) and (AFTER_TASK in closing or WHOLE in closing)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_refused_prefix_form_is_asked_again_as_a_transcript_and_used(api: str) -> None:
    provider = strict_provider()
    session = await agent_session(refusing_the_prefix_form(provider.app), api=api)
    # Every summary was refused in the prefix form, then written from a transcript; the
    # compactions used them (no request failed: the agent's session ran to its end).
    refusals = session.counted["summarizer_prefix_refusals"]
    assert refusals == session.counted["summarizer_calls"] >= 2
    assert provider.summary_calls == refusals  # the transcripts, all answered
    assert session.tokens("prefix") == (0, 0)
    assert session.tokens("transcript")[0] > 0
    assert session.counted["summaries_used"] >= 1
    assert any(r["strategy"] == "summarize" for r in session.history)
