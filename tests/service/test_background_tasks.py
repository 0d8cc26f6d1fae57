"""Work started after an answer (turn records, archive) never fails silently."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from proxy.adapters.store.embedded import MemoryStore
from proxy.core.messages import Message
from proxy.observability.metrics import PREFIX
from proxy.web import create_app
from tests.conftest import make_settings
from tests.fuzz.conftest import running

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


class BrokenArchive(MemoryStore):
    """The embedded store with a defect in `archive`: an error no caller expects."""

    async def archive(
        self,
        tenant: str,
        session_id: str,
        messages: Sequence[Message],
        *,
        hashes: Sequence[str] | None = None,
    ) -> None:
        raise RuntimeError("archive defect")


async def test_a_failed_background_task_is_logged_once_and_counted(
    upstream_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_settings(upstream_url), store=BrokenArchive())
    async with running(app) as client:
        for _ in range(2):
            response = await client.post(CHAT, json=BODY)
            assert response.status_code == 200  # the answer had gone out already
        await app.state.service.settle()
        failures = app.state.metrics.registry.get_sample_value(
            f"{PREFIX}background_task_failures_total", {"kind": "turn"}
        )
    assert failures == 2
    logged = [r for r in caplog.records if r.name == "proxy.service" and r.levelno >= logging.ERROR]
    assert len(logged) == 2  # once per failure, each with its traceback
    assert all(r.exc_info and "archive defect" in str(r.exc_info[1]) for r in logged)


async def test_background_work_that_succeeds_counts_nothing(upstream_url: str) -> None:
    app = create_app(make_settings(upstream_url))
    async with running(app) as client:
        assert (await client.post(CHAT, json=BODY)).status_code == 200
        await app.state.service.settle()
        registry = app.state.metrics.registry
        name = f"{PREFIX}background_task_failures_total"
        assert registry.get_sample_value(name, {"kind": "turn"}) is None
