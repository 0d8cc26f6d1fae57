"""`compaction-proxy serve --workers 2`: two processes on one port, sharing Redis, their
metrics summed whichever answers the scrape, each reading the compaction items the other
made; refused on the embedded store, and without a compaction key when they answer
compaction."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import openai

from proxy.mock_upstream import MockUpstream
from tests.redis_server import RedisServer
from tests.servers import proxy_process, serve_in_thread


def _served_by(metrics: str) -> float:
    found = re.search(
        r'compaction_proxy_requests_total\{route="chat_completions",status="200"\} (\S+)', metrics
    )
    return float(found[1]) if found else 0.0


def test_two_workers_share_the_store_and_the_metrics(redis_server: RedisServer) -> None:
    upstream = MockUpstream()
    with (
        serve_in_thread(upstream.app) as mock_url,
        proxy_process(
            ["--upstream", f"{mock_url}/v1", "--redis", redis_server.url, "--workers", "2"]
        ) as proxy_url,
        openai.OpenAI(api_key="sk-workers", base_url=f"{proxy_url}/v1", max_retries=0) as sdk,
    ):
        for turn in range(20):
            # New connections: the parent hands them to the two workers in turn.
            with httpx.Client(base_url=proxy_url) as http:
                answer = http.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": f"hi {turn}"}]},
                    headers={"authorization": "Bearer sk-workers"},
                )
                assert answer.status_code == 200
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "and"}])
        scrapes = [_served_by(httpx.get(f"{proxy_url}/metrics").text) for _ in range(6)]
    # Every scrape counts all 21 requests, whichever of the two workers answered it.
    assert scrapes == [21.0] * 6
    chats = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 21
    # Each worker looks the model's window up once, for itself.
    assert 1 <= len([r for r in upstream.requests if r.path == "/v1/models"]) <= 2


def test_either_worker_expands_the_compaction_items_the_other_made(
    redis_server: RedisServer,
) -> None:
    upstream = MockUpstream()
    history = [
        {"type": "message", "role": "user", "content": "Port the parser. Never use regex."},
        {"type": "message", "role": "assistant", "content": "Ported the lexer. " * 40},
        {"type": "message", "role": "user", "content": "Now the tests."},
    ]
    with (
        serve_in_thread(upstream.app) as mock_url,
        proxy_process(
            ["--upstream", f"{mock_url}/v1", "--redis", redis_server.url, "--workers", "2"]
        ) as proxy_url,
    ):
        with openai.OpenAI(api_key="sk-workers", base_url=f"{proxy_url}/v1", max_retries=0) as sdk:
            compacted = sdk.responses.compact(model="m", input=history)  # type: ignore[arg-type]
        item = compacted.output[-1].model_dump()
        for turn in range(8):
            # New connections: the parent hands them to the two workers in turn.
            with httpx.Client(base_url=proxy_url) as http:
                answer = http.post(
                    "/v1/responses",
                    json={"model": "m", "input": [item, {"role": "user", "content": f"go {turn}"}]},
                    headers={"authorization": "Bearer sk-workers"},
                )
                assert answer.status_code == 200, answer.text
    # The summary of what the compaction dropped, written afterwards, is no turn of the agent.
    turns = [r for r in upstream.requests if r not in upstream.summary_requests]
    forwarded = [r.json()["input"][0] for r in turns if r.path == "/v1/responses"]
    assert len(forwarded) == 8
    assert all(block == forwarded[0] for block in forwarded)  # one block, whoever expanded it
    # The item expanded into the proxy's block (never forwarded as the sealed item).
    assert "type" not in forwarded[0] or forwarded[0]["type"] == "message"
    assert forwarded[0]["content"][0]["text"].startswith("[Earlier turns of this conversation")


def test_workers_answering_compaction_need_a_key() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--workers", "2", "--upstream", "http://vllm/v1"],
        capture_output=True,
        text=True,
        env={**os.environ, "COMPACTION_PROXY_REDIS__URL": "redis://127.0.0.1:1"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "responses.compaction_key must be set" in result.stderr


def test_workers_need_redis() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--workers", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "COMPACTION_PROXY_REDIS__URL": ""},
        timeout=60,
    )
    assert result.returncode == 2
    assert "server.workers above 1 needs redis.url" in result.stderr
