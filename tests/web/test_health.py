"""/healthz and /readyz."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from asgi_lifespan import LifespanManager

from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import free_port


async def test_ready_with_embedded_store(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready"})


async def test_not_ready_when_redis_unreachable(upstream_url: str) -> None:
    settings = make_settings(upstream_url, redis={"url": f"redis://127.0.0.1:{free_port()}/0"})
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
        ready = await http.get("http://proxy/readyz")
        alive = await http.get("http://proxy/healthz")
    assert ready.status_code == 503
    assert "Redis is not usable" in ready.json()["problems"]["store"]
    assert alive.status_code == 200


async def test_startup_says_once_when_encodings_are_missing(
    upstream_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # nothing loaded in-process yet
    monkeypatch.setattr("tiktoken.load.read_file", _offline)
    app = create_app(make_settings(upstream_url))
    with caplog.at_level(logging.WARNING, logger="proxy"):
        async with LifespanManager(app):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "TIKTOKEN_CACHE_DIR" in warnings[0]
    assert "approximate" in warnings[0]


def _offline(blobpath: str) -> bytes:
    raise OSError(f"no network to fetch {blobpath}")
