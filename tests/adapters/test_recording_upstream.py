"""The recording upstream (`inspect`'s): the client's request kept and answered in place of
the provider, the model listing looked up for real, everything else refused.

The provider behind it is the mock, in-process; the client is the official SDK, through the
proxy app built as `serve` builds it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.recording_upstream import RECORD_HEADER, REFUSED, RecordingUpstream
from proxy.adapters.upstream import UpstreamRequest
from proxy.errors import UpstreamTimeoutError, UpstreamUnreachableError
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(window=8192, models=("mock-model",))


@pytest.fixture
async def recorder(provider: MockUpstream) -> AsyncIterator[RecordingUpstream]:
    upstream = RecordingUpstream(AsgiUpstream(provider.app), lookup_timeout_s=2.0)
    await upstream.open()
    yield upstream
    await upstream.aclose()


@pytest.fixture
async def sdk(recorder: RecordingUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    app = create_app(make_settings("http://provider.invalid/v1"), upstream=recorder)
    async with LifespanManager(app):
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
        async with openai.AsyncOpenAI(
            api_key="sk-rec",
            base_url="http://proxy/v1",
            http_client=http,
            max_retries=0,
            default_headers={RECORD_HEADER: "1"},
        ) as client:
            yield client


async def test_the_client_request_is_recorded_and_answered_in_place_of_the_provider(
    sdk: openai.AsyncOpenAI, recorder: RecordingUpstream, provider: MockUpstream
) -> None:
    completion = await sdk.chat.completions.create(model="mock-model", messages=MESSAGES)
    assert completion.choices[0].message.content == ""
    (sent,) = recorder.recorded
    assert (sent.method, sent.path) == ("POST", "chat/completions")
    assert sent.json() == {"model": "mock-model", "messages": MESSAGES}
    assert ("authorization", "Bearer sk-rec") in sent.headers
    assert all(name.lower() != RECORD_HEADER for name, _ in sent.headers)
    # The provider was asked for the model's window, and for nothing else.
    assert [(r.method, r.path) for r in provider.requests] == [("GET", "/v1/models")]
    assert recorder.lookups == ["asgi://in-process/v1/models answered 200"]


async def test_streams_are_answered_as_the_sdk_reads_them(
    sdk: openai.AsyncOpenAI, recorder: RecordingUpstream
) -> None:
    stream = await sdk.chat.completions.create(model="mock-model", messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in stream]
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == ["stop"]
    # What the service forwards for a stream: the usage chunk asked for (and hidden again).
    assert recorder.recorded[-1].json()["stream_options"] == {"include_usage": True}
    events = await sdk.responses.create(model="mock-model", input="hi", stream=True)
    kinds = [event.type async for event in events]
    assert kinds == ["response.created", "response.completed"]
    response = await sdk.responses.create(model="mock-model", input="hi")
    assert response.status == "completed"
    assert [r.path for r in recorder.recorded] == ["chat/completions", "responses", "responses"]


def summary_request() -> UpstreamRequest:
    body = json.dumps({"model": "mock-model", "messages": MESSAGES}).encode()
    return UpstreamRequest("POST", "chat/completions", "", [("authorization", "Bearer k")], body)


async def test_any_other_request_is_refused_and_never_sent(
    recorder: RecordingUpstream, provider: MockUpstream
) -> None:
    with pytest.raises(UpstreamUnreachableError) as refused:
        await recorder.send(summary_request())
    assert REFUSED in refused.value.message
    assert not provider.requests
    assert not recorder.recorded


async def test_a_silent_model_listing_times_out() -> None:
    slow = MockUpstream(latency_s=5.0)
    recorder = RecordingUpstream(AsgiUpstream(slow.app), lookup_timeout_s=0.05)
    await recorder.open()
    try:
        with pytest.raises(UpstreamTimeoutError):
            await recorder.send(UpstreamRequest("GET", "models", "", []))
    finally:
        await recorder.aclose()
    assert recorder.lookups == ["asgi://in-process/v1/models did not answer in 0.05 s"]


async def failing(scope: Scope, receive: Receive, send: Send) -> None:
    await asyncio.sleep(0)
    raise OSError("connection refused")


async def test_an_unreachable_model_listing_is_reported_as_such() -> None:
    recorder = RecordingUpstream(AsgiUpstream(failing))
    await recorder.open()
    try:
        with pytest.raises(UpstreamUnreachableError):
            await recorder.send(UpstreamRequest("GET", "models", "", []))
    finally:
        await recorder.aclose()
    (lookup,) = recorder.lookups
    assert lookup.startswith("asgi://in-process/v1/models: The in-process upstream failed")


async def test_it_sends_nothing_before_open_or_after_close(provider: MockUpstream) -> None:
    recorder = RecordingUpstream(AsgiUpstream(provider.app))
    with pytest.raises(RuntimeError):
        await recorder.send(summary_request())
    await recorder.open()
    assert recorder.is_open
    await recorder.aclose()
    assert not recorder.is_open
    with pytest.raises(RuntimeError):
        await recorder.send(UpstreamRequest("GET", "models", "", []))
