"""`auth.keys`: with the proxy holding the upstream key, each client key is its own tenant,
and a key the proxy does not know gets a 401 and nothing from the upstream. Against the real
app, a mock upstream on a real socket and a private redis-server."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
import redis.asyncio as redis
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.settings import Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_server import RedisServer

UPSTREAM_KEY = "sk-proxy-upstream-key-0001"
KEY_A = "sk-team-a-key-4f0c2a9e"  # configured by its hash
KEY_B = "sk-team-b-key-81d3b7c6"  # configured plain
UNKNOWN = "sk-nobody-key-55aa"
ADMIN = "admin-secret-token"
MODEL = "mock-model"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


KEYS = {f"sha256:{sha256(KEY_A)}": "team-a", KEY_B: "team-b"}


@pytest.fixture
async def settings(upstream_url: str, redis_server: RedisServer) -> Settings:
    return make_settings(
        upstream_url,
        upstream={"base_url": upstream_url, "api_key": UPSTREAM_KEY},
        redis={"url": redis_server.url},
        context={"context_window": 100_000},  # known: no /v1/models lookup muddles counts
        admin={"token": ADMIN},
        auth={"keys": KEYS},
    )


@pytest.fixture
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        yield http


async def chat(app: FastAPI, key: str, session: str) -> None:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(api_key=key, base_url="http://proxy/v1", http_client=http) as sdk:
        await sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"hello from {session}"}],
            extra_headers={"x-session-id": session},
        )
    service: ProxyService = app.state.service
    await service.settle()


async def session_ids(api: httpx.AsyncClient, key: str) -> list[str]:
    response = await api.get("/v1/compaction/sessions", headers=bearer(key))
    assert response.status_code == 200, response.text
    return [row["id"] for row in response.json()["data"]]


async def test_two_keys_are_two_tenants_isolated_in_the_session_api(
    app: FastAPI, api: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    await chat(app, KEY_A, "a-1")
    await chat(app, KEY_B, "b-1")
    # Both reached the upstream with the proxy's key, not the client's.
    assert [r.header("authorization") for r in upstream.requests] == [f"Bearer {UPSTREAM_KEY}"] * 2

    assert await session_ids(api, KEY_A) == ["a-1"]
    assert await session_ids(api, KEY_B) == ["b-1"]
    for method, suffix in [("GET", ""), ("GET", "/messages"), ("DELETE", ""), ("POST", "/revert")]:
        response = await api.request(
            method, f"/v1/compaction/sessions/b-1{suffix}", headers=bearer(KEY_A)
        )
        assert response.status_code == 404, (method, suffix)
    assert (await api.get("/v1/compaction/sessions/b-1", headers=bearer(KEY_B))).status_code == 200

    everyone = (await api.get("/v1/compaction/sessions", headers=bearer(ADMIN))).json()["data"]
    tenants = {row["id"]: row["tenant"] for row in everyone}
    assert set(tenants) == {"a-1", "b-1"}
    assert tenants["a-1"] != tenants["b-1"]

    assert (
        await api.delete("/v1/compaction/sessions/a-1", headers=bearer(KEY_A))
    ).status_code == 200
    assert await session_ids(api, KEY_A) == []
    assert await session_ids(api, KEY_B) == ["b-1"]


async def test_a_tenants_keys_share_its_sessions(
    upstream_url: str, redis_server: RedisServer
) -> None:
    # Two keys for one tenant (a rotation in progress): one tenant's sessions, either key.
    rotated = "sk-team-a-key-rotated-77"
    settings = make_settings(
        upstream_url,
        upstream={"base_url": upstream_url, "api_key": UPSTREAM_KEY},
        redis={"url": redis_server.url},
        context={"context_window": 100_000},
        auth={"keys": {**KEYS, rotated: "team-a"}},
    )
    app = create_app(settings)
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as api,
    ):
        await chat(app, KEY_A, "a-1")
        assert await session_ids(api, rotated) == ["a-1"]


def unknown_callers() -> list[dict[str, str]]:
    return [bearer(UNKNOWN), {"api-key": UNKNOWN}, bearer(UPSTREAM_KEY), {}]


@pytest.mark.parametrize("headers", unknown_callers())
async def test_unknown_key_gets_401_on_chat_and_nothing_reaches_the_upstream(
    api: httpx.AsyncClient, upstream: MockUpstream, headers: dict[str, str]
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    response = await api.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 401
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    assert UNKNOWN not in response.text
    assert upstream.requests == []


@pytest.mark.parametrize("headers", unknown_callers())
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/models"), ("POST", "/v1/files")])
async def test_unknown_key_gets_401_on_passthrough_and_the_upstream_key_stays_home(
    api: httpx.AsyncClient, upstream: MockUpstream, headers: dict[str, str], method: str, path: str
) -> None:
    response = await api.request(
        method, path, headers=headers, content=b"{}" if method == "POST" else None
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert upstream.requests == []


async def test_unknown_key_gets_401_on_the_session_api(
    app: FastAPI, api: httpx.AsyncClient
) -> None:
    await chat(app, KEY_A, "a-1")
    for method, path in [
        ("GET", "/v1/compaction/sessions"),
        ("GET", "/v1/compaction/sessions/a-1"),
        ("DELETE", "/v1/compaction/sessions/a-1"),
    ]:
        response = await api.request(method, path, headers=bearer(UNKNOWN))
        assert response.status_code == 401, (method, path)
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert await session_ids(api, KEY_A) == ["a-1"]


async def test_the_sdk_sees_an_authentication_error(app: FastAPI) -> None:
    with pytest.raises(openai.AuthenticationError) as raised:
        await chat(app, UNKNOWN, "x-1")
    assert raised.value.code == "invalid_api_key"


async def test_known_keys_pass_through_with_the_proxy_key(
    api: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    response = await api.get("/v1/models", headers={"api-key": KEY_B})
    assert response.status_code == 200
    assert upstream.last.header("authorization") == f"Bearer {UPSTREAM_KEY}"


async def test_no_client_key_in_logs_or_redis(
    app: FastAPI,
    api: httpx.AsyncClient,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await chat(app, KEY_A, "a-1")
    await chat(app, KEY_B, "b-1")
    await api.get("/v1/models", headers=bearer(UNKNOWN))
    await api.get("/v1/compaction/sessions", headers=bearer(KEY_B))
    secrets = [KEY_A, KEY_B, UNKNOWN, sha256(KEY_A), sha256(KEY_B), sha256(UNKNOWN)]

    client = redis.Redis(unix_socket_path=str(redis_server.socket))
    try:
        assert await client.dbsize() > 0  # the sessions are there...
        # ...and a dump of everything, uncompressed, holds no key in any form.
        await client.config_set("rdbcompression", "no")
        await client.save()
    finally:
        await client.aclose()
    dump = (redis_server.socket.parent / "dump.rdb").read_bytes()
    assert b"a-1" in dump  # the dump is readable as we think
    for secret in secrets:
        assert secret.encode() not in dump
        assert secret not in caplog.text


def test_settings_hold_hashes_only() -> None:
    settings = Settings.model_validate({"auth": {"keys": KEYS}})
    shown = repr(settings) + settings.model_dump_json()
    assert KEY_B not in shown
    assert set(settings.auth.keys) == {f"sha256:{sha256(KEY_A)}", f"sha256:{sha256(KEY_B)}"}


@pytest.mark.parametrize(
    ("sections", "warned"),
    [
        ({"upstream": {"api_key": UPSTREAM_KEY}}, True),
        ({"upstream": {"api_key": UPSTREAM_KEY}, "auth": {"keys": KEYS}}, False),
        ({}, False),
    ],
)
async def test_one_tenant_setup_warned_at_startup(
    upstream_url: str, caplog: pytest.LogCaptureFixture, sections: dict[str, Any], warned: bool
) -> None:
    upstream_section = {"base_url": upstream_url, **sections.pop("upstream", {})}
    app = create_app(make_settings(upstream_url, upstream=upstream_section, **sections))
    with caplog.at_level(logging.WARNING, logger="proxy.web.app"):
        async with LifespanManager(app):
            pass
    assert ("auth.keys is not" in caplog.text) is warned


async def test_keys_gate_without_an_upstream_key_and_forward_the_clients_own(
    upstream_url: str, upstream: MockUpstream
) -> None:
    # No proxy key: the client's key goes upstream as it came, once auth.keys admits it.
    settings = make_settings(upstream_url, context={"context_window": 100_000}, auth={"keys": KEYS})
    app = create_app(settings)
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as api,
    ):
        assert (await api.get("/v1/models", headers=bearer(UNKNOWN))).status_code == 401
        assert upstream.requests == []
        assert (await api.get("/v1/models", headers=bearer(KEY_A))).status_code == 200
        assert upstream.last.header("authorization") == f"Bearer {KEY_A}"
