"""Shared fixtures: a recording mock upstream on a real socket and the proxy in front of it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from hypothesis import settings as hypothesis_settings

from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app
from tests.redis_server import RedisServer
from tests.servers import serve

# CI runs the properties derandomized (the same examples on every run, so a red build is
# reproducible); a sweep over seeds, run before resolving, is
# `pytest --hypothesis-profile=thorough --hypothesis-seed=N`: the plan's properties
# (tests/core/test_plan_properties.py) take the profile's count, 600 there, 100 in the suite.
hypothesis_settings.register_profile("ci", derandomize=True)
hypothesis_settings.register_profile("thorough", max_examples=600)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") and config.getoption("hypothesis_seed", None) is None:
        hypothesis_settings.load_profile("ci")


@pytest.fixture
def upstream() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
async def upstream_url(upstream: MockUpstream) -> AsyncIterator[str]:
    """The mock upstream served by uvicorn on loopback, as an OpenAI base URL (`.../v1`)."""
    async with serve(upstream.app) as base_url:
        yield f"{base_url}/v1"


def make_settings(upstream_url: str, **sections: Any) -> Settings:
    return Settings.model_validate({"upstream": {"base_url": upstream_url}, **sections})


@pytest.fixture
def settings(upstream_url: str) -> Settings:
    return make_settings(upstream_url)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    """The proxy app with its lifespan running (upstream client open, store ready)."""
    application = create_app(settings)
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the proxy in-process through ASGI."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        yield http


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (its own socket, never a shared one), stopped afterwards."""
    try:
        server = RedisServer(tmp_path)
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (.ci/run installs Debian's redis-server)")
    server.start()
    try:
        yield server
    finally:
        server.stop()
