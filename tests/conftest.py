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
from hypothesis import is_hypothesis_test
from hypothesis import settings as hypothesis_settings

from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app
from tests import environment, gates, optional
from tests.redis_server import RedisServer
from tests.servers import COMPACTION_KEY, serve

# The suite runs the properties derandomized wherever it runs (the same examples on every run,
# so `make test` gives one verdict per commit and a red build reproduces). The random search
# that finds new cases is a sweep run before changing the plan:
# `pytest --hypothesis-profile=thorough` (600 examples of the plan's properties, a new seed each
# run, or `--hypothesis-seed=N` to replay one); a case it finds becomes an example-based test.
hypothesis_settings.register_profile("suite", derandomize=True, deadline=None)
hypothesis_settings.register_profile("thorough", max_examples=600)


def pytest_configure(config: pytest.Config) -> None:
    chosen = config.getoption("hypothesis_profile", None) or config.getoption(
        "hypothesis_seed", None
    )
    if chosen is None:
        hypothesis_settings.load_profile("suite")
    config.stash[_CLEARED] = environment.clean(os.environ)
    gates.start_suite()


_CLEARED = pytest.StashKey[list[str]]()


def pytest_report_header(config: pytest.Config) -> list[str]:
    cleared = config.stash.get(_CLEARED, [])
    if not cleared:
        return []
    return [f"left out of the environment (tests/environment.py): {', '.join(cleared)}"]


# The coverage gates count only what deterministic example tests reach (tests/gates.py): each
# test starts in the context "property" (a Hypothesis test), "optional" (marked `needs`, or in
# a module that asked for an optional tool at its top level) or "example", and an example test
# leaves "example" once it depends on an optional tool or reads a socket's split of a stream.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    gates.begin(_kind(item), item.nodeid)
    try:
        yield
    finally:
        gates.end()


def _kind(item: pytest.Item) -> str:
    if isinstance(item, pytest.Function) and is_hypothesis_test(item.obj):
        return gates.PROPERTY
    module = getattr(item, "module", None)
    if item.get_closest_marker("needs") is not None or (
        module is not None and optional.module_is_optional(module.__name__)
    ):
        return gates.OPTIONAL
    return gates.EXAMPLE


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `needs(tool)` is skipped before its fixtures run where the tool is
    missing."""
    for marker in item.iter_markers("needs"):
        for name in marker.args:
            optional.require(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker of `pytest -n` (pytest-xdist) hands its tests' contexts to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["gates"] = dict(gates.ended)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The controller counts each worker's tests with its own (none, it runs no test)."""
    gates.ended.update(getattr(node, "workeroutput", {}).get("gates", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counted = ", ".join(f"{gates.ended[kind]} {kind}" for kind in gates.KINDS)
    terminalreporter.write_line(f"coverage contexts (tests/gates.py): {counted}")


@pytest.fixture
def upstream() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
async def upstream_url(upstream: MockUpstream) -> AsyncIterator[str]:
    """The mock upstream served by uvicorn on loopback, as an OpenAI base URL (`.../v1`)."""
    async with serve(upstream.app) as base_url:
        yield f"{base_url}/v1"


def make_settings(upstream_url: str, **sections: Any) -> Settings:
    """Settings for a proxy in front of `upstream_url`: the mock, not OpenAI, so the proxy
    answers compaction requests, with a key of its own unless `responses` says otherwise
    (the settings refuse a shared store without one)."""
    sections.setdefault("responses", {"compaction_key": COMPACTION_KEY})
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
        optional.skip(str(exc))
    server.start()
    try:
        yield server
    finally:
        server.stop()
