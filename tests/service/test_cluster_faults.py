"""A Redis Cluster master killed under load: two proxy replicas, several long agents.

Three masters with a replica each (tests/redis_cluster.py), `cluster-node-timeout` 1 s. Six
tool-using agents (tests/service/agent_run.py) run their sessions through two in-process
proxy replicas sharing the cluster, each request to the other replica than the last. A
third of the way in, the master serving slot 0 is killed (SIGKILL): the first master, the
one redis-py's client asks for its command table when it learns the cluster again. The
cluster promotes its replica. What must hold: no client sees an error, nothing is forwarded
over the provider's window, each replica logs the dead node's outage once when it starts and
once when it ends (no other node, and not the store as a whole), and counts the writes it
lost.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_cluster import LocalCluster, Node, local_cluster
from tests.servers import serve
from tests.service.agent_run import FACTS, SCRIPT, AgentRun

WINDOW = 6000
CONTEXT = {"output_reserved": 500, "keep_recent": 6, "summary_max_tokens": 400}
AGENTS = 6
CALLS = 36
"""Model calls per agent."""
KILL_AT = AGENTS * CALLS // 3
"""All agents' calls made when the master is killed."""
KEY = "sk-cluster-agents"


# The proxy's own 400 ("cannot fit"): what a turn read while its node was fenced got, before
# a stored checkpoint was adopted only when the view over it lands (`Compactor._adopted`).
REFUSED = "even after compaction-proxy compacted everything it could"


class Alternating(httpx2.AsyncBaseTransport):
    """Sends each request to the next of several in-process apps, in turn. A request the
    proxy refused with `REFUSED` is recorded and sent again (to the next app), as a client
    would, so the run goes on and every other check is made (the test then fails on it)."""

    def __init__(self, apps: Sequence[FastAPI]) -> None:
        self._next = itertools.cycle([httpx2.ASGITransport(app=app) for app in apps])
        self.refused: list[tuple[float, str]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await next(self._next).handle_async_request(request)
        if response.status_code != 400:
            return response
        text = (await response.aread()).decode()
        if REFUSED not in text:
            return response
        self.refused.append((time.time(), text))
        return await next(self._next).handle_async_request(request)


@asynccontextmanager
async def replicas(
    upstream: str, cluster: LocalCluster, count: int
) -> AsyncIterator[list[FastAPI]]:
    redis = {"url": cluster.url, "mode": "cluster", "timeout_s": 1.0}
    apps = [create_app(make_settings(upstream, redis=redis, context=CONTEXT)) for _ in range(count)]
    async with AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(LifespanManager(app))
        yield apps


async def metric(app: FastAPI, name: str) -> float:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http:
        text = (await http.get("http://proxy/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"compaction_proxy_{name}"
    )


class Progress:
    """The model calls each agent has made; `third` is set once they are a third of the
    way in (`KILL_AT`)."""

    def __init__(self) -> None:
        self.calls = [0] * AGENTS
        self.third = asyncio.Event()

    def made(self, index: int, calls: int) -> None:
        self.calls[index] = calls
        if sum(self.calls) >= KILL_AT:
            self.third.set()


async def agent(sdk: openai.AsyncOpenAI, index: int, progress: Progress) -> None:
    """One agent's session, `CALLS` model calls long (streamed every other agent)."""
    system = {"role": "system", "content": "You are a coding agent."}
    run = AgentRun(sdk, index % 2 == 1, [system])
    turn = 0
    while run.model_calls < CALLS:
        turn += 1
        planted = FACTS.get(turn, ("",))[0]
        await run.turn(f"Agent {index}, step {turn}: the next module, please. {planted}")
        progress.made(index, run.model_calls)


async def kill_the_first_master(
    cluster: LocalCluster, progress: Progress, record: dict[str, Any]
) -> None:
    """Once the agents are a third of the way in, kill the master serving slot 0 and wait
    (off the event loop) for the cluster to promote its replica."""
    await progress.third.wait()
    sessions = cluster.keys_by_master("cp:{s:*:state")
    dead = cluster.master_of_slot(0)
    record.update(dead=dead, sessions=sessions, killed=time.time())
    cluster.kill(dead)
    record["promoted"] = await asyncio.to_thread(cluster.wait_for_failover, dead)
    record["promoted_at"] = time.time()


def logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "proxy.store" and text in r.getMessage()]


async def test_a_master_killed_under_load_fails_no_request_and_is_logged_once_per_replica(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.store")
    provider = MockUpstream(
        window=WINDOW, strict=True, roles_alternate=True, agent=SCRIPT, summary_quality="poor"
    )
    progress = Progress()
    record: dict[str, Any] = {}
    with local_cluster(tmp_path, node_timeout_ms=1000) as cluster:
        async with (
            serve(provider.app) as base,
            replicas(f"{base}/v1", cluster, 2) as apps,
            httpx2.AsyncClient(transport=(alternating := Alternating(apps)), timeout=60) as http,
            openai.AsyncOpenAI(
                api_key=KEY, base_url="http://proxy/v1", http_client=http, max_retries=0
            ) as sdk,
        ):
            await asyncio.gather(
                *(agent(sdk, index, progress) for index in range(AGENTS)),
                kill_the_first_master(cluster, progress, record),
            )
            for app in apps:
                await app.state.service.settle()
            # The probes go on without requests: each replica finds the dead node's slots
            # served again.
            deadline = time.monotonic() + 10
            while any(app.state.service.memory.down for app in apps):
                assert time.monotonic() < deadline, "a replica's breaker did not close"
                await asyncio.sleep(0.05)
            lost = [await metric(app, "store_writes_lost_total") for app in apps]
            errors = [await metric(app, "store_errors_total") for app in apps]
            still_open = [await metric(app, "store_breaker_open") for app in apps]
            failed = [await metric(app, "background_task_failures_total") for app in apps]
    dead: Node = record["dead"]
    where = f"(node {dead.name})"
    started = logged(caplog, "session store unavailable")
    ended = logged(caplog, "session store is back")
    recovered = [r.created - record["killed"] for r in ended]
    print(  # shown with -s: how the outage went
        f"\nsessions by master at the kill: {record['sessions']}; killed {dead.name}, "
        f"promoted {record['promoted'].name} after {record['promoted_at'] - record['killed']:.2f} s"
        f"\noutage logged {len(started)}x at start, {len(ended)}x at end, "
        f"back after {', '.join(f'{s:.2f}' for s in recovered)} s; "
        f"store errors {errors}, writes lost {lost}; overflows {provider.overflows}, "
        f"max prompt {max(provider.prompt_tokens)}; refused {len(alternating.refused)}"
    )
    # No client error (every agent finished), nothing over the window.
    assert provider.overflows == 0
    assert provider.strict_rejections == 0
    assert max(provider.prompt_tokens) <= WINDOW
    # Each replica: the dead node's outage once when it began, once when it ended; no other.
    assert [where in r.getMessage() for r in started] == [True, True]
    assert [where in r.getMessage() for r in ended] == [True, True]
    assert all(r.created >= record["killed"] for r in started)
    # What the outage did not store is counted; nothing is open any more.
    assert all(count > 0 for count in lost)
    assert all(e >= w for e, w in zip(errors, lost, strict=True))
    assert still_open == [0, 0]
    assert failed == [0, 0]  # the work after each answer (records, archive) never raised
    assert alternating.refused == []  # no client error: not even the proxy's own 400
