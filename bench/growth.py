"""Agents whose histories grow as real agents' do: what the proxy adds, step by step.

The overhead cases resend one history, which the proxy's per-message caches serve whole;
real agents add a fresh tool result with every request, and every compaction meets results
it has never seen. Here each agent has a system prompt and a task, then at every step an
assistant tool call and a fresh tool result of about 800 tokens (a file read, a test log, a
JSON listing: paths, identifiers, numbers, error lines, as agents read them), and sends the
whole history so far: 60 steps grow it to about 48k tokens.

Cases (each side by side with the same requests sent straight to the mock):

- `one-128k`: one agent on a 128k window, where nothing compacts: what the proxy adds to a
  turn of a growing history. Each step is sent direct and proxied, in alternating order;
  added = proxied minus direct, per step.
- `one-16k`: one agent on a 16k window, where the proxy compacts every few steps: the
  compaction turns' added latency (from the `X-Compaction-Applied` header) beside the rest.
- `eight-16k`: eight agents at once on the 16k window, each sending its next step when its
  last one is answered: latency percentiles and requests per second, direct and proxied;
  with `--workers 2` beside one worker (both on a private redis-server: workers share their
  sessions through Redis), the same agents in the same run.

Every proxied agent is a conversation of its own (its task names it, and each target has its
own API key and so its own tenant): no request finds a checkpoint another one left.

    python -m bench.growth [--steps 60] [--agents 8] [--rounds 3] [--no-workers] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvloop
import yaml

from bench.agent_client import AgentConnection
from bench.measures import percentile
from bench.processes import ProcessMeter, Server, free_port, python_module, start
from bench.stack import COMPACTION_KEY, proxy_command

SMALL_MODEL = "mock-compact"  # the 16k window
LARGE_MODEL = "mock-model"  # the 128k window
WINDOWS = {SMALL_MODEL: 16_000, LARGE_MODEL: 131_072}
RESULT_TOKENS = 800
TIMEOUT_S = 120.0
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Shape:
    """What `run_growth` runs: each agent's steps, the fleet's agents, the rounds, and
    whether every answer is streamed (the mock's 64 content events each)."""

    steps: int = 60
    agents: int = 8
    rounds: int = 3
    stream: bool = False


SIZES: dict[str, Shape] = {
    "default": Shape(),
    "quick": Shape(rounds=1),
    "smoke": Shape(steps=12, agents=2, rounds=1),
}
"""`run_growth`'s shape at each of the suite's sizes."""

_PHRASE = (
    "the worker reads the queue and retries each failed upload after a short backoff while "
    "the scheduler writes progress to the dashboard and the operator checks latency memory "
    "disk usage before the nightly deploy of the billing service"
)
_WORDS = _PHRASE.split()
_NAMES = ("parse_config", "load_rows", "retry_upload", "flush_cache", "render_report")
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')} in the workspace",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "run_tests", "list_dir")
]


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(count))


def _file_read(rng: random.Random, path: str) -> str:
    lines = [f"# {path}", "import os", "from dataclasses import dataclass", ""]
    for n in range(rng.randrange(13, 16)):
        name = rng.choice(_NAMES)
        lines += [
            f"def {name}_{n}(path: str, limit: int = {rng.randrange(10, 999)}) -> list[str]:",
            f'    """{_words(rng, 7).capitalize()}."""',
            f"    rows = [line for line in open(path) if len(line) < limit]  # {_words(rng, 3)}",
            "    return rows",
        ]
    return "\n".join(lines)


def _test_log(rng: random.Random, path: str) -> str:
    lines = [f"$ pytest {path} -q"]
    for n in range(rng.randrange(37, 43)):
        module = f"tests/test_{rng.choice(_NAMES)}.py"
        if rng.random() < 0.15:
            lines.append(
                f"FAILED {module}::test_case_{n} - AssertionError: expected "
                f"{rng.randrange(1000)} rows, got {rng.randrange(1000)} ({_words(rng, 4)})"
            )
        else:
            lines.append(f"PASSED {module}::test_case_{n} [{rng.randrange(1, 99)}%]")
    lines.append(f"== {rng.randrange(40, 90)} passed, {rng.randrange(1, 5)} failed in 3.2s ==")
    return "\n".join(lines)


def _listing(rng: random.Random, path: str) -> str:
    rows = [
        {
            "path": f"{path}/{rng.choice(_NAMES)}_{n}.py",
            "size": rng.randrange(100, 90_000),
            "owner": f"team-{rng.randrange(9)}",
            "sha": f"{rng.randrange(16**10):010x}",
        }
        for n in range(rng.randrange(16, 19))
    ]
    return json.dumps(rows)


def agent_step(agent: str, step: int) -> list[dict[str, Any]]:
    """Step `step` of `agent`: the assistant's tool call and its fresh result (~800 tokens)."""
    rng = random.Random(f"{agent}/{step}")
    tool = ("read_file", "run_tests", "list_dir")[step % 3]
    path = f"src/{rng.choice(_NAMES)}/{rng.choice(_NAMES)}_{step}.py"
    result = {"read_file": _file_read, "run_tests": _test_log, "list_dir": _listing}[tool]
    call_id = f"call_{agent.replace(' ', '_')}_{step}"
    return [
        {
            "role": "assistant",
            "content": f"Step {step}: {_words(rng, 12)}.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"path": path})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result(rng, path)},
    ]


def agent_bodies(agent: str, *, steps: int, model: str, stream: bool = False) -> list[bytes]:
    """Every request of `agent`'s run: its whole history at each step, serialized as SDKs do
    (the messages joined as text, so that a long run is not serialized whole each time);
    `stream`: each asks for its answer streamed, as agents mostly do."""
    head = [
        {"role": "system", "content": "You are a coding agent. " + _words(random.Random(1), 300)},
        {"role": "user", "content": f"[{agent}] Fix the failing upload tests in src/, then "
         "report what changed. Never touch the migrations."},
    ]  # fmt: skip
    encoded = [json.dumps(message) for message in head]
    opening = {"model": model, **({"stream": True} if stream else {}), "tools": _TOOLS}
    prefix = json.dumps({**opening, "messages": []})[:-2]
    bodies = []
    for step in range(steps):
        encoded += [json.dumps(message) for message in agent_step(agent, step)]
        bodies.append((prefix + ", ".join(encoded) + "]}").encode())
    return bodies


@dataclass(slots=True)
class Sample:
    ms: float
    compacted: str | None  # the X-Compaction-Applied header, when the proxy compacted


@dataclass(slots=True)
class Run:
    """What one target measured in one case."""

    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    """The server process's CPU time (its workers' included) over the run."""

    def add(self, other: Run) -> None:
        self.samples += other.samples
        self.wall_s += other.wall_s
        self.errors += other.errors
        self.cpu_s += other.cpu_s

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / len(self.samples) if self.samples else 0.0

    def latencies(self, *, compacted: bool | None = None) -> list[float]:
        return [
            s.ms
            for s in self.samples
            if compacted is None or (s.compacted not in (None, "none")) == compacted
        ]

    @property
    def rps(self) -> float:
        return len(self.samples) / self.wall_s if self.wall_s else 0.0

    @property
    def actions(self) -> Counter[str]:
        return Counter(s.compacted or "none" for s in self.samples)


async def _send(connection: AgentConnection, body: bytes) -> Sample | str:
    try:
        answer = await connection.post(body)
    except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if answer.status != 200:
        return f"HTTP {answer.status}: {answer.body[:200]!r}"
    return Sample(answer.ms, answer.headers.get("x-compaction-applied"))


async def agents_run(url: str, key: str, agents: Sequence[Sequence[bytes]]) -> Run:
    """Every agent at once, each sending its next step when the last one is answered.

    Each agent has a connection of its own, as agents are processes of their own: its
    requests go over it kept alive, so to the worker that accepted it. A pool shared by
    every agent would hand one conversation's requests to any worker, and each worker would
    count and scan its new messages anew.
    """
    run = Run()

    async def agent(bodies: Sequence[bytes]) -> None:
        connection = AgentConnection(url, key, timeout_s=TIMEOUT_S)
        try:
            for body in bodies:
                outcome = await _send(connection, body)
                if isinstance(outcome, str):
                    run.errors.append(outcome)
                else:
                    run.samples.append(outcome)
        finally:
            await connection.aclose()

    started = time.perf_counter()
    await asyncio.gather(*(agent(bodies) for bodies in agents))
    run.wall_s = time.perf_counter() - started
    return run


async def paired_run(
    urls: dict[str, str], keys: dict[str, str], bodies: list[bytes]
) -> tuple[Run, list[float]]:
    """One agent's steps, each sent direct and proxied in alternating order; the proxied run
    and the added latency of each step (proxied minus direct)."""
    proxied, added = Run(), []
    connections = {
        name: AgentConnection(urls[name], keys[name], timeout_s=TIMEOUT_S)
        for name in ("direct", "proxy")
    }
    try:
        for step, body in enumerate(bodies):
            order = ["direct", "proxy"] if step % 2 == 0 else ["proxy", "direct"]
            measured: dict[str, Sample] = {}
            for name in order:
                outcome = await _send(connections[name], body)
                if isinstance(outcome, str):
                    (proxied.errors if name == "proxy" else []).append(outcome)
                    continue
                measured[name] = outcome
            if len(measured) == 2:
                proxied.samples.append(measured["proxy"])
                added.append(measured["proxy"].ms - measured["direct"].ms)
    finally:
        for connection in connections.values():
            await connection.aclose()
    return proxied, added


@dataclass(slots=True)
class Paired:
    """A single-agent case: added latency per step, for every step and compaction turns."""

    run: Run = field(default_factory=Run)
    added: list[float] = field(default_factory=list)
    added_compacting: list[float] = field(default_factory=list)

    def take(self, run: Run, added: list[float]) -> None:
        self.run.add(run)
        self.added += added
        self.added_compacting += [
            a for a, s in zip(added, run.samples, strict=True) if s.compacted not in (None, "none")
        ]


@dataclass(slots=True)
class GrowthResult:
    steps: int
    agents: int
    one_large: Paired
    one_small: Paired
    fleet: dict[str, Run]  # target name -> the eight agents' runs over every round
    stream: bool = False
    tokens_last: int | None = None
    problem: str | None = None


def _config(mock_url: str, redis_url: str | None, workers: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstream": {"base_url": mock_url, "timeout_s": 120},
        "models": {name: {"context_window": window} for name, window in WINDOWS.items()},
        "log": {"level": "warning"},
        "responses": {"compaction_key": COMPACTION_KEY},
    }
    if redis_url is not None:
        config["redis"] = {"url": redis_url}
    if workers > 1:
        config["server"] = {"workers": workers}
    return config


def _start_proxy(
    name: str, work: Path, mock_url: str, redis_url: str | None, workers: int
) -> Server:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(_config(mock_url, redis_url, workers)))
    port = free_port()
    return start(
        name, proxy_command(path, port), port=port, log=work / f"{name}.log", ready_path="/healthz"
    )


async def _metered(meter: ProcessMeter | None, run: Awaitable[_R]) -> tuple[_R, float]:
    """`run`'s result and the CPU seconds `meter`'s process spent meanwhile."""
    before = meter.cpu_seconds() if meter else 0.0
    result = await run
    return result, (meter.cpu_seconds() - before if meter else 0.0)


async def _measure(
    urls: dict[str, str], meters: dict[str, ProcessMeter], shape: Shape, *, progress: bool
) -> GrowthResult:
    steps, agents, stream = shape.steps, shape.agents, shape.stream
    keys = {name: f"sk-growth-{name}" for name in urls}
    fleets = {name: Run() for name in urls}
    result = GrowthResult(steps, agents, Paired(), Paired(), fleets, stream=stream)
    warm = agent_bodies("warm-up", steps=4, model=LARGE_MODEL, stream=stream)
    for name, url in urls.items():
        await agents_run(url, keys[name], [warm])
    pair = {"direct": urls["direct"], "proxy": urls["proxy"]}
    for r in range(shape.rounds):
        for model, case in ((LARGE_MODEL, result.one_large), (SMALL_MODEL, result.one_small)):
            bodies = agent_bodies(f"single {model} {r}", steps=steps, model=model, stream=stream)
            (run, added), cpu_s = await _metered(
                meters.get("proxy"), paired_run(pair, keys, bodies)
            )
            run.cpu_s = cpu_s
            case.take(run, added)
        order = list(urls)[r % len(urls) :] + list(urls)[: r % len(urls)]
        for name in order:
            fleet = [
                agent_bodies(f"fleet {name} {r} {a}", steps=steps, model=SMALL_MODEL, stream=stream)
                for a in range(agents)
            ]
            run, cpu_s = await _metered(meters.get(name), agents_run(urls[name], keys[name], fleet))
            run.cpu_s = cpu_s
            result.fleet[name].add(run)
        if progress:
            print(f"round {r + 1}/{shape.rounds} done", flush=True)
    return result


def run_growth(
    work: Path, shape: Shape = Shape(), *, workers: bool = True, progress: bool = False
) -> GrowthResult:
    """The mock, a proxy (and one with two workers on a private Redis when `workers`), and
    the three cases, `shape`'s rounds of them."""
    from tests.redis_server import RedisServer  # the suite's private redis-server helper

    work.mkdir(parents=True, exist_ok=True)
    servers: list[Server] = []
    redis: RedisServer | None = None
    try:
        mock_port = free_port()
        mock = start(
            "mock",
            python_module("bench.mock_server", "--port", str(mock_port)),
            port=mock_port,
            log=work / "mock.log",
        )
        servers.append(mock)
        redis_url: str | None = None
        if workers:
            (work / "redis").mkdir(exist_ok=True)
            redis = RedisServer(work / "redis")
            redis.start()
            redis_url = redis.url
        urls = {"direct": f"{mock.base_url}/chat/completions"}
        meters = {"direct": mock.meter}
        proxy = _start_proxy("proxy", work, mock.base_url, redis_url, 1)
        servers.append(proxy)
        urls["proxy"] = f"{proxy.base_url}/chat/completions"
        meters["proxy"] = proxy.meter
        if workers:
            pair = _start_proxy("proxy-2-workers", work, mock.base_url, redis_url, 2)
            servers.append(pair)
            urls["proxy-2-workers"] = f"{pair.base_url}/chat/completions"
            meters["proxy-2-workers"] = pair.meter
        return uvloop.run(_measure(urls, meters, shape, progress=progress))
    finally:
        for server in reversed(servers):
            server.stop()
        if redis is not None:
            redis.stop()


def added_p99(result: GrowthResult, target: str) -> float:
    """The fleet's p99 through `target` less the direct one (NaN when either is missing)."""
    direct, proxied = result.fleet.get("direct"), result.fleet.get(target)
    if direct is None or proxied is None or not proxied.samples or not direct.samples:
        return float("nan")
    return percentile(proxied.latencies(), 0.99) - percentile(direct.latencies(), 0.99)


def workers_ratio(result: GrowthResult) -> float:
    """Two workers' throughput over one worker's (NaN when not both measured)."""
    one, two = result.fleet.get("proxy"), result.fleet.get("proxy-2-workers")
    if one is None or two is None or not one.rps:
        return float("nan")
    return two.rps / one.rps


def report(result: GrowthResult) -> str:
    """The result as markdown tables."""
    lines = [
        f"Agents with growing histories: {result.steps} steps of one ~{RESULT_TOKENS}-token "
        f"tool result each; {result.agents} agents in the fleet case"
        + ("; every answer streamed." if result.stream else "."),
        "",
        "| case | requests | compacted | added p50 ms | added p90 ms | added p99 ms "
        "| proxy CPU ms/request |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for title, case in (
        ("one agent, 128k window", result.one_large),
        ("one agent, 16k window", result.one_small),
    ):
        compacted = len(case.added_compacting)
        lines.append(
            f"| {title} | {len(case.added)} | {compacted} | {percentile(case.added, 0.5):.2f} | "
            f"{percentile(case.added, 0.9):.2f} | {percentile(case.added, 0.99):.2f} | "
            f"{case.run.cpu_ms_per_request:.2f} |"
        )
        if compacted:
            a = case.added_compacting
            lines.append(
                f"| {title}, compaction turns | {compacted} | {compacted} | "
                f"{percentile(a, 0.5):.2f} | {percentile(a, 0.9):.2f} | {percentile(a, 0.99):.2f} "
                "| |"
            )
    lines += [
        "",
        f"{result.agents} agents at once, 16k window:",
        "",
        "| target | requests | errors | p50 ms | p90 ms | p99 ms | req/s | CPU ms/request "
        "| actions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, run in result.fleet.items():
        ms = run.latencies()
        actions = ", ".join(f"{k} {v}" for k, v in sorted(run.actions.items()))
        lines.append(
            f"| {name} | {len(ms)} | {len(run.errors)} | {percentile(ms, 0.5):.1f} | "
            f"{percentile(ms, 0.9):.1f} | {percentile(ms, 0.99):.1f} | {run.rps:.0f} | "
            f"{run.cpu_ms_per_request:.2f} | {actions} |"
        )
    direct = result.fleet.get("direct")
    if direct is not None:
        for name, run in result.fleet.items():
            if name == "direct":
                continue
            added = percentile(run.latencies(), 0.99) - percentile(direct.latencies(), 0.99)
            lines.append(f"\n{name}: added p99 {added:.1f} ms")
        one, two = result.fleet.get("proxy"), result.fleet.get("proxy-2-workers")
        if one is not None and two is not None and one.rps:
            lines.append(f"\ntwo workers' throughput over one worker's: {two.rps / one.rps:.2f}x")
    errors = [e for run in result.fleet.values() for e in run.errors]
    errors += result.one_large.run.errors + result.one_small.run.errors
    if errors:
        lines.append(f"\n{len(errors)} errors, e.g. {errors[:2]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-workers", action="store_true")
    parser.add_argument(
        "--stream", action="store_true", help="every request asks for its answer streamed"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="growth-") as folder:
        work = args.out or Path(folder)
        shape = Shape(args.steps, args.agents, args.rounds, stream=args.stream)
        result = run_growth(work, shape, workers=not args.no_workers, progress=True)
    print(report(result))


if __name__ == "__main__":
    main()
