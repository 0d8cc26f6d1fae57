"""The recall rounds when something goes wrong: the model calls `context_recall` badly, the
upstream answers a round with an error or with bytes that are no answer, a stream carries
keep-alives or ends without its blank line, the rounds run out while streaming, and recalled
content names an id this conversation does not hold.

The mock provider plays the model (`Reply`); `Tampered` stands in front of it to give the
answers a real provider or gateway sometimes gives and the mock never does.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.upstream import UpstreamRequest
from proxy.core.recall import ids_in, reference
from proxy.mock_upstream import MockUpstream, Reply, ToolCall
from proxy.mock_upstream.summarizer import is_summary_request
from proxy.service.recalls import _events
from proxy.web import create_app
from tests.conftest import make_settings
from tests.service.agent_run import TOOLS
from tests.service.recall_history import (
    CONTEXT,
    HIDDEN,
    RECALL_ID,
    WINDOW,
    compacted_ids,
    history,
    offered_tools,
    recall,
)

_ANSWERED = frozenset({"/v1/chat/completions", "/v1/responses"})
REFUSED = json.dumps({"error": {"message": "overloaded", "type": "server_error"}}).encode()


@dataclass(frozen=True, slots=True)
class Raw:
    """An answer the mock never gives: these bytes, under this status."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"


class Tampered:
    """The mock provider, with its next answers given by the test (`instead`): a `Raw`
    answers the request itself (kept in `answered`, the mock never sees it), None lets the
    mock answer. The proxy's summary requests always reach the mock."""

    def __init__(self, mock: MockUpstream) -> None:
        self._mock = mock
        self._instead: deque[Raw | None] = deque()
        self.answered: list[dict[str, Any]] = []

    def instead(self, *answers: Raw | None) -> None:
        self._instead.extend(answers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in _ANSWERED:
            await self._mock.app(scope, receive, send)
            return
        body = await _body(receive)
        raw = None
        if self._instead and not is_summary_request(json.loads(body)):
            raw = self._instead.popleft()
        if raw is None:
            await self._mock.app(scope, _replayed(body, receive), send)
            return
        self.answered.append(json.loads(body))
        headers = [(b"content-type", raw.content_type.encode())]
        await send({"type": "http.response.start", "status": raw.status, "headers": headers})
        await send({"type": "http.response.body", "body": raw.body})


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replayed(body: bytes, receive: Receive) -> Receive:
    """`receive` with the request's body, already read, given again first."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(window=WINDOW, strict=True)


@pytest.fixture
def tampered(provider: MockUpstream) -> Tampered:
    return Tampered(provider)


@pytest.fixture
async def app(tampered: Tampered) -> AsyncIterator[FastAPI]:
    # In process: the upstream's reads are the chunks its app sent, the same on every run (a
    # socket's would be split as the kernel chose: tests/gates.py).
    settings = make_settings("http://unused.invalid/v1", context=CONTEXT)
    application = create_app(settings, upstream=AsgiUpstream(tampered))
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport,
        base_url="http://proxy",
        headers={"authorization": "Bearer sk-edges"},
        timeout=30,
    ) as client:
        yield client


@pytest.fixture
async def sdk(http: httpx2.AsyncClient) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        api_key="sk-edges", base_url="http://proxy/v1", http_client=http, max_retries=0
    ) as client:
        yield client


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode()


async def _streamed(http: httpx2.AsyncClient, messages: list[Any]) -> tuple[bytes, list[Any]]:
    """The client's stream for `messages`: its bytes, and the JSON of its chunks (before
    `[DONE]`, which must end it)."""
    body = {"model": "mock-model", "messages": messages, "tools": TOOLS, "stream": True}
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert raw.endswith(b"data: [DONE]\n\n")
    events = [e for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    return raw, [json.loads(e[6:]) for e in events]


def _text(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _finishes(chunks: list[Any]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"]
        for c in chunks
        if c["choices"] and c["choices"][0].get("finish_reason")
    ]


# --- a call that names no id -----------------------------------------------------------------


async def test_a_call_naming_no_id_is_told_how_to_name_one(
    sdk: openai.AsyncOpenAI, http: httpx2.AsyncClient, provider: MockUpstream, app: FastAPI
) -> None:
    await compacted_ids(sdk, provider)
    nameless = ToolCall("context_recall", json.dumps({"query": "secret"}), id="call_r1")
    provider.queue(Reply(content=None, tool_calls=(nameless,)), Reply(content="ok"))
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    assert answer.choices[0].message.content == "ok"
    result = provider.last.json()["messages"][-1]
    assert result == {
        "role": "tool",
        "tool_call_id": "call_r1",
        "content": 'context_recall needs the id a note names, as in context_recall(id="rc_...").',
    }
    await app.state.service.settle()
    metrics = (await http.get("/metrics")).text
    assert 'compaction_proxy_recalls_total{outcome="invalid"} 1.0' in metrics


# --- a first answer that is no chat completion -----------------------------------------------


@pytest.mark.parametrize(
    "raw", [b"<html>upstream maintenance</html>", b'["not", "an", "answer"]'], ids=["html", "list"]
)
async def test_a_first_answer_that_is_no_completion_reaches_the_client_as_it_came(
    sdk: openai.AsyncOpenAI,
    http: httpx2.AsyncClient,
    provider: MockUpstream,
    tampered: Tampered,
    raw: bytes,
) -> None:
    await compacted_ids(sdk, provider)
    before = len(provider.requests)
    tampered.instead(Raw(raw))
    body = {"model": "mock-model", "messages": history(), "tools": TOOLS}
    response = await http.post("/v1/chat/completions", json=body)
    assert (response.status_code, response.content) == (200, raw)
    assert "context_recall" in [t["function"]["name"] for t in tampered.answered[0]["tools"]]
    assert len(provider.requests) == before  # no round followed


# --- a round the upstream does not answer ----------------------------------------------------


async def test_a_refused_round_is_asked_again_as_if_nothing_was_offered_to_recall(
    sdk: openai.AsyncOpenAI,
    provider: MockUpstream,
    tampered: Tampered,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = await compacted_ids(sdk, provider)
    before = len(provider.requests)
    provider.queue(
        Reply(content="Let me look. ", tool_calls=(recall(ids[0]),)),
        Reply(content="The secret word is not in what I have."),
    )
    tampered.instead(None, Raw(REFUSED, status=500))
    with caplog.at_level(logging.WARNING, logger="proxy.recall"):
        answer = await sdk.chat.completions.create(
            model="mock-model", messages=history("What is the secret word?"), tools=TOOLS
        )
    # The undone round's text is not put in front: the answer is the retry's alone.
    message = answer.choices[0].message
    assert message.content == "The secret word is not in what I have."
    assert not message.tool_calls
    assert answer.choices[0].finish_reason == "stop"
    # The refused round carried the recalled content; the retry is the first request again,
    # without the tool.
    (refused,) = tampered.answered
    assert HIDDEN in refused["messages"][-1]["content"]
    first, retry = provider.requests[before].json(), provider.last.json()
    assert len(provider.requests) - before == 2
    assert retry["messages"] == first["messages"]
    assert "context_recall" in offered_tools(provider, before)
    assert "context_recall" not in offered_tools(provider, -1)
    assert "a recall round got 500 from the upstream" in caplog.text


@pytest.mark.parametrize(
    "raw", [b"<html>bad gateway</html>", b'["not", "an", "answer"]'], ids=["html", "list"]
)
async def test_a_round_answered_with_no_completion_is_asked_again_without_recall(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, tampered: Tampered, raw: bytes
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(
        Reply(content=None, tool_calls=(recall(ids[0]),)), Reply(content="Answered anyway.")
    )
    tampered.instead(None, Raw(raw))
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    assert answer.choices[0].message.content == "Answered anyway."
    assert len(tampered.answered) == 1
    assert "context_recall" not in offered_tools(provider, -1)


async def test_when_the_retry_is_refused_too_the_client_gets_the_first_answer_clean(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, tampered: Tampered
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(Reply(content="Let me look. ", tool_calls=(recall(ids[0]),)))
    tampered.instead(None, Raw(REFUSED, status=500), Raw(REFUSED, status=503))
    answer = await sdk.chat.completions.create(model="mock-model", messages=history(), tools=TOOLS)
    choice = answer.choices[0]
    assert choice.message.content == "Let me look. "
    assert not choice.message.tool_calls  # the proxy's call never reaches the client
    assert choice.finish_reason == "stop"
    assert len(tampered.answered) == 2
    assert "context_recall" not in [t["function"]["name"] for t in tampered.answered[1]["tools"]]


# --- streams ---------------------------------------------------------------------------------


async def test_a_streams_keep_alives_and_an_unterminated_last_event_reach_the_client(
    sdk: openai.AsyncOpenAI, http: httpx2.AsyncClient, provider: MockUpstream, tampered: Tampered
) -> None:
    """Comments are relayed as they came; a stream that ends without its last blank line
    (and without `[DONE]`) still gives the client its last event, the finish, and `[DONE]`."""
    await compacted_ids(sdk, provider)
    upstream = b"".join(
        [
            b": keep-alive\n\n",
            _chunk({"role": "assistant", "content": "Port "}) + b"\n\n",
            b": keep-alive\n\n",
            _chunk({"content": "8080."}) + b"\n\n",
            _chunk({}, finish="stop"),
        ]
    )
    tampered.instead(Raw(upstream, content_type="text/event-stream"))
    raw, chunks = await _streamed(http, history())
    assert raw.count(b": keep-alive\n\n") == 2
    assert _text(chunks) == "Port 8080."
    assert _finishes(chunks) == ["stop"]


async def test_events_that_come_in_one_read_go_to_the_client_in_one_write(
    sdk: openai.AsyncOpenAI, app: FastAPI, provider: MockUpstream, tampered: Tampered
) -> None:
    """A provider often sends several events at once; each write to the client costs the
    proxy a pass through the server's stack and a system call, so the events one read
    brought go out together (the rewritten finish and `[DONE]` in one more write)."""
    await compacted_ids(sdk, provider)
    words = [f"word{n} " for n in range(12)]
    upstream = b"".join(
        [
            _chunk({"role": "assistant", "content": ""}) + b"\n\n",
            *(_chunk({"content": word}) + b"\n\n" for word in words),
            _chunk({}, finish="stop") + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )
    tampered.instead(Raw(upstream, content_type="text/event-stream"))
    writes: list[bytes] = []

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        async def sent(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                writes.append(message["body"])
            await send(message)

        await app(scope, receive, sent)

    body = {"model": "mock-model", "messages": history(), "tools": TOOLS, "stream": True}
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=counted), base_url="http://proxy"
    ) as client:
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-edges"}
        )
    assert response.content == b"".join(writes)
    chunks = [json.loads(e[6:]) for e in response.content.split(b"\n\n") if e[:7] == b"data: {"]
    assert _text(chunks) == "".join(words)
    assert _finishes(chunks) == ["stop"]
    assert response.content.endswith(b"data: [DONE]\n\n")
    # The 14 events came in one write: a read or two on the proxy's side, by the socket.
    assert len(writes) <= 3, [write[:60] for write in writes]
    # Text the rewriting leaves as it was goes on as the provider's own bytes.
    for word in words:
        assert _chunk({"content": word}) + b"\n\n" in response.content


async def test_a_read_that_ends_inside_an_event_waits_for_the_rest() -> None:
    """The events a read completes go on together; a read ending mid-event adds nothing."""
    first, second = _chunk({"content": "a"}) + b"\n\n", _chunk({"content": "b"}) + b"\n\n"
    reads = [first[:20], first[20:] + second[:9], second[9:] + b"data: [DONE]\n\n"]

    async def provider(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for read in reads:
            await send({"type": "http.response.body", "body": read, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    upstream = AsgiUpstream(provider)
    await upstream.open()
    try:
        response = await upstream.send(UpstreamRequest("POST", "x", "", []))
        batches = [[event for _, event in batch] async for batch in _events(b"", response)]
    finally:
        await upstream.aclose()
    assert batches == [[first], [second, b"data: [DONE]\n\n"]]


async def test_a_streams_rounds_are_bounded_and_the_last_request_offers_no_recall(
    sdk: openai.AsyncOpenAI, http: httpx2.AsyncClient, provider: MockUpstream
) -> None:
    ids = await compacted_ids(sdk, provider)
    before = len(provider.requests)
    provider.queue(
        Reply(content=None, tool_calls=(recall(ids[0], "r1"),)),
        Reply(content=None, tool_calls=(recall(ids[1], "r2"),)),
        Reply(content="Still unsure.", tool_calls=(recall(ids[2], "r3"),)),
        Reply(content="never asked"),
    )
    raw, chunks = await _streamed(http, history())
    assert _text(chunks) == "Still unsure."
    assert _finishes(chunks) == ["stop"]
    assert b"context_recall" not in raw
    assert len(provider.requests) - before == 3  # the first answer and two recall rounds
    assert "context_recall" in offered_tools(provider, before + 1)
    assert "context_recall" not in offered_tools(provider, before + 2)


async def test_a_stream_whose_round_is_refused_ends_with_what_was_relayed(
    sdk: openai.AsyncOpenAI,
    http: httpx2.AsyncClient,
    provider: MockUpstream,
    tampered: Tampered,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(Reply(content="Checking. ", tool_calls=(recall(ids[0]),)))
    tampered.instead(None, Raw(REFUSED, status=503))
    with caplog.at_level(logging.WARNING, logger="proxy.recall"):
        raw, chunks = await _streamed(http, history())
    assert _text(chunks) == "Checking. "
    assert b"context_recall" not in raw
    assert b"overloaded" not in raw  # the refusal is the proxy's to handle, not the client's
    assert "a recall round got 503 from the upstream" in caplog.text


async def test_a_stream_whose_round_is_refused_still_finishes(
    sdk: openai.AsyncOpenAI, http: httpx2.AsyncClient, provider: MockUpstream, tampered: Tampered
) -> None:
    ids = await compacted_ids(sdk, provider)
    provider.queue(Reply(content="Checking. ", tool_calls=(recall(ids[0]),)))
    tampered.instead(None, Raw(REFUSED, status=503))
    _, chunks = await _streamed(http, history())
    assert _finishes(chunks) == ["stop"]


def _responses_input(messages: list[Any]) -> list[Any]:
    """`messages` (after the system prompt) as Responses API input items."""
    items: list[Any] = []
    for message in messages[1:]:
        if message.get("tool_calls"):
            items += [
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                }
                for call in message["tool_calls"]
            ]
        elif message["role"] == "tool":
            output = message["content"]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": output,
                }
            )
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items


async def test_a_responses_stream_whose_round_is_refused_still_completes(
    http: httpx2.AsyncClient, provider: MockUpstream, tampered: Tampered
) -> None:
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    body = {
        "model": "mock-model",
        "instructions": "You are an agent.",
        "input": _responses_input(history()),
        "tools": tools,
        "store": False,
        "stream": True,
    }
    provider.queue(Reply(content="Port 8080."))
    async with http.stream("POST", "/v1/responses", json=body) as response:
        await response.aread()
    (rid, *_) = RECALL_ID.findall(provider.last.body.decode().replace('\\"', '"'))
    provider.queue(Reply(content="Checking. ", tool_calls=(recall(rid),)))
    tampered.instead(None, Raw(REFUSED, status=503))
    async with http.stream("POST", "/v1/responses", json=body) as response:
        raw = await response.aread()
    assert b"Checking. " in raw
    assert b"event: response.completed" in raw


# --- recalled content naming ids -------------------------------------------------------------


async def test_an_id_quoted_from_another_conversation_is_not_expanded(
    app: FastAPI, provider: MockUpstream
) -> None:
    """A result of conversation B quotes a reference of conversation A (a log it read):
    recalling that result gives it back as it was, the quoted id not followed into A."""
    async with openai.AsyncOpenAI(
        api_key="sk-edges",
        base_url="http://proxy/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    ) as sdk:
        quoted = reference((await compacted_ids(sdk, provider))[0])
        other = history()
        other[1] = {"role": "user", "content": "A different task: read the logs."}
        log = [f"line {i}: the service started on port 8080" for i in range(60)]
        other[3] = {**other[3], "content": "\n".join([*log, f"last session: {quoted}"])}
        await compacted_ids(sdk, provider, other)
        (placeholder,) = [
            m["content"]
            for m in provider.last.json()["messages"]
            if m.get("tool_call_id") == "call_0"
        ]
        (own,) = ids_in(placeholder)
        provider.queue(Reply(content=None, tool_calls=(recall(own),)), Reply(content="ok"))
        await sdk.chat.completions.create(model="mock-model", messages=other, tools=TOOLS)
    result = provider.last.json()["messages"][-1]["content"]
    assert result == other[3]["content"]
    assert HIDDEN not in result
