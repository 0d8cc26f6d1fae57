"""On a real socket: a bad or failing request costs no other request sharing the client's pool.

A 500 left to the framework went out on a keep-alive connection that uvicorn then dropped;
the client had already put the connection back in its pool, so the next requests sent on it
failed too (53-62 of 400, as an operator found). Now bodies past the proxy's limits get a
400, and a failure of the proxy itself a 500 that says `connection: close`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.adapters.store.embedded import MemoryStore
from proxy.adapters.tokenizer import Encoders
from proxy.core.session import SessionState
from proxy.web import create_app
from tests.conftest import make_settings
from tests.fuzz.conftest import CHAT, HEADERS, running
from tests.servers import serve

CRASHERS = sorted((Path(__file__).parent / "corpus" / "refused").glob("*.json"))
VALID = 400


def valid_body(index: int) -> bytes:
    messages = [{"role": "user", "content": f"question {index}"}]
    return json.dumps({"model": "gpt-4o-mini", "messages": messages}).encode()


async def send_all(base_url: str, bodies: Sequence[bytes]) -> list[httpx.Response | BaseException]:
    """`bodies` posted all at once by one client over a pool of a few keep-alive connections."""
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        sent = [client.post(CHAT, content=body, headers=HEADERS) for body in bodies]
        return await asyncio.gather(*sent, return_exceptions=True)


def shuffled(valid: list[bytes], bad: list[bytes]) -> tuple[list[bytes], set[int]]:
    """The bodies interleaved (the same order every run), and the indices of the bad ones."""
    tagged = [(body, False) for body in valid] + [(body, True) for body in bad]
    random.Random(12).shuffle(tagged)
    return [body for body, _ in tagged], {i for i, (_, is_bad) in enumerate(tagged) if is_bad}


class FailingStore(MemoryStore):
    """The embedded store, with a defect: beginning a turn for the model `explode` raises
    an error no part of the proxy expects (what a bug in a store would do)."""

    async def begin_turn(
        self, tenant: str, session_id: str, *, model: str | None, at: float
    ) -> SessionState:
        if model == "explode":
            raise RuntimeError("a defect in the store")
        return await super().begin_turn(tenant, session_id, model=model, at=at)


def exploding_body(index: int) -> bytes:
    messages = [{"role": "user", "content": f"boom {index}"}]
    return json.dumps({"model": "explode", "messages": messages}).encode()


async def test_a_failure_of_the_proxy_is_a_clean_500(
    ok_upstream_url: str, encoders: Encoders, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_settings(ok_upstream_url), store=FailingStore(), encoders=encoders)
    async with running(app) as client:
        response = await client.post(CHAT, content=exploding_body(0), headers=HEADERS)
    assert response.status_code == 500
    assert response.headers["connection"] == "close"
    assert response.json() == {
        "error": {
            "message": "compaction-proxy failed on this request; its log has the details.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == 1  # once, with the traceback
    assert logged[0].exc_info is not None
    assert "a defect in the store" in str(logged[0].exc_info[1])


async def test_refused_and_failed_requests_cost_no_other_request(
    ok_upstream_url: str, encoders: Encoders
) -> None:
    app = create_app(make_settings(ok_upstream_url), store=FailingStore(), encoders=encoders)
    refused = [path.read_bytes() for path in CRASHERS] * 3
    failing = [exploding_body(i) for i in range(20)]
    bodies, bad = shuffled([valid_body(i) for i in range(VALID)], [*refused, *failing])
    async with serve(app) as base_url:
        answers = await send_all(base_url, bodies)
    statuses: list[Any] = [
        a.status_code if isinstance(a, httpx.Response) else repr(a) for a in answers
    ]
    by_body = dict.fromkeys(refused, 400) | dict.fromkeys(failing, 500)
    assert [statuses[i] for i in sorted(bad)] == [by_body[bodies[i]] for i in sorted(bad)]
    assert [s for i, s in enumerate(statuses) if i not in bad] == [200] * VALID
