"""Whatever body a client sends to /v1/chat/completions, the proxy answers without a 5xx.

Through the app with the embedded store and with a real redis-server, in front of an
upstream that answers 200 to anything (so every 5xx here is the proxy's own). A body the
proxy refuses gets a 400 in the OpenAI error shape; after every answer, the background work
it started (turn records, archive, summaries) has raised nothing.

`corpus/refused/` holds the bodies that once crashed the proxy (each must now get a 400),
`corpus/accepted/` the ones next to them that must still be served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.observability.metrics import PREFIX
from tests.fuzz.conftest import CHAT, HEADERS
from tests.fuzz.strategies import anything, chat_bodies, encode

CORPUS = Path(__file__).parent / "corpus"
FUZZ = settings(
    max_examples=60,
    deadline=None,
    # One proxy serves all the examples of a test: it is what is under test, and starting
    # it per example would cost the whole time budget.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


def corpus(kind: str) -> list[Any]:
    """Each body in `corpus/<kind>/`, named by its file."""
    paths = sorted((CORPUS / kind).glob("*.json"))
    return [pytest.param(path.read_bytes(), id=path.stem) for path in paths]


async def post(app: FastAPI, client: httpx.AsyncClient, body: bytes) -> httpx.Response:
    """`body` posted, the background work it started awaited and checked."""
    response = await client.post(CHAT, content=body, headers=HEADERS)
    await app.state.service.settle()
    assert background_failures(app) == 0
    return response


def background_failures(app: FastAPI) -> float:
    registry = app.state.metrics.registry
    name = f"{PREFIX}background_task_failures_total"
    kinds = ("turn", "summary")
    return sum(registry.get_sample_value(name, {"kind": kind}) or 0.0 for kind in kinds)


def assert_served_or_refused(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert isinstance(error["message"], str)


@pytest.mark.parametrize("body", corpus("refused"))
async def test_known_crashers_get_a_400(
    fuzz_app: tuple[FastAPI, httpx.AsyncClient], body: bytes
) -> None:
    app, client = fuzz_app
    response = await post(app, client, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert any(word in error["message"] for word in ("levels deep", "digits", "surrogate"))


@pytest.mark.parametrize("body", corpus("accepted"))
async def test_bodies_next_to_the_limits_are_served(
    fuzz_app: tuple[FastAPI, httpx.AsyncClient], body: bytes
) -> None:
    app, client = fuzz_app
    response = await post(app, client, body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "ok"


@FUZZ
@given(body=chat_bodies, ascii_only=st.booleans())
async def test_chat_shaped_bodies_never_get_a_5xx(
    fuzz_app: tuple[FastAPI, httpx.AsyncClient], body: object, ascii_only: bool
) -> None:
    app, client = fuzz_app
    assert_served_or_refused(await post(app, client, encode(body, ascii_only=ascii_only)))


@FUZZ
@given(body=anything | st.dictionaries(st.sampled_from(["model", "messages", "stream"]), anything))
async def test_any_json_body_never_gets_a_5xx(
    fuzz_app: tuple[FastAPI, httpx.AsyncClient], body: object
) -> None:
    app, client = fuzz_app
    assert_served_or_refused(await post(app, client, encode(body)))


@settings(FUZZ, max_examples=30)
@given(body=st.binary(max_size=64) | st.sampled_from([b"", b"{", b'{"messages":[}', b"\xff\xfe{}"]))
async def test_bytes_that_are_not_json_get_a_400(
    fuzz_app: tuple[FastAPI, httpx.AsyncClient], body: bytes
) -> None:
    app, client = fuzz_app
    response = await post(app, client, body)
    assert response.status_code == 400, response.text
