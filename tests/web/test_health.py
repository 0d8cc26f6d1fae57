"""/healthz and /readyz."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import httpx
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from asgi_lifespan import LifespanManager

from proxy.mock_upstream import MockUpstream
from proxy.service.reachability import PROBE_TIMEOUT_S
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import free_port, until

SETTLE_S = 10.0


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


async def test_ready_while_the_upstream_is_unreachable_which_details_name() -> None:
    """Readiness is this replica's: an upstream outage (every replica's) is a detail."""
    settings = make_settings(f"http://127.0.0.1:{free_port()}/v1")
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
        answers = [await http.get("http://proxy/readyz")]
        deadline = time.monotonic() + SETTLE_S
        # The first call starts the probe, which ends in the background a moment later.
        while "details" not in answers[-1].json() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            answers.append(await http.get("http://proxy/readyz"))
    assert {answer.status_code for answer in answers} == {200}
    body = answers[-1].json()
    assert body["status"] == "ready"
    assert "could not be reached" in body["details"]["upstream"]
    assert "the proxy still serves" in body["details"]["upstream"]


async def test_readyz_answers_at_once_while_a_silent_upstream_is_probed() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        app = create_app(make_settings(f"http://127.0.0.1:{silent.getsockname()[1]}/v1"))
        transport = httpx.ASGITransport(app=app)
        async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
            started = time.monotonic()
            answers = [await http.get("http://proxy/readyz") for _ in range(5)]
            elapsed = time.monotonic() - started
    assert [answer.json() for answer in answers] == [{"status": "ready"}] * 5
    assert elapsed < PROBE_TIMEOUT_S / 2  # none of them waited for the probe


async def test_upstream_is_probed_once_however_often_readyz_is_asked(
    upstream: MockUpstream, client: httpx.AsyncClient
) -> None:
    answers = [await client.get("/readyz") for _ in range(10)]
    await until(lambda: bool(upstream.requests), timeout_s=SETTLE_S)
    answers += [await client.get("/readyz") for _ in range(10)]
    await asyncio.sleep(0.5)  # time for a second probe, were one started, to arrive
    assert {answer.status_code for answer in answers} == {200}
    assert answers[-1].json() == {"status": "ready"}  # it answered: nothing to detail
    assert [(r.method, r.path) for r in upstream.requests] == [("GET", "/v1/models")]


async def test_startup_says_once_when_encodings_are_missing(
    upstream_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # nothing loaded in-process yet
    monkeypatch.setattr("tiktoken.load.read_file", _offline)
    # Nor the package that carries them: an empty one of that name first on the path.
    (tmp_path / "site" / "quicktok").mkdir(parents=True)
    (tmp_path / "site" / "quicktok" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
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
