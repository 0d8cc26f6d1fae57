"""A tool-using agent on the Messages API, driven by the official `anthropic` SDK as Claude
Code drives one: thinking on, the whole history sent every request, each response's content
blocks sent back as they came (thinking and its signature included), the tool results in the
next user message, and one cache breakpoint on the last block of the last message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message

from proxy.mock_upstream import MockUpstream, Recorded
from tests.mock_messages import EPHEMERAL, MODEL, READ_FILE, echoed, text, tool_result
from tests.service.agent_run import tool_output

SYSTEM = [text("You are a coding agent. Follow the user's rules.")]
THINKING = {"type": "enabled", "budget_tokens": 1024}
MAX_TOKENS = 1500


@asynccontextmanager
async def anthropic_sdk(app: Any, key: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The official async client talking to the proxy app `app` in-process."""
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, timeout=60) as http,
        anthropic.AsyncAnthropic(
            api_key=key, base_url="http://proxy", http_client=http, max_retries=0
        ) as client,
    ):
        yield client


def marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with one breakpoint on the last block of the last message, as Claude Code
    marks every request (the earlier ones' markers gone)."""
    out = []
    for number, message in enumerate(messages):
        content = message["content"]
        blocks = [text(content)] if isinstance(content, str) else list(content)
        blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]
        if number == len(messages) - 1:
            blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        out.append({**message, "content": blocks})
    return out


@dataclass
class MessagesRun:
    """The client's side of a Messages API session."""

    sdk: anthropic.AsyncAnthropic
    stream: bool
    messages: list[dict[str, Any]] = field(default_factory=list)
    answers: list[Message] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)

    @property
    def model_calls(self) -> int:
        return len(self.answers)

    async def turn(self, words: str) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        self.messages.append({"role": "user", "content": words})
        while True:
            message = await self._create()
            self.answers.append(message)
            self.messages.append(echoed(message))
            calls = [block for block in message.content if block.type == "tool_use"]
            if not calls:
                return
            results = [
                tool_result(call.id, tool_output(str(call.input), self.model_calls))
                for call in calls
            ]
            self.messages.append({"role": "user", "content": results})

    async def _create(self) -> Message:
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": MAX_TOKENS,
            "system": SYSTEM,
            "tools": [READ_FILE],
            "thinking": THINKING,
            "messages": marked(self.messages),
        }
        if self.stream:
            async with self.sdk.messages.stream(**body) as stream:
                return await stream.get_final_message()
        raw = await self.sdk.messages.with_raw_response.create(**body)
        self.applied.append(raw.headers["x-compaction-applied"])
        message: Message = await raw.parse()
        return message


def messages_requests(upstream: MockUpstream) -> list[Recorded]:
    """The conversation's requests the upstream answered (summary requests apart)."""
    summaries = {id(r) for r in upstream.summary_requests}
    return [r for r in upstream.requests if r.path == "/v1/messages" and id(r) not in summaries]


def thinking_blocks(messages: list[Any]) -> dict[str, Any]:
    """Every thinking block of `messages`, by its signature."""
    return {
        block["signature"]: block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "thinking"
    }
