"""The effectiveness matrix: windows x workloads x summarizers, through the proxy's defaults.

Each cell is one scripted session (`bench/workloads.py`) driven by the OpenAI SDK through a
`compaction-proxy serve` process of its own, in front of a `proxy.mock_upstream` that plays
a strict provider: its window is the cell's (reported at `/v1/models`, so the proxy detects
it; the proxy's configuration sets nothing under `context:`, so the matrix measures the
defaults), its tokenizer counts 10 % more than the proxy's, it refuses broken tool pairing
and non-alternating roles, and its summarizer is useless ("poor": it keeps nothing) or good.

The proxy tells the client what it did in headers (`x-compaction-applied`,
`x-context-pressure`); the mock, in this process, counts what reached it (overflows,
summary calls, cached tokens, the requests themselves). A session grows the client's history
to `Size.matrix_history` windows, in at most `Size.matrix_max_calls` model calls; above
32k, model and tool output grow with the window instead (`bulk`), so that a 128k cell
compacts several times in about as many calls as a 32k one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import openai
import yaml

from bench.cases.session import _chat_requests, _prefix_stable_share, _served
from bench.config import Size
from bench.measures import CellResult, Check
from bench.processes import Server, free_port, start
from bench.progress import Progress
from bench.stack import proxy_command
from bench.workloads import (
    BUILDERS,
    WORKLOADS,
    Plan,
    UserTurn,
    Workload,
    WorkloadKey,
    tool_output,
)
from proxy.adapters.tokenizer import Encoders
from proxy.core.policy import ContextPolicy
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream, SummaryQuality

MODEL: Final = "mock-model"
WINDOWS: Final = (4_096, 8_192, 32_768, 131_072)
SUMMARIZERS: Final[tuple[SummaryQuality, ...]] = ("poor", "good")
TOKEN_FACTOR: Final = 1.1
"""The provider's tokens per token of ours: its tokenizer counts 10 % more."""
BULK_FROM: Final = 32_768
"""Above this window, model and tool output scale with the window (see the docstring)."""
_FALLBACK_TOOL_TOKENS: Final = 200
"""A tool result in a turn the plan gave none (the chatty workload offers no tools)."""


@dataclass(frozen=True, slots=True)
class CellSpec:
    window: int
    workload: WorkloadKey
    summarizer: SummaryQuality

    @property
    def slug(self) -> str:
        return f"matrix-{self.window}-{self.workload}-{self.summarizer}"

    @property
    def bulk(self) -> float:
        return max(1.0, self.window / BULK_FROM)


def cell_specs(size: Size) -> list[CellSpec]:
    """The cells a run of `size` measures, window by window."""
    return [
        CellSpec(window, workload, summarizer)
        for window in size.matrix_windows
        for workload in WORKLOADS
        for summarizer in size.matrix_summarizers
    ]


def workload_for(spec: CellSpec, size: Size, counter: TokenCounter) -> Workload:
    plan = Plan(round(size.matrix_history * spec.window), size.matrix_max_calls, spec.bulk)
    return BUILDERS[spec.workload](plan, counter)


def landing_target() -> float:
    """The compaction target the landings are judged against: the proxy's default."""
    return ContextPolicy().compaction_target


@dataclass(slots=True)
class _Client:
    """The agent's side of one cell: the SDK, the history it resends, what it saw."""

    sdk: openai.AsyncOpenAI
    workload: Workload
    upstream: MockUpstream
    counter: TokenCounter
    cell: CellResult
    messages: list[Any] = field(default_factory=list)
    tools_run: int = 0
    answered: bool = False

    async def turn(self, turn: UserTurn) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        mark = len(self.messages)
        self.messages.append({"role": "user", "content": turn.text})
        # An agent that asks for more rounds than planned (its turn's start compacted away)
        # gets results of the planned sizes again.
        sizes = itertools.cycle(turn.tool_tokens or (_FALLBACK_TOOL_TOKENS,))
        while True:
            try:
                message = await self._complete()
            except openai.APIError as exc:
                self._failed(exc)
                del self.messages[mark:]  # the turn is abandoned, as an agent would
                return
            self.messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                self._run_tool(call, next(sizes))

    def _run_tool(self, call: dict[str, Any], tokens: int) -> None:
        self.tools_run += 1
        name = call["function"]["name"]
        output = tool_output(name, tokens, seed=self.tools_run, counter=self.counter)
        self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    def _failed(self, exc: openai.APIError) -> None:
        self.cell.client_errors += 1
        if len(self.cell.error_samples) < 3:
            self.cell.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])

    async def _complete(self) -> dict[str, Any]:
        self.cell.model_calls += 1
        body: dict[str, Any] = {"model": MODEL, "messages": self.messages}
        if self.workload.tools:
            body["tools"] = list(self.workload.tools)
        raw = await self.sdk.chat.completions.with_raw_response.create(**body)
        if not self.answered:
            # The proxy calibrates its counts from the first answer's `usage`: overflows
            # before it are the estimate's, overflows after it are the policy's.
            self.answered = True
            self.cell.overflows_before_first_answer = self.upstream.overflows
        self.cell.applied.append(raw.headers.get("x-compaction-applied", "none"))
        self.cell.pressures.append(float(raw.headers.get("x-context-pressure", "nan")))
        message: dict[str, Any] = raw.parse().choices[0].message.model_dump(exclude_none=True)
        return message


async def _drive(client: _Client, progress: Progress) -> None:
    client.messages.append({"role": "system", "content": client.workload.system})
    for turn in client.workload.turns:
        before = client.cell.model_calls
        await client.turn(turn)
        client.cell.user_turns += 1
        progress.tick(client.cell.model_calls - before)


def _read_upstream(upstream: MockUpstream, cell: CellResult, workload: Workload) -> None:
    cell.overflows = upstream.overflows
    cell.strict_rejections = upstream.strict_rejections
    cell.summary_calls = upstream.summary_calls
    cell.prompt_tokens = sum(upstream.prompt_tokens)
    cell.cached_tokens = sum(upstream.cached_tokens)
    chats = _chat_requests(upstream)
    cell.prefix_stable_share = _prefix_stable_share(chats)
    # Every field of every message: wherever the proxy put a statement, it reaches the model.
    last = json.dumps(chats[-1].json()["messages"], ensure_ascii=False) if chats else ""
    cell.checks = [Check(s.kind, s.key, s.key in last) for s in workload.checks]


def _history_tokens(client: _Client) -> int:
    body = {"messages": client.messages, "tools": list(client.workload.tools)}
    return client.counter.request(body)


async def run_cell(
    spec: CellSpec, workload: Workload, *, encoders: Encoders, work: Path, progress: Progress
) -> CellResult:
    """One cell: `workload` through a fresh proxy in front of a mock of `spec`'s window."""
    counter = TokenCounter(encoders.by_name.get(O200K_BASE, ApproximateEncoder()))
    cell = CellResult(spec.window, spec.workload, spec.summarizer, spec.bulk, landing_target())
    upstream = MockUpstream(
        window=spec.window,
        token_factor=TOKEN_FACTOR,
        strict=True,
        roles_alternate=True,
        agent=workload.script,
        summary_quality=spec.summarizer,
        models=(MODEL,),
        encoders=encoders,
    )
    start_time = time.perf_counter()
    async with _served(upstream.app) as mock_url:
        # Started off the event loop: the loop serves the mock meanwhile.
        proxy = await asyncio.to_thread(_start_proxy, spec.slug, mock_url, work)
        try:
            async with openai.AsyncOpenAI(
                api_key="sk-bench", base_url=proxy.base_url, max_retries=0, timeout=120
            ) as sdk:
                client = _Client(sdk, workload, upstream, counter, cell)
                await _drive(client, progress)
                cell.history_tokens = _history_tokens(client)
        finally:
            await asyncio.to_thread(proxy.stop)
    cell.wall_s = time.perf_counter() - start_time
    _read_upstream(upstream, cell, workload)
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
