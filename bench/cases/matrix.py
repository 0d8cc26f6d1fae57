"""The effectiveness matrix: windows x workloads x summarizers, through the proxy's defaults.

Each cell is one scripted session (`bench/workloads/`) driven by the OpenAI SDK through a
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

Every Responses cell runs once more with a client that compacts its own history as Codex
does (`client_compacts`): once its count of its history passes 90 % of the window, it calls
`POST /v1/responses/compact` through the proxy and goes on from the output (the user
messages and the proxy's compaction item); the proxy's own compactions go on beside it.

Every cell runs over Anthropic's Messages API too (`MessagesClient`, the `anthropic` SDK as
Claude Code sends it), once without thinking and once with it (`thinking`): each answer then
opens with a signed `thinking` block the client sends back, and `bench.thinking` checks that
every one the proxy forwards is the block the mock issued for that turn, byte for byte. The
client asks for a Claude model, whose window the proxy's table says is 200k and which
Anthropic's `/v1/models` does not report: the cell's proxy configures the cell's window for
it (`models:`), as an operator in front of a smaller Anthropic-compatible model does;
nothing under `context:` as elsewhere.

Not every workload runs at every window (`windows_of`): the labelled statements and the
tool-only identifiers at the run's windows up to 32k; the oversized newest result and the
fixed-heavy agent at 16k, where clients met them, whatever the run's size; issue 38's client
shapes at 8k, 16k and 32k (the tool-schema-heavy client at 6k, the fixed-heavy agent with
pastes at 16k), whole and streamed. The oversized result runs once per `context.strategy`
(the only cells whose proxy configures anything). Besides the statement checks in the last
forwarded request, `bench.forwarded` judges what the requests show: the stale values in the
compaction block, the running turn, the cut result; and for issue 38's shapes
`bench.shapes` (`matrix_shapes.py`): the running ask whole, the working set, the ledger's
order and pastes, the newest result, the folded rounds named, the earlier sentences.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anthropic
import openai
import yaml

from bench import forwarded
from bench import recall as recall_judge
from bench import thinking as thinking_judge
from bench.cases.matrix_clients import (
    MODEL,
    TOKEN_FACTOR,
    ChatClient,
    CompactingResponsesClient,
    MatrixClient,
    ResponsesClient,
    cell_budget,
    flat_tools,
)
from bench.cases.matrix_messages import CLAUDE_MODEL, MessagesClient, anthropic_tools
from bench.cases.matrix_shapes import history_extras, judge_shapes
from bench.cases.session import _served
from bench.config import Api, Size
from bench.measures import Answer, CellResult, Check
from bench.processes import Server, free_port, start
from bench.progress import Progress
from bench.stack import proxy_command
from bench.workloads import BUILDERS, Plan, Workload, WorkloadKey
from proxy.adapters.tokenizer import Encoders
from proxy.core import recall
from proxy.core.policy import STRATEGIES, ContextPolicy, Strategy
from proxy.core.room import fixed_share as room_fixed_share
from proxy.core.room import in_room
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter
from proxy.mock_upstream import MockUpstream, SummaryQuality

WINDOWS: Final = (4_096, 8_192, 32_768, 131_072)
SUMMARIZERS: Final[tuple[SummaryQuality, ...]] = ("poor", "good")
CLIENTS: Final[dict[Api, type[MatrixClient]]] = {
    "chat": ChatClient,
    "responses": ResponsesClient,
    "messages": MessagesClient,
}
BULK_FROM: Final = 32_768
"""Above this window, model and tool output scale with the window (see the docstring)."""
CLIENT_WINDOWS: Final = (8_192, 16_384, 32_768)
"""Issue 38's client shapes: each at these windows, whatever the run's size."""
OWN_WINDOWS: Final[dict[WorkloadKey, tuple[int, ...]]] = {
    "oversized-result": (16_384,),
    "fixed-heavy": (16_384,),
    "aider": CLIENT_WINDOWS,
    "paste-per-turn": CLIENT_WINDOWS,
    "long-turn": CLIENT_WINDOWS,
    # Where the replayed function-calling trajectories met it: schemas 0.9 of the input.
    "schema-heavy": (6_144,),
    "fixed-heavy-pastes": (16_384,),
}
"""Workloads measured at their own windows whatever the run's size: where clients met them."""
LARGEST_WINDOW: Final[dict[WorkloadKey, int]] = {
    "labelled": 32_768,
    "artifacts": 32_768,
    "recall": 32_768,
}
"""Workloads measured at the run's windows up to this one only."""
EVERY_STRATEGY: Final[frozenset[WorkloadKey]] = frozenset({"oversized-result"})
"""Workloads run once per `context.strategy` instead of on the defaults alone."""
STREAMED: Final[frozenset[WorkloadKey]] = frozenset(
    {"recall", "aider", "paste-per-turn", "long-turn", "schema-heavy", "fixed-heavy-pastes"}
)
"""Workloads run streamed too (every answer a stream), besides whole."""
RECALL_OFF: Final[frozenset[WorkloadKey]] = frozenset({"recall"})
"""Workloads run once more (whole) with `context.recall: false`: their baseline."""


@dataclass(frozen=True, slots=True)
class CellSpec:
    window: int
    workload: WorkloadKey
    summarizer: SummaryQuality
    api: Api = "chat"
    strategy: Strategy | None = None
    """The proxy's `context.strategy` (None: nothing configured, the default)."""
    stream: bool = False
    """Every answer streamed."""
    recall: bool = True
    """The proxy's `context.recall` (False: configured off)."""
    client_compacts: bool = False
    """The client compacts its own history through `/v1/responses/compact` (Responses)."""
    thinking: bool = False
    """The client enables thinking and sends the signed blocks back (Messages)."""

    @property
    def slug(self) -> str:
        workload = f"{self.workload}-{self.strategy}" if self.strategy else self.workload
        workload += ("-streamed" if self.stream else "") + ("" if self.recall else "-recall-off")
        workload += "-client-compact" if self.client_compacts else ""
        workload += "-thinking" if self.thinking else ""
        return f"matrix-{self.window}-{workload}-{self.summarizer}-{self.api}"

    @property
    def bulk(self) -> float:
        return max(1.0, self.window / BULK_FROM)


def windows_of(workload: WorkloadKey, size: Size) -> tuple[int, ...]:
    """The windows a run of `size` measures `workload` at."""
    if workload in OWN_WINDOWS:
        return OWN_WINDOWS[workload]
    largest = LARGEST_WINDOW.get(workload)
    return tuple(w for w in size.matrix_windows if largest is None or w <= largest)


def _variants(workload: WorkloadKey) -> list[tuple[bool, bool]]:
    """(streamed, recall on) of each cell of `workload` at one window, summarizer and API."""
    streams = (False, True) if workload in STREAMED else (False,)
    off = [(False, False)] if workload in RECALL_OFF else []
    return [*((stream, True) for stream in streams), *off]


def cell_specs(size: Size, workloads: Sequence[WorkloadKey] = ()) -> list[CellSpec]:
    """The cells a run of `size` measures (of `workloads` only, when given), window by
    window; each API's run of a cell next to the others', a Responses cell's next to its
    twin whose client compacts through `/v1/responses/compact`, a Messages cell's next to
    its twin with thinking."""
    cells = [
        CellSpec(window, workload, summarizer, api, strategy, stream, recall_on, compacts, thinking)
        for workload in workloads or size.matrix_workloads
        for window in windows_of(workload, size)
        for strategy in (STRATEGIES if workload in EVERY_STRATEGY else (None,))
        for summarizer in size.matrix_summarizers
        for stream, recall_on in _variants(workload)
        for api in size.matrix_apis
        for compacts in ((False, True) if api == "responses" else (False,))
        for thinking in thinking_variants(api)
    ]
    return sorted(cells, key=lambda spec: spec.window)  # stable: workloads in order


def thinking_variants(api: Api) -> tuple[bool, ...]:
    """Whether the client enables thinking, for each run of a cell over `api`: the Messages
    API's runs without and with it."""
    return (False, True) if api == "messages" else (False,)


def workload_for(spec: CellSpec, size: Size, counter: TokenCounter) -> Workload:
    plan = Plan(
        round(size.matrix_history * spec.window), size.matrix_max_calls, spec.bulk, spec.window
    )
    return BUILDERS[spec.workload](plan, counter)


def landing_target(fixed: float = 0.0) -> float:
    """The compaction target the landings are judged against: the proxy's default, applied
    to the room the instructions and tools (`fixed`, a share of the usable input) leave, as
    the proxy applies it (`proxy.core.room`)."""
    return in_room(ContextPolicy().compaction_target, fixed)


def fixed_share(workload: Workload, window: int, counter: TokenCounter, api: Api = "chat") -> float:
    """The share of the usable input that `workload`'s instructions and tools take, in the
    provider's count (the pressure the proxy reports once calibrated), as the proxy counts
    them for `api` (the Responses API's tools are flat: their schemas count differently)."""
    budget = cell_budget(window)
    system = {"role": "system", "content": workload.system}
    tools = _tools(workload, api)
    tokens = counter.messages([system]) + counter.tools({"tools": tools})
    return room_fixed_share(budget, tokens)


def _tools(workload: Workload, api: str) -> list[dict[str, Any]]:
    """`workload`'s tools in `api`'s form."""
    if api == "responses":
        return flat_tools(workload.tools)
    return anthropic_tools(workload.tools) if api == "messages" else list(workload.tools)


def _target(spec: CellSpec, workload: Workload, counter: TokenCounter) -> float:
    return landing_target(fixed_share(workload, spec.window, counter, spec.api))


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
    tools = _tools(client.workload, cell.api)
    offered = [*tools, recall.tool(cell.api == "responses")]
    counter = client.counter
    cell.tool_tokens = counter.tools({"tools": offered}) - counter.tools({"tools": tools})
    _judge_forwarded(client, bodies)
    if client.workload.asked:
        _judge_recall(client, bodies)
    judge_shapes(client, bodies)


def _judge_recall(client: MatrixClient, bodies: list[Any]) -> None:
    """What `bench.recall` judges: the late questions' answers and where their values'
    results stood, the client's requests' stability between compactions, the tool's cost."""
    workload, cell, upstream = client.workload, client.cell, client.upstream
    views = [client.messages(body) for body in bodies]
    rounds = [recall_judge.is_round(messages) for messages in views]
    firsts = [i for i, is_round in enumerate(rounds) if not is_round]
    cell.recall_rounds, cell.recall_calls = sum(rounds), upstream.recall_calls
    cell.offered = sum(recall_judge.offers(bodies[i]) for i in firsts)
    requests = [(recall_judge.head(bodies[i]), client.conversation(bodies[i])) for i in firsts]
    cell.stable = recall_judge.stable(requests, cell.applied)
    texts = [turn.text for turn in workload.turns]
    for asked in workload.asked:
        turn = texts.index(asked.question)
        if turn >= len(client.first_calls):
            continue
        at = client.first_calls[turn]
        call = client.written.get(asked.path)
        where = views[firsts[at]] if at < len(firsts) else []
        # The turn's last request: its last recall round, if it had any.
        last = views[firsts[at + 1] - 1] if at + 1 < len(firsts) else views[-1]
        cell.answers.append(
            Answer(
                asked.key,
                asked.value,
                recall_judge.state(where, call, asked.value),
                client.finals[turn],
                recall_judge.recalls(last, asked.value, asked.path) if where else "",
            )
        )
    first = min(texts.index(asked.question) for asked in workload.asked)
    if first < len(client.first_calls):
        cell.prompts_before = upstream.prompt_tokens[: client.first_calls[first]]


def _judge_forwarded(client: MatrixClient, bodies: list[Any]) -> None:
    """What `bench.forwarded` judges: stale values in the last request's block, and (where
    the workload asks) the running turn and the oversized result in every request."""
    workload, cell = client.workload, client.cell
    last = client.messages(bodies[-1]) if bodies else []
    cell.stale = forwarded.stale_in(forwarded.block(last), [s.key for s in workload.stale])
    if not (workload.running_turn or workload.result_items):
        return
    requests = [client.messages(body) for body in bodies]
    if workload.running_turn:
        texts = [turn.text for turn in workload.turns]
        # The rounds the client's own compactions took out of its history are not sent.
        sent = [[c for c in ids if c not in client.condensed] for ids in client.calls]
        located = forwarded.locate(requests, texts, client.calls)
        extras = history_extras(client, bodies, requests, located, texts)
        clears = [
            floor + extra > 1.0 for floor, extra in zip(cell.cut_floors, extras, strict=True)
        ] if extras is not None else []  # fmt: skip
        cell.running_user, cell.running_rounds = forwarded.running_turn(
            requests, texts, sent, clears
        )
    listing = workload.turns[0].texts[0] if workload.result_items else None
    if listing and client.calls and client.calls[0]:
        # The first request is the one the result answers: every later one must carry it,
        # until the client's own compaction takes it out of the history it sends.
        until = min(client.compacted_at, default=len(requests))
        cell.result_cut = forwarded.result_cut(
            requests[1:until],
            client.calls[0][0],
            workload.result_items,
            client.counter.message,
            last_item=json.dumps(json.loads(listing)[-1]),
            first=2,
        )


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
        spec.window,
        spec.workload,
        spec.summarizer,
        spec.bulk,
        _target(spec, workload, counter),
        api=spec.api,
        strategy=spec.strategy,
        stream=spec.stream,
        recall=spec.recall,
        client_compacts=spec.client_compacts,
        thinking=spec.thinking,
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
        # A model that calls `context_recall` when a question needs what a compaction took.
        recaller=bool(workload.asked),
    )
    issued = thinking_judge.Issued(upstream.app) if spec.api == "messages" else None
    start_time = time.perf_counter()
    async with _served(issued or upstream.app) as mock_url:
        # Started off the event loop: the loop serves the mock meanwhile.
        proxy = await asyncio.to_thread(_start_proxy, spec, mock_url, work)
        try:
            async with _sdk(spec.api, proxy.base_url) as sdk:
                kind = CompactingResponsesClient if spec.client_compacts else CLIENTS[spec.api]
                client = kind(sdk, workload, upstream, counter, cell, stream=spec.stream)
                await _drive(client, progress)
                cell.history_tokens = client.history_tokens()
        finally:
            await asyncio.to_thread(proxy.stop)
    cell.wall_s = time.perf_counter() - start_time
    _read_upstream(client)
    if issued is not None and spec.thinking:
        cell.signatures = thinking_judge.judge(
            issued.contents, [request.json() for request in client.forwarded()]
        )
    return cell


def _sdk(api: Api, base_url: str) -> Any:
    """The official async client of `api` on the proxy at `base_url` (no retries)."""
    if api == "messages":
        # Anthropic's SDK appends `/v1/messages` itself.
        root = base_url.removesuffix("/v1")
        return anthropic.AsyncAnthropic(
            api_key="sk-ant-bench", base_url=root, max_retries=0, timeout=120
        )
    return openai.AsyncOpenAI(api_key="sk-bench", base_url=base_url, max_retries=0, timeout=120)


def _start_proxy(spec: CellSpec, mock_url: str, work: Path) -> Server:
    # Nothing under `context:` but a cell's strategy or recall: the window comes from the mock's
    # /v1/models, the rest from the defaults, which are what the matrix judges.
    name = spec.slug
    settings: dict[str, Any] = {
        "upstream": {"base_url": mock_url, "timeout_s": 120},
        "log": {"level": "warning"},
    }
    context: dict[str, Any] = {}
    if spec.strategy is not None:
        context["strategy"] = spec.strategy
    if not spec.recall:
        context["recall"] = False
    if context:
        settings["context"] = context
    if spec.api == "messages":
        # A Claude model's window is 200k in the proxy's table: the cell's is configured.
        settings["models"] = {CLAUDE_MODEL: {"context_window": spec.window}}
    config = work / f"{name}.yaml"
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    command = proxy_command(config, port)
    return start(name, command, port=port, log=work / f"{name}.log", ready_path="/healthz")
