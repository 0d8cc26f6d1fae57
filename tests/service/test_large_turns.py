"""A large turn's plans run in a worker thread: the emergency plan after an overflow and the
preparer's forced plan count what they cut (a trimmed message's head and tail) there, never
on the event loop, and what is forwarded is what the plan decided.

The proxy's counter keeps its tiktoken encoder, wrapped to note the thread of every long
text it encodes (a count in the thread is one the event loop did not wait for).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.core.tokens import TextEncoder
from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.service.turns import OFF_LOOP_BYTES
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve

MODEL = "mock-model"
LONG = 2_000
"""Characters from which an encoded text is noted."""


@dataclass
class Threads:
    """A `TextEncoder` noting on which thread each long text was encoded."""

    encoder: TextEncoder
    on_loop: list[int] = field(default_factory=list)
    apart: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.encoder.name

    def count(self, text: str) -> int:
        if len(text) >= LONG:
            main = threading.current_thread() is threading.main_thread()
            (self.on_loop if main else self.apart).append(len(text))
        return self.encoder.count(text)


@asynccontextmanager
async def proxy(
    base: str, **context: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Threads, ProxyService]]:
    settings = make_settings(
        f"{base}/v1", context={"output_reserved": 200, "keep_recent": 2, **context}
    )
    app = create_app(settings)
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as http,
    ):
        service: ProxyService = app.state.service
        counter = service.counter_for(MODEL)
        threads = Threads(counter.encoder)
        counter.encoder = threads
        yield http, threads, service


def prose(words: int, topic: str) -> str:
    return " ".join(f"{topic}{i % 97}" for i in range(words))


async def test_emergency_plan_of_a_large_turn_runs_in_a_worker_thread() -> None:
    provider = MockUpstream(window=6_000)  # the configured 100,000 is wrong
    messages = [
        {"role": "user", "content": "Read this log and tell me what failed."},
        {"role": "assistant", "content": "Send it."},
        {"role": "user", "content": prose(20_000, "line")},  # ~100 KB, must be trimmed
        {"role": "assistant", "content": "Reading it."},
        {"role": "user", "content": "What failed?"},  # the running ask, never cut
    ]
    body = {"model": MODEL, "messages": messages}
    assert len(httpx.Request("POST", "/", json=body).content) >= OFF_LOOP_BYTES
    async with (
        serve(provider.app) as base,
        proxy(base, context_window=100_000) as (http, threads, _),
    ):
        response = await http.post("/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert provider.overflows == 1  # then learned, compacted hard, and retried once
    forwarded = provider.last.json()["messages"]
    assert forwarded[-1] == messages[-1]
    assert max(len(m["content"]) for m in forwarded) < len(messages[2]["content"]) // 2
    assert provider.prompt_tokens[-1] <= 6_000
    assert threads.apart  # the new message's count, the head and the tail
    assert threads.on_loop == []


@pytest.mark.parametrize(("tokens", "off_loop"), [(12_000, True), (6_000, False)])
async def test_forced_plan_runs_in_a_worker_thread_when_a_message_is_large(
    tokens: int, off_loop: bool
) -> None:
    provider = MockUpstream()
    # Tool results far over their share: the preparer's forced plan trims them (their heads
    # and tails counted), while the request itself, under the trigger, is forwarded as is.
    # Each is over 64 KB (12,000 tokens of prose), or each under it but all of them over it.
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the failure."}]
    for i in range(3):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "log", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}", "content": prose(tokens, f"e{i}x")}
        )
        messages.append({"role": "user", "content": f"And part {i + 1}?"})
    body = {"model": MODEL, "messages": messages}
    assert len(httpx.Request("POST", "/", json=body).content) >= OFF_LOOP_BYTES
    assert (len(messages[2]["content"]) >= OFF_LOOP_BYTES) is off_loop
    # The same pressure either way: past the preparation level, under the trigger.
    window, share = 20 * tokens, 0.02 * 6_000 / tokens
    context = {"context_window": window, "prepare_at": 0.2, "tool_result_max_share": share}
    async with serve(provider.app) as base, proxy(base, **context) as (http, threads, service):
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"x-session-id": "large"}, timeout=60
        )
        await service.settle()  # the preparer's job
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction-applied"] == "none"
    assert provider.last.json()["messages"] == messages
    results = len(messages[2]["content"])
    assert sorted(threads.apart)[-3:] == [results] * 3  # the new results, counted apart
    # The forced plan's heads and tails: counted in the plan's thread when a message is
    # large; else on the loop, each a piece of a message under 64 KB (a thread hop would
    # cost every plan of a long history more than that).
    cuts = threads.apart[3:] if off_loop else threads.on_loop
    assert cuts
    assert max(cuts) < results // 4
    assert (threads.on_loop == []) is off_loop
