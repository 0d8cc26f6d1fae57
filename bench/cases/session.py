"""Effectiveness: a long scripted agent session, through the proxy and straight to the mock.

The model is `proxy.mock_upstream`'s `AgentScript` (tool calls for a few rounds per user
turn, then an answer); the client is the OpenAI SDK running the tools, whose results are
large (source files, test logs, search hits), with facts planted in some user turns. The
same client talks once to the mock directly with an unbounded window (the baseline: what the
provider's prompt cache gives a client on its own) and once through a `compaction-proxy
serve` process in front of a mock with a small window, strict about tool pairing and role
order, whose summarizer is poor (it keeps no fact: the proxy's own ledger must).

The mock runs in this process (its counters are read afterwards); the proxy is a process of
its own, as deployed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import uvicorn
import yaml

from bench.measures import SessionResult
from bench.processes import Server, free_port, start
from bench.progress import Progress
from bench.stack import proxy_command
from proxy.adapters.tokenizer import Encoders
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter
from proxy.demo.streams import StreamedMessage
from proxy.mock_upstream import AgentScript, MockUpstream, Recorded, SummaryQuality
from proxy.mock_upstream.summarizer import summarize

MODEL = "mock-model"
WINDOW = 32_000
ROUNDS_PER_TURN = 2

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository."),
        ("run_tests", "Run the test suite of a package and return its log."),
        ("grep", "Search the repository for a pattern."),
    )
]

# The agent's report at the end of each turn, and the user's instructions: text that only a
# summary can shrink (tool results can be cleared), a few hundred tokens a turn.
ANSWER = " ".join(
    f"Step report, part {n}: the handler was refactored, its tests were updated and the "
    "failing cases were traced to the request parser, which now validates its input first."
    for n in range(8)
)
INSTRUCTIONS = (
    "Continue with the next module: read its source, run its tests, search for the callers "
    "of anything you change, keep the public interface stable, explain each change in the "
    "commit message, and report what you did and what is left when you are done. "
)

SCRIPT = AgentScript(
    calls=tuple(
        (name, json.dumps({"arg": f"{name}-{i}"}))
        for i in range(12)
        for name in ("read_file", "run_tests", "grep")
    ),
    rounds_per_turn=ROUNDS_PER_TURN,
    answer=ANSWER,
)

# Planted in user turns: an id, a path, numbers with units, rules, a host, a version.
FACTS = (
    ("Use ticket OPS-4821 for this work.", "OPS-4821"),
    ("The config lives at /srv/app/settings.toml.", "/srv/app/settings.toml"),
    ("Keep the p99 latency under 250 ms.", "250 ms"),
    ("Never push directly to the main branch.", "Never push directly to the main branch"),
    ("The staging database is db-staging-07.internal on port 6432.", "db-staging-07.internal"),
    ("Always run migrations with --dry-run first.", "Always run migrations with --dry-run first"),
    ("The release will be tagged v4.19.2.", "v4.19.2"),
    ("The budget for this quarter is 18500 EUR.", "18500 EUR"),
)


def tool_output(name: str, arguments: str, call: int) -> str:
    """A tool's result: a few hundred to a few thousand tokens."""
    arg = json.loads(arguments).get("arg", "")
    if name == "read_file":
        lines = [f"# src/{arg}.py (read at call {call})"]
        lines += [
            f"def handler_{n}(request):\n    return respond(request, code={n})" for n in range(90)
        ]
        return "\n".join(lines)
    if name == "run_tests":
        lines = [
            f"tests/test_{arg}.py::test_case_{n} {'PASSED' if n % 17 else 'FAILED'} [{n}%]"
            for n in range(160)
        ]
        return "\n".join([f"$ pytest tests/ -k {arg}", *lines, "== 9 failed, 151 passed =="])
    hits = [f"src/pkg_{n % 9}/module_{n}.py:{n * 7}: {arg} = load({n})" for n in range(40)]
    return "\n".join(hits)


@dataclass(slots=True)
class _Client:
    """The agent's side: the SDK, the history it resends, and what it sent."""

    sdk: openai.AsyncOpenAI
    stream: bool
    counter: TokenCounter
    result: SessionResult
    messages: list[Any]

    async def turn(self, text: str) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        mark = len(self.messages)
        self.messages.append({"role": "user", "content": text})
        while True:
            body = {"model": MODEL, "messages": self.messages, "tools": TOOLS}
            self.result.sent_tokens.append(self.counter.request(body))
            self.result.model_calls += 1
            try:
                message = await self._complete(body)
            except openai.APIError as exc:
                self.result.client_errors += 1
                if len(self.result.error_samples) < 3:
                    self.result.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
                del self.messages[mark:]  # the turn is abandoned, as an agent would
                return
            self.messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                function = call["function"]
                output = tool_output(
                    function["name"], function["arguments"], self.result.model_calls
                )
                self.messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": output}
                )

    async def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = await self.sdk.chat.completions.with_raw_response.create(**body, stream=self.stream)
        applied = raw.headers.get("x-compaction-applied")
        if applied is not None:
            self.result.compactions[applied] += 1
        parsed = raw.parse()
        if isinstance(parsed, openai.AsyncStream):
            return await _assemble(parsed)
        message: dict[str, Any] = parsed.choices[0].message.model_dump(exclude_none=True)
        return message


async def _assemble(stream: openai.AsyncStream[Any]) -> dict[str, Any]:
    streamed = StreamedMessage()
    async for chunk in stream:
        streamed.add(chunk)
    return streamed.message()


@asynccontextmanager
async def _served(app: Any) -> AsyncIterator[str]:
    """`app` served by uvicorn in this event loop; yields its base URL with /v1."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await task
        sock.close()


def _fact_turns(calls: int) -> dict[int, tuple[str, str]]:
    """The user turns that carry a fact: spread over the first three quarters of the session."""
    turns = max(calls // (ROUNDS_PER_TURN + 1), 1)
    span = max(turns * 3 // 4, 1)
    step = max(span // len(FACTS), 1)
    at = {1 + i * step: fact for i, fact in enumerate(FACTS)}
    return {turn: fact for turn, fact in at.items() if turn <= span}


async def _drive(
    sdk: openai.AsyncOpenAI,
    result: SessionResult,
    counter: TokenCounter,
    calls: int,
    progress: Progress,
) -> None:
    system = {"role": "system", "content": "You are a coding agent."}
    client = _Client(sdk, result.stream, counter, result, [system])
    facts = _fact_turns(calls)
    turn = 0
    while result.model_calls < calls:
        turn += 1
        sentence, key = facts.get(turn, ("", ""))
        if key:
            result.facts_planted.append(key)
        before = result.model_calls
        # The fact on a line of its own, as a user adds a remark; the instructions carry no
        # digit, so a summarizer quoting lines with specifics quotes the facts.
        await client.turn(f"Next step. {INSTRUCTIONS}" + (f"\n{sentence}" if sentence else ""))
        progress.tick(result.model_calls - before)


def _chat_requests(upstream: MockUpstream) -> list[Recorded]:
    summaries = {id(r) for r in upstream.summary_requests}
    return [
        r for r in upstream.requests
        if r.path.endswith("/chat/completions") and id(r) not in summaries
    ]  # fmt: skip


def _prefix_stable_share(requests: list[Recorded]) -> float:
    """Share of consecutive forwarded requests where the later extends the earlier's
    messages (what keeps the provider's prompt cache warm)."""
    bodies = [r.json()["messages"] for r in requests]
    pairs = list(itertools.pairwise(bodies))
    if not pairs:
        return float("nan")
    return sum(bool(after[: len(before)] == before) for before, after in pairs) / len(pairs)


def _read_upstream(
    upstream: MockUpstream, result: SessionResult, counter: TokenCounter, quality: SummaryQuality
) -> None:
    result.forwarded_tokens = list(upstream.prompt_tokens)
    result.cached_tokens = list(upstream.cached_tokens)
    result.overflows = upstream.overflows
    result.strict_rejections = upstream.strict_rejections
    result.summary_calls = upstream.summary_calls
    for request in upstream.summary_requests:
        body = request.json()
        result.summary_prompt_tokens += counter.request(body)
        result.summary_completion_tokens += counter.text(summarize(body, quality, counter.text))
    chats = _chat_requests(upstream)
    result.prefix_stable_share = _prefix_stable_share(chats)
    last = json.dumps(chats[-1].json()["messages"]) if chats else ""
    for key in result.facts_planted:
        (result.facts_kept if key in last else result.facts_lost).append(key)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    label: str
    via_proxy: bool
    stream: bool
    quality: SummaryQuality = "poor"


# The poor summarizer is the test of the proxy's own fact ledger; the good one shows what a
# careful model adds.
PLANS = (
    SessionPlan("direct, unbounded window", via_proxy=False, stream=False),
    SessionPlan("proxy, whole, poor summarizer", via_proxy=True, stream=False),
    SessionPlan("proxy, streamed, poor summarizer", via_proxy=True, stream=True),
    SessionPlan("proxy, whole, good summarizer", via_proxy=True, stream=False, quality="good"),
)


async def run_session(
    plan: SessionPlan,
    *,
    calls: int,
    encoders: Encoders,
    work: Path,
    progress: Progress,
) -> SessionResult:
    """One session of `calls` model calls, as `plan` says."""
    counter = TokenCounter(encoders.by_name.get(O200K_BASE, ApproximateEncoder()))
    result = SessionResult(plan.label, plan.via_proxy, plan.stream)
    upstream = MockUpstream(
        window=WINDOW if plan.via_proxy else None,
        strict=True,
        roles_alternate=True,
        agent=SCRIPT,
        summary_quality=plan.quality,
        encoders=encoders,
    )
    start_time = time.perf_counter()
    async with _served(upstream.app) as mock_url:
        # Started off the event loop: the loop serves the mock meanwhile.
        proxy = None
        if plan.via_proxy:
            proxy = await asyncio.to_thread(_start_proxy, mock_url, work)
        try:
            base_url = proxy.base_url if proxy is not None else mock_url
            async with openai.AsyncOpenAI(
                api_key="sk-bench", base_url=base_url, max_retries=0, timeout=120
            ) as sdk:
                await _drive(sdk, result, counter, calls, progress)
        finally:
            if proxy is not None:
                await asyncio.to_thread(proxy.stop)
    result.wall_s = time.perf_counter() - start_time
    _read_upstream(upstream, result, counter, plan.quality)
    return result


def _start_proxy(mock_url: str, work: Path) -> Server:
    name = "session-proxy"
    config = work / f"{name}.yaml"
    settings = {
        "upstream": {"base_url": mock_url, "timeout_s": 120},
        "context": {"context_window": WINDOW},
        "log": {"level": "warning"},
    }
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    command = proxy_command(config, port)
    return start(name, command, port=port, log=work / f"{name}.log", ready_path="/healthz")
