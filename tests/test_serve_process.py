"""`compaction-proxy serve` as its own process, used by the sync and async OpenAI SDKs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

import httpx
import openai
import pytest

from proxy.mock_upstream import MockUpstream
from tests import sdk_cases
from tests.servers import proxy_process, serve_in_thread

Case = Callable[[sdk_cases.Sdk, MockUpstream], Awaitable[None]]


@pytest.fixture(scope="module")
def upstream_in_thread() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with serve_in_thread(upstream.app) as base_url:
        yield upstream, f"{base_url}/v1"


@pytest.fixture(scope="module")
def proxy_url(upstream_in_thread: tuple[MockUpstream, str]) -> Iterator[str]:
    with proxy_process(["--upstream", upstream_in_thread[1]]) as base_url:
        yield base_url


@pytest.mark.parametrize("case", sdk_cases.CASES, ids=lambda case: case.__name__)
async def test_sync_sdk_against_serve(
    proxy_url: str, upstream_in_thread: tuple[MockUpstream, str], case: Case
) -> None:
    with openai.OpenAI(api_key="sk-sync", base_url=f"{proxy_url}/v1", max_retries=0) as sdk:
        await case(sdk, upstream_in_thread[0])
    assert upstream_in_thread[0].last.header("authorization") == "Bearer sk-sync"


@pytest.mark.parametrize("case", sdk_cases.CASES, ids=lambda case: case.__name__)
async def test_async_sdk_against_serve(
    proxy_url: str, upstream_in_thread: tuple[MockUpstream, str], case: Case
) -> None:
    async with openai.AsyncOpenAI(
        api_key="sk-async", base_url=f"{proxy_url}/v1", max_retries=0
    ) as sdk:
        await case(sdk, upstream_in_thread[0])


def test_health_and_readiness(proxy_url: str) -> None:
    assert httpx.get(f"{proxy_url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{proxy_url}/readyz").json() == {"status": "ready"}
