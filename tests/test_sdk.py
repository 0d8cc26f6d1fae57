"""The official OpenAI SDK (async) as the client of the proxy app, in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import openai
import pytest
from fastapi import FastAPI

from proxy.mock_upstream import MockUpstream
from tests import sdk_cases


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://proxy/v1", http_client=http, max_retries=0
    ) as client:
        yield client


@pytest.mark.parametrize("case", sdk_cases.CASES, ids=lambda case: case.__name__)
async def test_async_sdk_through_proxy_app(
    sdk: openai.AsyncOpenAI,
    upstream: MockUpstream,
    case: Callable[[openai.AsyncOpenAI, MockUpstream], Awaitable[None]],
) -> None:
    await case(sdk, upstream)
    assert upstream.last.header("authorization") == "Bearer sk-test"
