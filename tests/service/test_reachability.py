"""The upstream's reachability, probed in the background for /readyz's details."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.upstream import AiohttpUpstream
from proxy.demo.servers import listening_socket
from proxy.demo.servers import serve as serve_on
from proxy.mock_upstream import MockUpstream
from proxy.service.reachability import Reachability
from tests.servers import free_port, serve


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def opened(base_url: str) -> AsyncIterator[AiohttpUpstream]:
    upstream = AiohttpUpstream(base_url, timeout_s=30)
    await upstream.open()
    try:
        yield upstream
    finally:
        await upstream.aclose()


def answering(status: int) -> Starlette:
    """An upstream that answers every GET with `status`."""

    async def endpoint(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"message": "as told"}}, status)

    return Starlette(routes=[Route("/{path:path}", endpoint, methods=["GET"])])


@contextmanager
def silent_upstream() -> Iterator[str]:
    """A base URL whose server accepts connections (the kernel's backlog) and never answers."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


async def probed(reachability: Reachability) -> str | None:
    """Renew, and the outcome once that probe has ended."""
    reachability.renew()
    await reachability.settle()
    return reachability.problem()


async def test_an_answering_upstream_is_no_problem_and_gets_the_proxys_key() -> None:
    mock = MockUpstream()
    async with serve(mock.app) as base_url, opened(f"{base_url}/v1") as upstream:
        reachability = Reachability(upstream, api_key="sk-proxy")
        assert await probed(reachability) is None
        await reachability.aclose()
    assert [(r.method, r.path) for r in mock.requests] == [("GET", "/v1/models")]
    assert mock.last.header("authorization") == "Bearer sk-proxy"


@pytest.mark.parametrize(("status", "problem"), [(401, False), (404, False), (503, True)])
async def test_any_answer_but_a_5xx_means_reachable(status: int, problem: bool) -> None:
    async with serve(answering(status)) as base_url, opened(f"{base_url}/v1") as upstream:
        found = await probed(Reachability(upstream, api_key=None))
    if problem:
        assert found is not None
        assert f"answered {status}" in found
    else:
        assert found is None


async def test_a_silent_upstream_is_a_problem_after_the_probes_timeout() -> None:
    with silent_upstream() as base_url:
        async with opened(base_url) as upstream:
            clock = Clock()
            reachability = Reachability(upstream, api_key=None, timeout_s=0.2, clock=clock)
            found = await probed(reachability)
    assert found is not None
    assert "did not answer in 0.2 s" in found


async def test_an_outage_shows_until_a_probe_after_the_interval_finds_it_over() -> None:
    port = free_port()
    clock = Clock()
    async with opened(f"http://127.0.0.1:{port}/v1") as upstream:
        reachability = Reachability(upstream, api_key=None, interval_s=15, clock=clock)
        found = await probed(reachability)
        assert found is not None
        assert "could not be reached" in found
        clock.now += 4
        assert reachability.problem() == found.replace("checked 0 s ago", "checked 4 s ago")
        mock = MockUpstream()
        async with serve_on(mock.app, listening_socket(port), lifespan="off"):
            # Within the interval nothing is probed: the outage still shows.
            reachability.renew()
            await reachability.settle()
            assert reachability.problem() is not None
            assert mock.requests == []
            clock.now += 11
            assert await probed(reachability) is None
            assert [r.path for r in mock.requests] == ["/v1/models"]
        await reachability.aclose()


async def test_a_probe_under_way_is_abandoned_on_close() -> None:
    with silent_upstream() as base_url:
        async with opened(base_url) as upstream:
            reachability = Reachability(upstream, api_key=None, timeout_s=60)
            reachability.renew()
            await reachability.aclose()
            await reachability.settle()  # returns at once: nothing is under way any more
            assert reachability.problem() is None


def held(gate: asyncio.Event, seen: list[str]) -> Starlette:
    """An upstream that records each GET and answers it once `gate` is set."""

    async def endpoint(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        await gate.wait()
        return JSONResponse({"object": "list", "data": []})

    return Starlette(routes=[Route("/{path:path}", endpoint, methods=["GET"])])


async def test_a_probe_under_way_is_not_doubled_by_another_renew() -> None:
    # `/readyz` may be asked many times a second: while a probe waits on a slow upstream,
    # asking again starts no second one (even with no interval), so probes never pile up.
    gate, seen = asyncio.Event(), list[str]()
    upstream = AsgiUpstream(held(gate, seen))
    await upstream.open()
    reachability = Reachability(upstream, api_key=None, interval_s=0)
    reachability.renew()
    await asyncio.sleep(0.01)
    reachability.renew()
    await asyncio.sleep(0.01)
    assert seen == ["/v1/models"]
    gate.set()
    await reachability.settle()
    assert await probed(reachability) is None  # that one over, the next renew probes
    assert seen == ["/v1/models", "/v1/models"]
    await reachability.aclose()


async def test_settle_and_close_before_any_probe_return_at_once() -> None:
    # The service closes its reachability on shutdown whether or not `/readyz` was ever asked.
    async with opened("http://127.0.0.1:9/v1") as upstream:
        reachability = Reachability(upstream, api_key=None)
        await reachability.settle()
        await reachability.aclose()
        assert reachability.problem() is None


async def test_a_probe_meeting_a_closed_client_reports_no_problem() -> None:
    # On shutdown the upstream client may close before a probe just renewed sends: that is
    # the proxy stopping, not the upstream failing, so nothing is shown against it.
    async with opened("http://127.0.0.1:9/v1") as upstream:
        pass
    assert not upstream.is_open
    assert await probed(Reachability(upstream, api_key=None)) is None
