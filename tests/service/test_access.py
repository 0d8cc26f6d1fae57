"""One request's log line and timings (`service/access.py`): what is known of it (`Access`)
and the waits on the upstream (`Stopwatch`), over the real parts; and the log's content
field (only with `log.content: true`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace
from typing import Any, cast

import pytest
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.upstream import UpstreamRequest
from proxy.core import jsoncodec
from proxy.core.request import ChatRequest, parse_responses_request
from proxy.errors import AuthenticationError, UpstreamUnreachableError
from proxy.mock_upstream import MockUpstream
from proxy.observability.metrics import Metrics
from proxy.service.access import (
    CLIENT_CLOSED,
    CONTENT_CHARS,
    TENANT_CHARS,
    Access,
    Stopwatch,
    last_user_text,
)
from proxy.service.outcome import unchanged
from proxy.service.replies import Reply, buffered
from tests.builders import assistant_calls, tool_result, user
from tests.service.test_compactor import Parts, build, history, turn_of


def test_the_last_user_message_is_taken_from_the_end() -> None:
    messages = [user("first"), user("second"), assistant_calls("c1"), tool_result("c1")]
    assert last_user_text(messages) == "second"


def test_text_parts_are_joined_and_a_long_message_cut() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "a" * CONTENT_CHARS}] * 2}
    text = last_user_text([parts])
    assert text == "a" * CONTENT_CHARS + "…"


def test_no_user_message_is_none() -> None:
    assert last_user_text([{"role": "system", "content": "rules"}]) is None


# --- the Access and the Stopwatch, over the real parts ---------------------------------------


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    async for found in build():
        yield found


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="proxy.access")
    return caplog


def line(log: pytest.LogCaptureFixture) -> dict[str, Any]:
    """The one access line written: its message and its fields."""
    records = [r for r in log.records if r.name == "proxy.access"]
    assert len(records) == 1
    return {**vars(records[0]), "message": records[0].getMessage()}


def sample(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(f"compaction_proxy_{name}")
    assert value is not None
    return value


def responses_request(*, stream: bool = False) -> ChatRequest:
    body = {"model": "mock-model", "input": "hello", "stream": stream}
    return parse_responses_request(jsoncodec.dumps(body))


def test_a_request_that_did_not_parse_logs_nulls_not_guesses() -> None:
    fields = Access().fields(400)
    assert fields == {
        "api": None,
        "session": None,
        "tenant": None,
        "model": None,
        "stream": False,
        "status": 400,
        "action": None,
        "tokens_before": None,
        "tokens_after": None,
        "pressure": None,
    }


async def test_a_compacted_turn_logs_the_client_count_and_the_forwarded_one(
    parts: Parts,
) -> None:
    turn = await turn_of(parts, history(4))
    outcome = unchanged(turn)
    fields = Access(turn.request, turn, outcome).fields(200)
    assert fields["api"] == "chat"
    assert fields["session"] == "s1"
    assert fields["tenant"] == turn.tenant[:TENANT_CHARS]  # a prefix, never the whole hash
    assert fields["action"] == "none"
    assert fields["tokens_before"] == turn.budget.estimate(outcome.tokens_before)
    # What the client sent, when a checkpoint stood in for part of it, is the `sent` count.
    sent = replace(outcome, sent=outcome.tokens_before * 3, strategy="summarize")
    fields = Access(turn.request, turn, sent).fields(200)
    assert fields["tokens_before"] == turn.budget.estimate(outcome.tokens_before * 3)
    assert fields["action"] == "summarize"
    assert fields["pressure"] == round(turn.budget.pressure(outcome.tokens_after), 4)
    # A request that skipped compaction says why instead.
    assert Access(turn.request, turn, action="off").fields(200)["action"] == "off"


async def test_the_upstream_wait_is_not_counted_as_proxy_overhead(
    log: pytest.LogCaptureFixture,
) -> None:
    mock = MockUpstream(latency_s=0.1)
    upstream = AsgiUpstream(mock.app)
    await upstream.open()
    metrics = Metrics()
    watch = Stopwatch(metrics)
    request = responses_request()
    response = await watch.headers(
        upstream.send(UpstreamRequest("POST", "responses", "", [], request.raw))
    )
    reply = await watch.body(buffered(response))
    assert watch.upstream_s >= 0.1
    relayed = watch.relay(reply, Access(request, action="server_state"))
    assert relayed is reply  # a whole body: logged now
    assert sample(metrics, "upstream_latency_seconds_count") == 1
    assert sample(metrics, "overhead_seconds_sum") < 0.1  # the wait is not in it
    record = line(log)
    assert record["message"] == "response"  # the Responses API's line
    assert record["upstream_ms"] >= 100
    assert record["latency_ms"] >= record["upstream_ms"]
    await upstream.aclose()


async def test_a_failed_upstream_wait_still_counts_as_waiting() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.02)
        raise ConnectionResetError("gone")

    upstream = AsgiUpstream(broken)
    await upstream.open()
    metrics = Metrics()
    watch = Stopwatch(metrics)
    with pytest.raises(UpstreamUnreachableError):
        await watch.headers(upstream.send(UpstreamRequest("GET", "models", "", [])))
    assert watch.upstream_s >= 0.02
    # No latency sample: the histogram is of answers, and there was none.
    assert sample(metrics, "upstream_latency_seconds_count") == 0
    with pytest.raises(UpstreamUnreachableError):
        await watch.body(upstream.send(UpstreamRequest("GET", "models", "", [])))
    assert watch.upstream_s >= 0.04


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_stream_is_logged_at_its_end_and_counted_while_it_runs(
    parts: Parts, log: pytest.LogCaptureFixture
) -> None:
    turn = await turn_of(parts, history(4))
    outcome = unchanged(turn)
    metrics = Metrics()
    watch = Stopwatch(metrics)
    relayed = watch.relay(Reply(200, [], chunks(b"a", b"b")), Access(turn.request, turn, outcome))
    assert sample(metrics, "context_pressure_count") == 1  # a forwarded turn's pressure
    assert not log.records  # not yet sent
    assert not isinstance(relayed.body, bytes)
    body = relayed.body
    assert await anext(body) == b"a"
    assert sample(metrics, "active_streams") == 1
    assert [chunk async for chunk in body] == [b"b"]
    assert sample(metrics, "active_streams") == 0
    record = line(log)
    assert record["message"] == "chat completion"
    assert "aborted" not in record


async def test_a_stream_the_client_left_is_logged_as_aborted(
    log: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    relayed = Stopwatch(metrics).relay(Reply(200, [], chunks(b"a", b"b")), Access())
    assert not isinstance(relayed.body, bytes)
    body = cast(AsyncGenerator[bytes, None], relayed.body)
    assert await anext(body) == b"a"
    await body.aclose()  # what the server does when the client goes away
    assert line(log)["aborted"] is True
    assert sample(metrics, "active_streams") == 0


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (AuthenticationError("no"), 401),
        (asyncio.CancelledError(), CLIENT_CLOSED),
        (RuntimeError("a defect"), 500),
    ],
)
def test_a_request_that_raised_is_logged_with_the_status_the_client_gets(
    log: pytest.LogCaptureFixture, error: BaseException, status: int
) -> None:
    watch = Stopwatch(Metrics())
    watch.failed(Access(), error)
    record = line(log)
    assert record["status"] == status
    assert record["overhead_ms"] is None  # it never got as far as an answer


def test_above_info_no_line_is_built(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.access")
    Stopwatch(Metrics()).finish(Access(), 200)
    assert not caplog.records


def test_the_content_is_logged_only_when_asked(log: pytest.LogCaptureFixture) -> None:
    request = responses_request()
    assert "content" not in Stopwatch(Metrics()).fields(Access(request), 200)
    shown = Stopwatch(Metrics(), log_content=True)
    assert shown.fields(Access(request), 200)["content"] == "hello"
    assert "content" not in shown.fields(Access(), 400)  # nothing parsed, nothing to show
