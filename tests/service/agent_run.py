"""A tool-using agent driven by the OpenAI SDK: the client side of the end-to-end tests.

The model (the mock's `AgentScript`) asks for tool calls; this client runs them, returning
large results, and feeds them back, the way coding agents grow their context. Facts are
planted in the user's messages along the way, to check what survives compaction.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai

from proxy.demo.streams import StreamedMessage
from proxy.mock_upstream import AgentScript, MockUpstream, Recorded

TOOLS: list[Any] = [
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
    rounds_per_turn=2,
)

# Facts planted in user turns: an id, a path, a number with a unit, a "never" rule.
FACTS = {
    3: ("Use ticket OPS-4821 for this work.", "OPS-4821"),
    5: ("The config lives at /srv/app/settings.toml.", "/srv/app/settings.toml"),
    7: ("Keep the p99 latency under 250 ms.", "250 ms"),
    9: ("Never push directly to the main branch.", "Never push directly to the main branch"),
}


def tool_output(path: str, turn: int) -> str:
    """A file's contents: a few hundred tokens of code."""
    lines = [f"# {path} (read at turn {turn})"]
    lines += [
        f"def handler_{n}(request):\n    return respond(request, code={n})" for n in range(40)
    ]
    return "\n".join(lines)


@dataclass
class AgentRun:
    """The client's side of a session."""

    sdk: openai.AsyncOpenAI
    stream: bool
    messages: list[Any] = field(default_factory=list)
    model_calls: int = 0

    async def turn(self, text: str) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        self.messages.append({"role": "user", "content": text})
        while True:
            message = await self._complete()
            self.model_calls += 1
            self.messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                path = json.loads(call["function"]["arguments"])["path"]
                content = tool_output(path, self.model_calls)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": content}
                )

    async def _complete(self) -> dict[str, Any]:
        params: dict[str, Any] = {"model": "mock-model", "messages": self.messages, "tools": TOOLS}
        if not self.stream:
            completion = await self.sdk.chat.completions.create(**params)
            message: dict[str, Any] = completion.choices[0].message.model_dump(exclude_none=True)
            return message
        streamed = StreamedMessage()
        async for chunk in await self.sdk.chat.completions.create(**params, stream=True):
            if not chunk.choices:
                raise AssertionError("a usage chunk reached a client that did not ask for it")
            streamed.add(chunk)
        return streamed.message()


@asynccontextmanager
async def sdk_for(app: Any, key: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official async SDK talking to the proxy app `app` in-process (its lifespan is
    the caller's to run)."""
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, timeout=60) as http,
        openai.AsyncOpenAI(
            api_key=key, base_url="http://proxy/v1", http_client=http, max_retries=0
        ) as client,
    ):
        yield client


def chat_requests(upstream: MockUpstream) -> list[Recorded]:
    """The ordinary chat requests the upstream answered (summary requests apart)."""
    summaries = {id(r) for r in upstream.summary_requests}
    return [
        r for r in upstream.requests
        if r.path == "/v1/chat/completions" and id(r) not in summaries
    ]  # fmt: skip


def prefix_stable_share(requests: list[Recorded]) -> float:
    """Share of consecutive forwarded requests where the later starts with the earlier's
    messages (what keeps the provider's prompt cache warm)."""
    pairs = list(itertools.pairwise(requests))
    if not pairs:
        return 1.0
    stable = 0
    for before, after in pairs:
        first, second = before.json()["messages"], after.json()["messages"]
        stable += second[: len(first)] == first
    return stable / len(pairs)


CHATTY = "the build failed again on the staging cluster while the queue kept growing "


async def chatty_turns(
    app: Any,
    messages: list[Any],
    count: int,
    *,
    repeat: int,
    key: str = "sk-chatty",
    settle: bool = False,
) -> list[tuple[str, float]]:
    """`count` long user turns (`CHATTY` `repeat` times) through the proxy app `app` with
    the official SDK, each after the answer to the one before, appended to `messages`: each
    turn's `x-compaction-applied` and seconds. With `settle`, the proxy's background work
    (summaries included) ends between turns, as it does when the agent's model takes longer
    than a summary: the test then does not depend on how busy the machine is."""
    done = []
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(
        api_key=key, base_url="http://proxy/v1", http_client=http, max_retries=0
    ) as client:
        for _ in range(count):
            content = f"turn {len(messages)}: " + CHATTY * repeat
            messages.append({"role": "user", "content": content})
            started = time.perf_counter()
            raw = await client.chat.completions.with_raw_response.create(
                model="mock-model", messages=messages
            )
            done.append((raw.headers["x-compaction-applied"], time.perf_counter() - started))
            answer = raw.parse().choices[0].message.content
            messages.append({"role": "assistant", "content": answer})
            if settle:
                await app.state.service.settle()
    return done
