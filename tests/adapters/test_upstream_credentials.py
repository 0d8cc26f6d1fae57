"""Credentials in `upstream.base_url` (`http://user:pass@host/v1`) and `redis.url`: sent as
they should be, never shown in a log line, an error or the config API."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import openai
import pytest
import redis
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.store import StoreUnavailableError, open_store
from proxy.mock_upstream import MockUpstream
from proxy.settings import RedisSettings, Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_server import RedisServer
from tests.servers import free_port, proxy_process, serve_in_thread

SECRET = "s3cr3t-pa55"
BASIC = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def with_credentials(url: str, userinfo: str = f"user:{SECRET}") -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{userinfo}@{rest}"


@pytest.fixture
def caught(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)


@asynccontextmanager
async def started(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(settings)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            yield client


# -- the upstream ----------------------------------------------------------------------------


async def test_url_credentials_go_upstream_as_basic_auth_in_place_of_the_clients(
    upstream: MockUpstream, upstream_url: str, caught: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(with_credentials(upstream_url))
    async with started(settings) as client:
        chat = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-client"}
        )
        assert chat.status_code == 200, chat.text
        assert upstream.last.header("authorization") == BASIC
        assert upstream.last.path == "/v1/chat/completions"
        models = await client.get("/v1/models", headers={"authorization": "Bearer sk-client"})
        assert models.status_code == 200
        assert upstream.last.header("authorization") == BASIC
        await client.post("/v1/chat/completions", json=CHAT)  # no client credential at all
        assert upstream.last.header("authorization") == BASIC
    assert SECRET not in logged(caught)


async def test_without_url_credentials_the_clients_authorization_goes_through(
    upstream: MockUpstream, upstream_url: str
) -> None:
    async with started(make_settings(upstream_url)) as client:
        await client.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-client"}
        )
    assert upstream.last.header("authorization") == "Bearer sk-client"


async def test_unreachable_upstream_error_and_log_hide_the_password(
    caught: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(with_credentials(f"http://127.0.0.1:{free_port()}/v1"))
    async with started(settings) as client:
        response = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-client"}
        )
        assert response.status_code == 502
        message = response.json()["error"]["message"]
        assert "http://user:***@127.0.0.1" in message
        assert SECRET not in response.text
        assert (await client.get("/readyz")).status_code == 200
    assert SECRET not in logged(caught)


async def test_config_api_shows_the_summarizer_url_without_its_password(
    upstream_url: str,
) -> None:
    brain = {"base_url": with_credentials(upstream_url)}
    settings = make_settings(
        upstream_url, context={"summary_brain": brain}, admin={"token": "admin-token"}
    )
    async with started(settings) as client:
        response = await client.get(
            "/v1/compaction/config", headers={"authorization": "Bearer admin-token"}
        )
    assert response.status_code == 200, response.text
    assert response.json()["summary_brain"]["base_url"] == with_credentials(
        upstream_url, "user:***"
    )
    assert SECRET not in response.text


# -- the process: the SDK through `serve`, and its startup log -------------------------------


def test_serve_with_url_credentials_answers_the_sdk_and_logs_no_password(tmp_path: Path) -> None:
    upstream = MockUpstream()
    log = tmp_path / "proxy.log"
    with (
        serve_in_thread(upstream.app) as upstream_base,
        log.open("wb") as stderr,
        proxy_process(
            ["--upstream", with_credentials(f"{upstream_base}/v1")], stderr=stderr
        ) as url,
        openai.OpenAI(api_key="sk-sdk", base_url=f"{url}/v1", max_retries=0) as sdk,
    ):
        reply = sdk.chat.completions.create(model="gpt-4o-mini", messages=CHAT["messages"])  # type: ignore[arg-type]
        assert reply.choices[0].message.content
    assert upstream.last.header("authorization") == BASIC
    text = log.read_text()
    assert "forwarding to http://user:***@127.0.0.1" in text
    assert SECRET not in text


# -- Redis -----------------------------------------------------------------------------------


@pytest.fixture
def password_redis(redis_server: RedisServer) -> RedisServer:
    with redis.Redis(unix_socket_path=str(redis_server.socket)) as raw:
        raw.config_set("requirepass", SECRET)
    return redis_server


async def test_redis_url_with_a_password_connects(password_redis: RedisServer) -> None:
    store = open_store(RedisSettings(url=f"unix://:{SECRET}@{password_redis.socket}"))
    try:
        await store.ping()
        await store.begin_turn("t", "s", model="m", at=1.0)
        assert await store.load_session("t", "s") is not None
    finally:
        await store.aclose()


async def test_redis_wrong_password_error_does_not_show_it(password_redis: RedisServer) -> None:
    store = open_store(RedisSettings(url=f"unix://:wrong-{SECRET}@{password_redis.socket}"))
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            await store.ping()
        assert SECRET not in str(raised.value)
    finally:
        await store.aclose()


def test_serve_startup_log_hides_the_redis_password(
    password_redis: RedisServer, tmp_path: Path
) -> None:
    log = tmp_path / "proxy.log"
    with (
        log.open("wb") as stderr,
        proxy_process(
            ["--redis", f"unix://:{SECRET}@{password_redis.socket}"], stderr=stderr
        ) as url,
    ):
        assert httpx.get(f"{url}/readyz").status_code == 200
    text = log.read_text()
    assert "store: redis at unix://:***@/" in text
    assert SECRET not in text
