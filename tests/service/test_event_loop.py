"""A huge request must not freeze the event loop: other clients are answered meanwhile.

The proxy and the mock upstream are real uvicorn servers: the proxy on this test's loop (so
a probe on the loop sees every stall of it), the upstream on its own thread with the
approximate encoder, whose count of a long run of letters is one regex match: with tiktoken
the mock's own loop would count the forwarded megabyte for 0.4 s and hold the small requests
queued behind it, a stall of the test's upstream, not of the proxy. One client sends a
message without whitespace, the slowest text for tiktoken, while another keeps sending
small ones: 10 MB (over `EXACT_MAX_BYTES`: bounded by its bytes, never encoded) and 2 MB
(encoded, 250k tokens, so it must be trimmed to fit gpt-4o's 128k window: the plan counts
its head, tail and trimmed message, 0.7 s of tiktoken that ran on the loop before the plan
ran in a worker thread).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httpx

from proxy.adapters.tokenizer import Encoders
from proxy.core.tokens import ApproximateEncoder
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve, serve_in_thread

CHAT = "/v1/chat/completions"
SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
# The small requests' own latency here is about 50 ms (the loopback round trips through the
# proxy and the mock); the stalls this guards against were 0.7 s (2 MB) to 5 s (10 MB). On a
# busy shared machine the round trips themselves grow, so the bound is also relative: a few
# times the slowest of the same small requests sent just before, in the same run.
MAX_LATENCY_S = 0.25
SLOWER_THAN_ALONE = 4


async def _latencies_while(
    big: Mapping[str, object], http: httpx.AsyncClient
) -> tuple[list[float], float, httpx.Response]:
    """Small requests' latencies, sent one after another while `big` is answered; the
    longest stall of the loop meanwhile; and `big`'s response."""
    latencies: list[float] = []
    stall = 0.0
    done = asyncio.Event()

    async def small_ones() -> None:
        while not done.is_set():
            started = time.perf_counter()
            response = await http.post(CHAT, json=SMALL)
            latencies.append(time.perf_counter() - started)
            assert response.status_code == 200

    async def probe() -> None:
        nonlocal stall
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            stall = max(stall, time.perf_counter() - started - 0.005)

    tasks = [asyncio.create_task(small_ones()), asyncio.create_task(probe())]
    await asyncio.sleep(0.05)
    response = await http.post(CHAT, json=big)
    done.set()
    await asyncio.gather(*tasks)
    return latencies, stall, response


async def _alone(http: httpx.AsyncClient) -> float:
    """The slowest of a few small requests with nothing else going on."""
    slowest = 0.0
    for _ in range(8):
        started = time.perf_counter()
        assert (await http.post(CHAT, json=SMALL)).status_code == 200
        slowest = max(slowest, time.perf_counter() - started)
    return slowest


async def _run(content: str) -> tuple[list[float], float, httpx.Response, MockUpstream, float]:
    upstream = MockUpstream(encoders=Encoders(by_name={}, fallback=ApproximateEncoder()))
    with serve_in_thread(upstream.app) as upstream_base:
        settings = make_settings(f"{upstream_base}/v1", server={"max_body_bytes": 64 * 1024 * 1024})
        async with (
            serve(create_app(settings)) as proxy_base,
            httpx.AsyncClient(base_url=proxy_base, timeout=120) as http,
        ):
            assert (await http.post(CHAT, json=SMALL)).status_code == 200  # warm
            bound = max(MAX_LATENCY_S, SLOWER_THAN_ALONE * await _alone(http))
            # The big message is the running turn's answer so far (its ask is never cut).
            messages = [
                {"role": "user", "content": "Print the file, whole."},
                {"role": "assistant", "content": content},
            ]
            big = {"model": "gpt-4o", "messages": messages}
            latencies, stall, response = await _latencies_while(big, http)
            return latencies, stall, response, upstream, bound


def _forwarded_chars(upstream: MockUpstream) -> int:
    """The longest message the upstream was sent (the big one, as forwarded)."""
    return max(len(m["content"]) for r in upstream.requests for m in r.json()["messages"])


async def test_small_requests_answered_while_10_mb_message_is_counted() -> None:
    latencies, stall, response, upstream, bound = await _run("a" * 10_000_000)
    assert response.status_code == 200
    assert _forwarded_chars(upstream) < 1_000_000  # trimmed to fit
    assert latencies
    assert max(latencies) < bound, f"loop stalled up to {stall:.3f} s"


async def test_small_requests_answered_while_2_mb_message_is_trimmed_to_fit() -> None:
    latencies, stall, response, upstream, bound = await _run("a" * 2_000_000)
    assert response.status_code == 200
    assert response.headers["x-compaction-applied"] == "cap_recent"
    assert 100_000 < _forwarded_chars(upstream) < 2_000_000  # trimmed, not dropped
    assert latencies
    assert max(latencies) < bound, f"loop stalled up to {stall:.3f} s"
