"""A simulated agent on the Messages API, driven by the `anthropic` SDK as Claude Code drives it.

Each request carries the system prompt, the tools and the whole history; thinking is on, so
each answer opens with a signed thinking block that must come back byte for byte with its
turn (the mock refuses it altered, and an unfinished tool loop's turn without it). The
answer's content blocks are sent back as they came; the results of all of a turn's tool calls
go in the next user message; the last block of the last message carries the one cache
breakpoint, as Claude Code marks every request.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import anthropic
from anthropic.types import Message

from proxy.demo.agents import JSON, SYSTEM_PROMPT, AgentApi, Call, Exchange, SimulatedAgent
from proxy.demo.workload import MODEL, TOOLS
from proxy.mock_upstream import messages_prompt_tokens

MESSAGES_TOOLS: Final[list[Any]] = [
    {
        "name": tool["function"]["name"],
        "description": tool["function"]["description"],
        "input_schema": tool["function"]["parameters"],
    }
    for tool in TOOLS
]
THINKING: Final = {"type": "enabled", "budget_tokens": 1024}
MAX_TOKENS: Final = 2048
EPHEMERAL: Final = {"type": "ephemeral"}


class MessagesAgent(SimulatedAgent):
    """An agent on `client.messages.create`, its history as Messages API messages."""

    api: AgentApi = "messages"

    def _client(self) -> AbstractAsyncContextManager[Any]:
        return anthropic.AsyncAnthropic(
            api_key=self.stats.api_key,
            base_url=self._base_url.removesuffix("/v1"),
            max_retries=0,
            timeout=300.0,
        )

    async def _round(self, sdk: anthropic.AsyncAnthropic) -> tuple[list[Call], Exchange]:
        body: JSON = {
            "model": MODEL,
            "max_tokens": MAX_TOKENS,
            "system": SYSTEM_PROMPT,
            "tools": MESSAGES_TOOLS,
            "thinking": THINKING,
            "messages": _marked(self._history),
        }
        sent = messages_prompt_tokens(body, self._counter)
        self._sending(sent)
        message: Message
        if self.stats.stream:
            async with sdk.messages.stream(**body) as stream:
                message = await stream.get_final_message()
            headers = stream.response.headers
        else:
            raw = await sdk.messages.with_raw_response.create(**body)
            message, headers = await raw.parse(), raw.headers
        exchange = self._note(sent, headers)
        self._bill_usage(message)
        content = [block.model_dump(exclude_none=True) for block in message.content]
        self._history.append({"role": "assistant", "content": content})
        calls = [
            Call(block.id, block.name, _arguments(block.input))
            for block in message.content
            if block.type == "tool_use"
        ]
        return calls, exchange

    def _bill_usage(self, message: Message) -> None:
        usage = message.usage
        read = usage.cache_read_input_tokens or 0
        prompt = usage.input_tokens + read + (usage.cache_creation_input_tokens or 0)
        self._bill(prompt, read)

    def _add_result(self, call: Call, output: str) -> None:
        # Every result of the turn's calls in one user message, as the API requires.
        result = {"type": "tool_result", "tool_use_id": call.id, "content": output}
        last = self._history[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            last["content"].append(result)
        else:
            self._history.append({"role": "user", "content": [result]})


def _arguments(value: object) -> str:
    """A tool call's input as the JSON text the workload's tools read."""
    return json.dumps(value)


def _marked(messages: list[JSON]) -> list[JSON]:
    """`messages` with one breakpoint, on the last block of the last message."""
    if not messages:
        return messages
    *before, last = messages
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    return [*before, {**last, "content": blocks}]
