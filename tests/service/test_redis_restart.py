"""Redis killed mid-run under long agents on two replicas, and restarted: every request answered.

Issue 23: two `compaction-proxy serve` replicas behind a round-robin balancer, tool-heavy
agents in an 8k window whose provider counts 10 % more than the proxy, and `kill -9` of
redis-server with a restart 3 s later. Redis came back with what its last snapshot held (as
it does with RDB persistence, or as a promoted replica does in a cluster): checkpoints of
prefixes long since grown. A request read while the store was down, and compacted after it
answered again, forwarded one of those with all the history since after it, and the proxy
refused its own request (a 400 "even after compaction"). `proxy.service.compactor` now uses
a stored checkpoint only when the view over it lands.

What must hold whatever the timing: no client request fails, the provider never receives a
request over its window (the mock counts what it receives against it), and the writes the
outage lost are counted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from proxy.demo.streams import StreamedMessage
from proxy.mock_upstream import AgentScript, MockUpstream
from tests.redis_server import RedisServer
from tests.servers import proxy_process, serve_in_thread

WINDOW = 8192
# The provider's tokenizer counts 10 % more than the proxy's.
TOKEN_FACTOR = 1.1
AGENTS = 3
STEPS = 100
REPLICAS = 2
# The provider's answer takes this long: an outage then spans some twenty steps per agent.
LATENCY_S = 0.1
DOWN_S = 3.0
# Each outage: (requests answered after the run or the last restart when Redis snapshots,
# requests answered after that when it is killed). The restart brings back the snapshot,
# a dozen steps per agent old.
OUTAGES = ((30, 40), (20, 40))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
SCRIPT = AgentScript(
    calls=tuple(("read_file", json.dumps({"path": f"src/module_{i}.py"})) for i in range(8)),
    rounds_per_turn=4,
)
_WORDS = ("queue", "retry", "lease", "shard", "token", "batch", "flush", "commit")


def tool_output(agent: int, step: int) -> str:
    """A file's contents: about 800 tokens of code, different at every step."""
    lines = [f"# src/agent_{agent}/module_{step}.py"]
    for n in range(40):
        word = _WORDS[(n * 7 + step) % len(_WORDS)]
        lines.append(f"def {word}_{agent}_{step}_{n}(request):\n    return {word}(request, n={n})")
    return "\n".join(lines)


class RoundRobin(httpx2.AsyncBaseTransport):
    """The balancer: each request to the next replica, whichever agent sends it."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=next(self._ports))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Run:
    """What the agents saw."""

    answered: int = 0
    errors: list[str] = field(default_factory=list)


async def agent(sdk: openai.AsyncOpenAI, index: int, run: Run) -> None:
    """A coding agent: `STEPS` model calls, each tool result about 800 tokens; every other
    agent streams."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Agent {index}: refactor the repository step by step."},
    ]
    for step in range(STEPS):
        params: dict[str, Any] = {"model": "mock-model", "messages": messages, "tools": TOOLS}
        try:
            message = await _complete(sdk, params, stream=index % 2 == 1)
        except openai.APIError as exc:
            run.errors.append(f"agent {index}, step {step}: {exc}")
            return
        run.answered += 1
        messages.append(message)
        for call in message.get("tool_calls") or []:
            content = tool_output(index, step)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": f"Go on after step {step}."})


async def _complete(sdk: openai.AsyncOpenAI, params: dict[str, Any], *, stream: bool) -> Any:
    if not stream:
        completion = await sdk.chat.completions.create(**params)
        return completion.choices[0].message.model_dump(exclude_none=True)
    streamed = StreamedMessage()
    async for chunk in await sdk.chat.completions.create(**params, stream=True):
        streamed.add(chunk)
    return streamed.message()


async def outages(redis_server: RedisServer, run: Run, agents: asyncio.Future[Any]) -> int:
    """Snapshot, kill -9 and restart Redis as `OUTAGES` say; how many it went through."""
    done = 0
    for before_snapshot, before_kill in OUTAGES:
        if not await _until(run, run.answered + before_snapshot, agents):
            break
        client = redis.asyncio.Redis(unix_socket_path=str(redis_server.socket))
        await client.save()
        await client.aclose()
        if not await _until(run, run.answered + before_kill, agents):
            break
        redis_server.kill()
        await asyncio.sleep(DOWN_S)
        redis_server.start()  # from the snapshot: what was stored since is gone
        done += 1
    return done


async def _until(run: Run, answered: int, agents: asyncio.Future[Any]) -> bool:
    """Wait until the agents have had `answered` answers; False when they finished first."""
    while run.answered < answered:
        if agents.done():
            return False
        await asyncio.sleep(0.01)
    return True


async def metric(base_url: str, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{base_url}/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"compaction_proxy_{name}"
    )


@contextmanager
def replicas(config: Path, upstream: str, redis_url: str, logs: Path) -> Iterator[list[str]]:
    """`REPLICAS` `compaction-proxy serve` processes on one Redis; their logs in `logs`."""
    args = ["--config", str(config), "--upstream", upstream, "--redis", redis_url]
    with ExitStack() as stack:
        urls = []
        for index in range(REPLICAS):
            log = stack.enter_context((logs / f"replica-{index}.log").open("wb"))
            urls.append(stack.enter_context(proxy_process(args, stderr=log)))
        yield urls


async def test_redis_killed_and_restarted_from_a_snapshot_fails_no_agent_request(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    provider = MockUpstream(
        window=WINDOW, token_factor=TOKEN_FACTOR, agent=SCRIPT, latency_s=LATENCY_S
    )
    config = tmp_path / "proxy.yaml"
    settings = {
        "models": {"mock-model": {"context_window": WINDOW}},
        "redis": {"timeout_s": 1.0},
        "log": {"level": "warning"},
    }
    config.write_text(json.dumps(settings))
    run = Run()
    with (
        serve_in_thread(provider.app) as base,
        replicas(config, f"{base}/v1", redis_server.url, tmp_path) as urls,
    ):
        ports = [httpx.URL(url).port or 0 for url in urls]
        async with (
            httpx2.AsyncClient(transport=RoundRobin(ports), timeout=60) as http,
            openai.AsyncOpenAI(
                api_key="sk-restart", base_url=f"{urls[0]}/v1", http_client=http, max_retries=0
            ) as sdk,
        ):
            agents = asyncio.gather(*(agent(sdk, i, run) for i in range(AGENTS)))
            survived = await outages(redis_server, run, agents)
            await agents
        lost = sum([await metric(url, "store_writes_lost_total") for url in urls])
        still_open = sum([await metric(url, "store_breaker_open") for url in urls])
    logs = "".join((tmp_path / f"replica-{i}.log").read_text() for i in range(REPLICAS))
    assert run.errors == [], logs
    assert run.answered == AGENTS * STEPS
    assert survived == len(OUTAGES)
    assert provider.overflows == 0
    assert max(provider.prompt_tokens) <= WINDOW
    assert lost > 0  # each outage lost writes, and counted them
    assert still_open == 0  # both replicas found Redis back
