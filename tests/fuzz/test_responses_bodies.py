"""Whatever body a client sends to /v1/responses, the proxy answers without a 5xx.

As `test_chat_bodies.py`, with bodies shaped like Responses API requests (items of every
known and unknown type, each field of the right type or any other) and a window of a few
hundred tokens, so that the translation and every compaction layer run on what comes in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given

from proxy.adapters.tokenizer import Encoders
from proxy.web import create_app
from tests.conftest import make_settings
from tests.fuzz.conftest import HEADERS, running
from tests.fuzz.strategies import encode, responses_bodies, responses_conversations
from tests.fuzz.test_chat_bodies import FUZZ, assert_served_or_refused, background_failures

RESPONSES = "/v1/responses"
SMALL = {"context_window": 300, "output_reserved": 20, "keep_recent": 1}


@pytest.fixture
async def small_window_app(
    ok_upstream_url: str, store_section: dict[str, Any], encoders: Encoders
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = make_settings(ok_upstream_url, context=SMALL, **store_section)
    app = create_app(settings, encoders=encoders)
    async with running(app) as client:
        yield app, client


async def served_or_refused(app: FastAPI, client: httpx.AsyncClient, body: object) -> None:
    """`body` posted: never a 5xx, and the background work it started raised nothing."""
    response = await client.post(RESPONSES, content=encode(body), headers=HEADERS)
    await app.state.service.settle()
    assert background_failures(app) == 0
    assert_served_or_refused(response)


@FUZZ
@given(body=responses_bodies)
async def test_responses_shaped_bodies_never_get_a_5xx(
    small_window_app: tuple[FastAPI, httpx.AsyncClient], body: object
) -> None:
    await served_or_refused(*small_window_app, body)


@FUZZ
@given(body=responses_conversations)
async def test_conversations_compacted_in_a_small_window_never_get_a_5xx(
    small_window_app: tuple[FastAPI, httpx.AsyncClient], body: object
) -> None:
    await served_or_refused(*small_window_app, body)
