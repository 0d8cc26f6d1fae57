"""The proxy's own time per request, chat completions beside the Responses API.

The same matrix session (`bench/cases/matrix.py`: the tool-heavy agent, a window, the mock
with reasoning items on the Responses API) runs through a proxy app in this process, once per
API and `--rounds` times alternating, so both see the same machine. Reported per API: the
mean of `compaction_proxy_overhead_seconds` (the proxy's time on a request, waits on the
upstream excluded: parsing, translating, counting, planning, building what is forwarded) and
the requests it averages over. Ratios of runs side by side are what to compare: the machine
is shared and noisy.

    python -m bench.api_overhead [--window 32768] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Final

import httpx2
import openai
from asgi_lifespan import LifespanManager

from bench.cases.matrix import CLIENTS, CellSpec, landing_target, workload_for
from bench.cases.matrix_clients import MODEL, TOKEN_FACTOR
from bench.config import SIZES, Api
from bench.measures import CellResult
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream
from proxy.observability.metrics import PREFIX
from proxy.settings import Settings
from proxy.web import create_app
from tests.servers import serve

APIS: Final[tuple[Api, ...]] = ("chat", "responses")


async def one_session(api: Api, window: int, encoders: Encoders) -> tuple[float, int]:
    """(mean overhead in ms, requests) of one session over `api`."""
    counter = TokenCounter(encoders.by_name.get(O200K_BASE, ApproximateEncoder()))
    spec = CellSpec(window, "tool-heavy", "good", api)
    workload = workload_for(spec, SIZES["default"], counter)
    upstream = MockUpstream(
        window=window,
        token_factor=TOKEN_FACTOR,
        strict=True,
        agent=workload.script,
        models=(MODEL,),
        encoders=encoders,
        responses_reasoning=True,
    )
    cell = CellResult(window, spec.workload, spec.summarizer, spec.bulk, landing_target(), api=api)
    async with serve(upstream.app) as mock_url:
        settings = Settings.model_validate({"upstream": {"base_url": f"{mock_url}/v1"}})
        app = create_app(settings, encoders=encoders)
        transport = httpx2.ASGITransport(app=app)
        async with (
            LifespanManager(app),
            httpx2.AsyncClient(transport=transport, timeout=120) as http,
            openai.AsyncOpenAI(
                api_key="sk-bench", base_url="http://proxy/v1", http_client=http, max_retries=0
            ) as sdk,
        ):
            client = CLIENTS[api](sdk, workload, upstream, counter, cell)
            client.start()
            for turn in workload.turns:
                await client.turn(turn)
            registry = app.state.metrics.registry
            total = registry.get_sample_value(f"{PREFIX}overhead_seconds_sum") or 0.0
            count = registry.get_sample_value(f"{PREFIX}overhead_seconds_count") or 0.0
    return total / max(count, 1.0) * 1000, int(count)


async def main_async(window: int, rounds: int) -> None:
    encoders = await asyncio.to_thread(load_encoders)
    means: dict[Api, list[float]] = {api: [] for api in APIS}
    for _ in range(rounds):
        for api in APIS:
            mean, requests = await one_session(api, window, encoders)
            means[api].append(mean)
            print(f"{api:<10} overhead mean {mean:6.2f} ms over {requests} requests")
    chat, responses = statistics.median(means["chat"]), statistics.median(means["responses"])
    print(f"median of rounds: chat {chat:.2f} ms, responses {responses:.2f} ms, "
          f"ratio {responses / chat:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=32_768)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main_async(args.window, args.rounds))


if __name__ == "__main__":
    main()
