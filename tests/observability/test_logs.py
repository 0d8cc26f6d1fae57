"""The log: one JSON object per line, one `proxy.access` line per chat completion with its
numbers and without the conversation or the credential (unless `log.content: true`)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.errors import ConfigError
from proxy.mock_upstream import MockUpstream, Reply
from proxy.observability.logs import JsonFormatter, RefusedHandshakeNoise, TextFormatter
from proxy.service.access import CONTENT_CHARS
from proxy.settings import Settings, load_settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import proxy_process, serve, serve_in_thread

CHAT = "/v1/chat/completions"
API_KEY = "sk-planted-credential-4242"
SECRET = "PLANTED-CONTENT the launch code is 0000"
FIELDS = {
    "api",
    "session",
    "tenant",
    "model",
    "stream",
    "status",
    "action",
    "tokens_before",
    "tokens_after",
    "pressure",
    "latency_ms",
    "upstream_ms",
    "overhead_ms",
}


def body(content: str = SECRET, **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": content},
    ]
    return {"model": "gpt-4o-mini", "messages": messages, **extra}


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    """What the proxy's loggers write, formatted as `serve` formats it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("proxy")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def access_lines(log: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "proxy.access"]


async def post(http: httpx.AsyncClient, payload: dict[str, Any]) -> httpx.Response:
    return await http.post(CHAT, json=payload, headers={"authorization": f"Bearer {API_KEY}"})


async def test_a_chat_completion_logs_one_line_with_its_numbers(
    client: httpx.AsyncClient, log: io.StringIO
) -> None:
    response = await post(client, body())
    [line] = access_lines(log)
    assert set(line) >= FIELDS
    assert {"time", "level", "message"} <= set(line)
    assert line["level"] == "info"
    assert line["session"] == response.headers["x-session-id"]
    assert re.fullmatch("[0-9a-f]{8}", line["tenant"])
    assert line["model"] == "gpt-4o-mini"
    assert (line["status"], line["action"], line["stream"]) == (200, "none", False)
    assert line["tokens_before"] == int(response.headers["x-compaction-tokens-before"])
    assert line["tokens_after"] == int(response.headers["x-compaction-tokens-after"])
    assert line["pressure"] == pytest.approx(float(response.headers["x-context-pressure"]))
    assert line["latency_ms"] >= line["upstream_ms"] > 0
    assert 0 <= line["overhead_ms"] <= line["latency_ms"]
    # Nothing of the conversation and nothing of the credential, anywhere in the log.
    assert "content" not in line
    assert "PLANTED" not in log.getvalue()
    assert API_KEY not in log.getvalue()


async def test_log_content_true_logs_the_last_user_message_cut_short(
    upstream_url: str, log: io.StringIO
) -> None:
    app = create_app(make_settings(upstream_url, log={"content": True}))
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as http,
    ):
        await post(http, body())
        await post(http, body(SECRET + " and more" * 200))
    short, long = access_lines(log)
    assert short["content"] == SECRET
    assert long["content"].startswith(SECRET)
    assert len(long["content"]) == CONTENT_CHARS + 1  # and the ellipsis
    assert API_KEY not in log.getvalue()


async def test_a_failed_request_is_logged_with_its_status(
    client: httpx.AsyncClient, upstream: MockUpstream, log: io.StringIO
) -> None:
    assert (await client.post(CHAT, content=b"{not json")).status_code == 400
    upstream.queue(Reply(status=429, error={"error": {"message": "slow down"}}))
    assert (await post(client, body())).status_code == 429
    unparsed, limited = access_lines(log)
    assert (unparsed["status"], unparsed["model"], unparsed["session"]) == (400, None, None)
    assert unparsed["overhead_ms"] is None  # no answer was ever ready
    assert (limited["status"], limited["action"]) == (429, "none")


@pytest.mark.parametrize(
    ("path", "api", "message"),
    [
        (CHAT, "chat", "chat completion"),
        ("/v1/responses", "responses", "response"),
        ("/v1/messages?beta=true", "messages", "message"),
    ],
)
async def test_a_body_that_does_not_parse_is_logged_as_its_routes_api(
    client: httpx.AsyncClient, log: io.StringIO, path: str, api: str, message: str
) -> None:
    assert (await client.post(path, content=b"{not json")).status_code == 400
    [line] = access_lines(log)
    assert (line["api"], line["message"], line["status"]) == (api, message, 400)


async def test_compaction_off_is_logged_as_off(client: httpx.AsyncClient, log: io.StringIO) -> None:
    headers = {"authorization": f"Bearer {API_KEY}", "x-compaction": "off"}
    await client.post(CHAT, json=body(), headers=headers)
    [line] = access_lines(log)
    assert (line["action"], line["tokens_before"], line["pressure"]) == ("off", None, None)
    assert line["upstream_ms"] > 0


async def test_a_stream_is_logged_at_its_end_and_marked_when_cut_short(
    settings: Settings, upstream: MockUpstream, log: io.StringIO
) -> None:
    upstream.queue(Reply(content="all of it"))
    upstream.queue(Reply(content="tick", endless=True, chunk_delay_s=0.01))
    async with serve(create_app(settings)) as base, httpx.AsyncClient(base_url=base) as http:
        whole = await post(http, body(stream=True))
        assert whole.text.rstrip().endswith("[DONE]")
        async with http.stream("POST", CHAT, json=body(stream=True)) as response:
            await anext(response.aiter_lines())
        for _ in range(200):  # the proxy notices the client left on its next chunk
            if len(access_lines(log)) == 2:
                break
            await asyncio.sleep(0.01)
    complete, cut = access_lines(log)
    assert (complete["stream"], complete["status"]) == (True, 200)
    assert "aborted" not in complete
    assert cut["aborted"] is True


def test_serve_writes_every_line_as_json() -> None:
    upstream = MockUpstream()
    with (
        serve_in_thread(upstream.app) as upstream_base,
        tempfile.TemporaryFile() as stderr,
    ):
        args = ["--upstream", f"{upstream_base}/v1", "--redis", "", "--log-level", "info"]
        with proxy_process(args, stderr=stderr) as base:
            headers = {"authorization": f"Bearer {API_KEY}"}
            reply = httpx.post(f"{base}{CHAT}", json=body(), headers=headers, timeout=30)
            assert reply.status_code == 200
        stderr.seek(0)
        text = stderr.read().decode()
    lines = [json.loads(line) for line in text.splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    loggers = {line["logger"] for line in lines}
    assert {"proxy", "proxy.access", "uvicorn.error"} <= loggers
    assert "uvicorn.access" not in loggers  # only at debug
    assert "PLANTED" not in text
    assert API_KEY not in text


def test_json_lines_hold_extras_and_exceptions_on_one_line() -> None:
    record = logging.makeLogRecord(
        {"name": "proxy.x", "levelname": "ERROR", "msg": "failed %s", "args": ("twice",)}
    )
    record.session = "s1"
    record.odd = {1, 2}  # not JSON: written as its text
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["logger"], entry["level"], entry["message"]) == (
        "proxy.x",
        "error",
        "failed twice",
    )
    assert entry["session"] == "s1"
    assert entry["odd"] == "{1, 2}"
    assert "ValueError: boom" in entry["exception"]


def test_text_lines_put_the_extras_after_the_message() -> None:
    record = logging.makeLogRecord(
        {"name": "proxy.access", "levelname": "INFO", "msg": "chat completion"}
    )
    record.session = "s1"
    record.action = None
    record.content = 'say "hi" twice'
    line = TextFormatter().format(record)
    assert line.endswith(
        'proxy.access: chat completion session=s1 action=- content="say \\"hi\\" twice"'
    )


def test_log_format_must_be_json_or_text() -> None:
    assert load_settings(overrides={"log": {"format": "text"}}, environ={}).log.format == "text"
    with pytest.raises(ConfigError, match=r"log\.format"):
        load_settings(overrides={"log": {"format": "xml"}}, environ={})


def test_uvicorn_false_error_after_a_refused_websocket_is_dropped_alone() -> None:
    noise = RefusedHandshakeNoise()

    def record(message: str) -> logging.LogRecord:
        return logging.makeLogRecord({"name": "uvicorn.error", "msg": message})

    assert not noise.filter(record("ASGI callable returned without completing handshake."))
    assert noise.filter(record('127.0.0.1:5 - "WebSocket /v1/responses" 426'))
    assert noise.filter(record("Exception in ASGI application\n"))
