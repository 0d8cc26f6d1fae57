"""POST /v1/messages through the proxy app, with the official `anthropic` SDK as the client:
what the route does besides compacting (bytes kept, headers, auth, errors in Anthropic's shape,
the untouched paths, count_tokens, the log line and the metrics)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings
from tests.mock_messages import (
    MODEL,
    READ_FILE,
    VERSION,
    assistant,
    request,
    user,
)

MESSAGES = "/v1/messages"
HEADERS = {"x-api-key": "sk-ant-client", "anthropic-version": VERSION}


@asynccontextmanager
async def sdk_on(app: FastAPI, **options: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The official async client talking to the proxy app in-process."""
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, timeout=60) as http,
        anthropic.AsyncAnthropic(
            base_url="http://proxy", http_client=http, max_retries=0, **options
        ) as client,
    ):
        yield client


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with sdk_on(app, api_key="sk-ant-client") as client:
        yield client


async def test_an_uncompacted_request_goes_byte_for_byte(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="Hello."))
    raw = (
        b'{"model": "claude-sonnet-4-6", "max_tokens": 64,  "system": [{"type": "text", '
        b'"text": "Be brief.", "cache_control": {"type": "ephemeral"}}], "top_k": 3, '
        b'"messages": [{"role": "user", "content": "hi"}]}'
    )
    response = await client.post(f"{MESSAGES}?beta=true", content=raw, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert upstream.last.body == raw
    assert upstream.last.path == MESSAGES
    assert upstream.last.query == "beta=true"
    assert response.json()["type"] == "message"
    assert response.json()["content"][0]["text"] == "Hello."
    assert response.headers["x-compaction-applied"] == "none"
    assert response.headers["x-session-id"]
    assert int(response.headers["x-compaction-tokens-before"]) > 0


async def test_the_sdk_reads_a_message_and_a_stream(
    sdk: anthropic.AsyncAnthropic, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="Whole answer."), Reply(content="Streamed answer."))
    raw = await sdk.messages.with_raw_response.create(**request(user("hi")))
    message = await raw.parse()
    assert message.content[0].type == "text"
    assert message.content[0].text == "Whole answer."
    assert raw.headers["x-compaction-applied"] == "none"
    body = request(user("hi"), assistant("Whole answer."), user("more"))
    async with sdk.messages.stream(**body) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Streamed answer."
    assert final.stop_reason == "end_turn"
    assert upstream.last.header("authorization") == "Bearer sk-ant-client"
    assert upstream.last.header("anthropic-version") is not None  # the SDK's own, forwarded


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"model": "m", "max_tokens": 9}', "messages"),
        (b'{"model": "m", "max_tokens": 9, "messages": {"role": "user"}}', "messages"),
        (b"not json", "JSON"),
        (b'["messages"]', "JSON object"),
    ],
)
async def test_what_cannot_be_read_is_an_anthropic_shaped_400(
    client: httpx.AsyncClient, upstream: MockUpstream, raw: bytes, words: str
) -> None:
    response = await client.post(MESSAGES, content=raw, headers=HEADERS)
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]
    assert upstream.requests == []


async def test_the_sdk_shows_the_proxys_own_error(sdk: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        await sdk.messages.create(model=MODEL, max_tokens=9, messages="hi")  # type: ignore[arg-type]
    assert "messages" in raised.value.message
    assert raised.value.body == {"type": "error", "error": raised.value.body["error"]}  # type: ignore[index]


async def test_claude_codes_probe_of_the_base_url_is_answered(client: httpx.AsyncClient) -> None:
    assert (await client.head("/")).status_code == 200
    assert (await client.get("/")).json()["status"] == "ok"


async def test_compaction_off_and_provider_edits_are_forwarded_untouched(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    clearing = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    raw = json.dumps(request(user("hi"), context_management=clearing)).encode()
    edited = await client.post(MESSAGES, content=raw, headers=HEADERS)
    assert edited.status_code == 200, edited.text
    assert edited.headers["x-compaction-applied"] == "provider_edits"
    assert upstream.last.body == raw
    keeping = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    claude_code = await client.post(
        MESSAGES, json=request(user("hi"), context_management=keeping), headers=HEADERS
    )
    assert claude_code.headers["x-compaction-applied"] == "none"  # compacted as any other
    off = await client.post(
        MESSAGES, json=request(user("hi")), headers={**HEADERS, "x-compaction": "off"}
    )
    assert off.status_code == 200
    assert "x-compaction-applied" not in off.headers


async def test_the_operator_may_compact_what_asks_for_provider_edits(
    upstream_url: str, upstream: MockUpstream
) -> None:
    settings = make_settings(upstream_url, messages={"context_management": "proxy"})
    app = create_app(settings)
    clearing = {"edits": [{"type": "compact_20260112"}]}
    async with LifespanManager(app), sdk_on(app, api_key="sk-ant-client") as sdk:
        raw = await sdk.messages.with_raw_response.create(
            **request(user("hi")), extra_body={"context_management": clearing}
        )
    assert raw.headers["x-compaction-applied"] == "none"
    assert upstream.last.json()["context_management"] == clearing  # still forwarded


async def test_the_log_line_and_the_metrics_name_the_api(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        await client.post(MESSAGES, json=request(user("hi")), headers=HEADERS)
    [line] = [r for r in caplog.records if r.name == "proxy.access"]
    assert (line.getMessage(), getattr(line, "api", None)) == ("message", "messages")
    metrics = (await client.get("/metrics")).text
    assert 'route="messages",status="200"' in metrics


async def test_count_tokens_is_the_providers_when_it_has_the_endpoint(
    sdk: anthropic.AsyncAnthropic, upstream: MockUpstream
) -> None:
    raw = await sdk.messages.with_raw_response.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "How long is this?"}]
    )
    counted = await raw.parse()
    assert counted.input_tokens > 0
    assert "x-compaction-proxy-count" not in raw.headers
    assert upstream.last.path == "/v1/messages/count_tokens"


async def test_count_tokens_is_the_proxys_when_the_provider_lacks_it(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    upstream.messages_count_tokens = False
    body = {"model": MODEL, "messages": [user("How long is this? " * 50)], "tools": [READ_FILE]}
    response = await client.post("/v1/messages/count_tokens?beta=true", json=body, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction-proxy-count"] == "estimated"
    estimated = response.json()["input_tokens"]
    upstream.messages_count_tokens = True
    exact = (await client.post("/v1/messages/count_tokens", json=body, headers=HEADERS)).json()
    assert estimated >= exact["input_tokens"]  # the approximate count errs high
    upstream.messages_count_tokens = False
    unread = await client.post("/v1/messages/count_tokens", content=b"[]", headers=HEADERS)
    assert unread.json()["type"] == "error"


async def test_a_conversation_that_cannot_fit_gets_anthropics_overflow_words(
    upstream_url: str, upstream: MockUpstream
) -> None:
    settings = make_settings(upstream_url, context={"context_window": 2000})
    app = create_app(settings)
    async with LifespanManager(app), sdk_on(app, api_key="sk-ant-client") as sdk:
        # An answer's usage calibrates the approximate count first: until then the proxy
        # refuses nothing on it (next test).
        await sdk.messages.create(**request(user("hi"), system="Rule. " * 200, max_tokens=500))
        await app.state.service.settle()
        with pytest.raises(anthropic.BadRequestError) as raised:
            await sdk.messages.create(**request(user("hi"), system="Rule. " * 3000, max_tokens=500))
    error = raised.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ")
    assert "> 1500 maximum" in error["message"]
    assert len(upstream.requests) == 1  # the calibrating one: the refused one never left


async def test_an_estimate_no_answer_calibrated_yet_refuses_nothing(
    upstream_url: str, upstream: MockUpstream
) -> None:
    # Claude models have no public tokenizer: the proxy's approximate count errs high (by half
    # on Claude Code's head). A head it counts over the room, the provider's count under it:
    # the first request is forwarded and answered, and its usage calibrates the count.
    settings = make_settings(upstream_url, context={"context_window": 9000})
    app = create_app(settings)
    head = " ".join(f"rule{n}: keep the field {n} as written." for n in range(700))
    async with LifespanManager(app), sdk_on(app, api_key="sk-ant-client") as sdk:
        counter = app.state.service.counter_for(MODEL)
        assert counter.text(head) > 9000 - 500  # over the room, by the proxy's estimate
        first = await sdk.messages.create(**request(user("hi"), system=head, max_tokens=500))
        await app.state.service.settle()
        second = await sdk.messages.create(**request(user("hi"), system=head, max_tokens=500))
    assert first.usage.input_tokens < 9000 - 500  # under it, by the provider's count
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert [r.path for r in upstream.requests if r.path == MESSAGES] == [MESSAGES] * 2


@pytest.mark.parametrize("counts", [True, False])
async def test_a_first_request_the_estimate_would_compact_is_counted_by_the_provider(
    upstream_url: str, upstream: MockUpstream, counts: bool
) -> None:
    # Over Messages, aider's files at 0.77 of the usable input read as 1.18 by the estimate,
    # and the first request was truncated. The provider's count calibrates it first; a
    # provider without count_tokens leaves the estimate, which compacts.
    upstream.messages_count_tokens = counts
    settings = make_settings(upstream_url, context={"context_window": 9000})
    app = create_app(settings)
    head = " ".join(f"rule{n}: keep the field {n} as written." for n in range(560))
    turns = [m for n in range(6) for m in (user(f"step {n} " * 40), assistant(f"done {n} " * 40))]
    async with LifespanManager(app), sdk_on(app, api_key="sk-ant-client") as sdk:
        raw = await sdk.messages.with_raw_response.create(
            **request(*turns, user("go on"), system=head, max_tokens=500)
        )
        # Calibrated (by the count, or by the answer's usage): the next asks for no count.
        await app.state.service.settle()
        await sdk.messages.create(**request(*turns, user("go on"), system=head, max_tokens=500))
    applied = raw.headers["x-compaction-applied"]
    paths = [r.path for r in upstream.requests]
    assert paths[0] == "/v1/messages/count_tokens"
    assert paths.count("/v1/messages/count_tokens") == 1
    if counts:
        assert (applied, paths[1]) == ("none", MESSAGES)
    else:
        assert applied != "none"


@pytest.mark.parametrize("failure", ["refused", "implausible", "down"])
async def test_a_count_the_provider_cannot_give_leaves_the_estimate(
    upstream_url: str, upstream: MockUpstream, failure: str
) -> None:
    # A count refused (the client's roles do not alternate: the proxy merges them before it
    # forwards), one no tokenizer could give (a tenth of ours), or no provider at all: the
    # estimate stands, and the request is handled as before.
    upstream.roles_alternate = failure == "refused"
    upstream.token_factor = 0.1 if failure == "implausible" else 1.0
    url = "http://127.0.0.1:9/v1" if failure == "down" else upstream_url
    settings = make_settings(url, context={"context_window": 9000})
    app = create_app(settings)
    head = " ".join(f"rule{n}: keep the field {n} as written." for n in range(560))
    turns = [m for n in range(6) for m in (user(f"step {n} " * 40), assistant(f"done {n} " * 40))]
    asked = [*turns, user("go on"), user("and then stop")]
    async with LifespanManager(app), sdk_on(app, api_key="sk-ant-client") as sdk:
        if failure == "down":
            with pytest.raises(anthropic.APIStatusError):
                await sdk.messages.create(**request(*asked, system=head, max_tokens=500))
            return
        raw = await sdk.messages.with_raw_response.create(
            **request(*asked, system=head, max_tokens=500)
        )
    assert raw.headers["x-compaction-applied"] != "none"
    assert upstream.requests[0].path == "/v1/messages/count_tokens"


async def test_the_proxys_own_key_goes_upstream_as_x_api_key(
    upstream_url: str, upstream: MockUpstream
) -> None:
    settings = make_settings(
        upstream_url,
        upstream={"base_url": upstream_url, "api_key": "sk-ant-proxy"},
        auth={"keys": {"sk-ant-client": "team-a"}},
    )
    app = create_app(settings)
    async with LifespanManager(app):
        async with sdk_on(app, api_key="sk-ant-client") as sdk:
            await sdk.messages.create(**request(user("hi")))
            await sdk.messages.count_tokens(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        for recorded in upstream.requests:
            assert recorded.header("x-api-key") == "sk-ant-proxy"
            assert recorded.header("authorization") is None
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            claude_code = await http.post(
                MESSAGES, json=request(user("hi")), headers=HEADERS | {"x-api-key": "sk-ant-client"}
            )
            assert claude_code.status_code == 200
            wrong = await http.post(
                MESSAGES, json=request(user("hi")), headers=HEADERS | {"x-api-key": "sk-wrong"}
            )
            counted = await http.post(
                "/v1/messages/count_tokens",
                json={"model": MODEL, "messages": [user("hi")]},
                headers=HEADERS | {"x-api-key": "sk-wrong"},
            )
    assert wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"
    assert counted.status_code == 401
    assert counted.json()["type"] == "error"
