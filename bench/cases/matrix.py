"""The effectiveness matrix: windows x workloads x summarizers, through the proxy's defaults.

Each cell is one scripted session (`bench/workloads.py`) driven by the OpenAI SDK through a
`compaction-proxy serve` process of its own, in front of a `proxy.mock_upstream` that plays
a strict provider: its window is the cell's (reported at `/v1/models`, so the proxy detects
it; the proxy's configuration sets nothing under `context:`, so the matrix measures the
defaults), its tokenizer counts 10 % more than the proxy's, it refuses broken tool pairing
and non-alternating roles, and its summarizer is useless ("poor": it keeps nothing) or good.

Every cell runs once per API (`Size.matrix_apis`): the same workload over chat completions
and over the Responses API, stateless with reasoning items in the history, against one mock
that serves both (`bench/cases/matrix_clients.py`). The proxy tells the client what it did
in headers (`x-compaction-applied`, `x-context-pressure`) whichever the API; the mock, in
this process, counts what reached it (overflows, strict refusals, summary calls, cached
tokens, the requests themselves). A session grows the client's history
to `Size.matrix_history` windows, in at most `Size.matrix_max_calls` model calls; above
32k, model and tool output grow with the window instead (`bulk`), so that a 128k cell
compacts several times in about as many calls as a 32k one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import openai
import yaml

from bench.cases.matrix_clients import CLIENTS, MODEL, MatrixClient
from bench.cases.session import _served
from bench.config import Api, Size
from bench.measures import CellResult, Check
from bench.processes import Server, free_port, start
from bench.progress import Progress
from bench.stack import proxy_command
from bench.workloads import BUILDERS, WORKLOADS, Plan, Workload, WorkloadKey
from proxy.adapters.tokenizer import Encoders
from proxy.core.policy import ContextPolicy
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream, SummaryQuality

WINDOWS: Final = (4_096, 8_192, 32_768, 131_072)
SUMMARIZERS: Final[tuple[SummaryQuality, ...]] = ("poor", "good")
TOKEN_FACTOR: Final = 1.1
"""The provider's tokens per token of ours: its tokenizer counts 10 % more."""
BULK_FROM: Final = 32_768
"""Above this window, model and tool output scale with the window (see the docstring)."""


@dataclass(frozen=True, slots=True)
class CellSpec:
    window: int
    workload: WorkloadKey
    summarizer: SummaryQuality
    api: Api = "chat"

    @property
    def slug(self) -> str:
        return f"matrix-{self.window}-{self.workload}-{self.summarizer}-{self.api}"

    @property
    def bulk(self) -> float:
        return max(1.0, self.window / BULK_FROM)


def cell_specs(size: Size) -> list[CellSpec]:
    """The cells a run of `size` measures, window by window; each API's run of a cell next
    to the other's."""
    return [
        CellSpec(window, workload, summarizer, api)
        for window in size.matrix_windows
        for workload in WORKLOADS
        for summarizer in size.matrix_summarizers
        for api in size.matrix_apis
    ]


def workload_for(spec: CellSpec, size: Size, counter: TokenCounter) -> Workload:
    plan = Plan(round(size.matrix_history * spec.window), size.matrix_max_calls, spec.bulk)
    return BUILDERS[spec.workload](plan, counter)


def landing_target() -> float:
    """The compaction target the landings are judged against: the proxy's default."""
    return ContextPolicy().compaction_target


async def _drive(client: MatrixClient, progress: Progress) -> None:
    client.start()
    for turn in client.workload.turns:
        before = client.cell.model_calls
        await client.turn(turn)
        client.cell.user_turns += 1
        progress.tick(client.cell.model_calls - before)


def _read_upstream(client: MatrixClient) -> None:
    upstream, cell = client.upstream, client.cell
    cell.overflows = upstream.overflows
    cell.strict_rejections = upstream.strict_rejections
    cell.summary_calls = upstream.summary_calls
    cell.prompt_tokens = sum(upstream.prompt_tokens)
    cell.cached_tokens = sum(upstream.cached_tokens)
    bodies = [request.json() for request in client.forwarded()]
    cell.prefix_stable_share = _prefix_stable_share([client.conversation(b) for b in bodies])
    last = client.seen(bodies[-1]) if bodies else ""
    cell.checks = [Check(s.kind, s.key, s.key in last) for s in client.workload.checks]


def _prefix_stable_share(conversations: list[list[Any]]) -> float:
    """Share of consecutive forwarded requests where the later extends the earlier's
    conversation (what keeps the provider's prompt cache warm)."""
    pairs = list(itertools.pairwise(conversations))
    if not pairs:
        return float("nan")
    return sum(after[: len(before)] == before for before, after in pairs) / len(pairs)


async def run_cell(
    spec: CellSpec, workload: Workload, *, encoders: Encoders, work: Path, progress: Progress
) -> CellResult:
    """One cell: `workload` through a fresh proxy in front of a mock of `spec`'s window."""
    counter = TokenCounter(encoders.by_name.get(O200K_BASE, ApproximateEncoder()))
    cell = CellResult(
        spec.window, spec.workload, spec.summarizer, spec.bulk, landing_target(), api=spec.api
    )
    upstream = MockUpstream(
        window=spec.window,
        token_factor=TOKEN_FACTOR,
        strict=True,
        roles_alternate=True,
        agent=workload.script,
        summary_quality=spec.summarizer,
        models=(MODEL,),
        encoders=encoders,
        # A reasoning model on the Responses API: each response opens with a reasoning item
        # the client sends back, which must never be parted from what follows it.
        responses_reasoning=True,
    )
    start_time = time.perf_counter()
    async with _served(upstream.app) as mock_url:
        # Started off the event loop: the loop serves the mock meanwhile.
        proxy = await asyncio.to_thread(_start_proxy, spec.slug, mock_url, work)
        try:
            async with openai.AsyncOpenAI(
                api_key="sk-bench", base_url=proxy.base_url, max_retries=0, timeout=120
            ) as sdk:
                client = CLIENTS[spec.api](sdk, workload, upstream, counter, cell)
                await _drive(client, progress)
                cell.history_tokens = client.history_tokens()
        finally:
            await asyncio.to_thread(proxy.stop)
    cell.wall_s = time.perf_counter() - start_time
    _read_upstream(client)
    return cell


def _start_proxy(name: str, mock_url: str, work: Path) -> Server:
    # Nothing under `context:`: the window comes from the mock's /v1/models, the rest from
    # the defaults, which are what the matrix judges.
    settings = {"upstream": {"base_url": mock_url, "timeout_s": 120}, "log": {"level": "warning"}}
    config = work / f"{name}.yaml"
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    command = proxy_command(config, port)
    return start(name, command, port=port, log=work / f"{name}.log", ready_path="/healthz")
