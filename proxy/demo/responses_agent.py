"""A simulated agent on the Responses API, stateless, as Codex is.

Each request carries the whole history as `input` items with `store=False` (the provider
keeps nothing) and asks for `include=["reasoning.encrypted_content"]`, so that a reasoning
model's reasoning can be sent back. The agent appends the response's `output` items as they
came (reasoning, message, function calls), then a `function_call_output` per call, and sends
it all again: the provider refuses a call sent without its reasoning item, or a reasoning
item whose ciphertext was altered, so what the proxy forwards must keep them together and
untouched. The system prompt goes as `instructions`.
"""

from __future__ import annotations

from typing import Any, Final

import openai
from openai.types.responses import ResponseUsage

from proxy.demo.agents import (
    JSON,
    SYSTEM_PROMPT,
    AgentApi,
    Call,
    Exchange,
    FailedResponseError,
    SimulatedAgent,
)
from proxy.demo.streams import StreamedResponse
from proxy.demo.workload import MODEL, RESPONSES_TOOLS
from proxy.mock_upstream import responses_prompt_tokens

INCLUDE: Final = ["reasoning.encrypted_content"]


class ResponsesAgent(SimulatedAgent):
    """An agent on `client.responses.create`, its history as items."""

    api: AgentApi = "responses"

    async def _round(self, sdk: openai.AsyncOpenAI) -> tuple[list[Call], Exchange]:
        body: JSON = {
            "model": MODEL,
            "instructions": SYSTEM_PROMPT,
            "input": self._history,
            "tools": RESPONSES_TOOLS,
            "store": False,
            "include": INCLUDE,
        }
        # Counted as the provider counts the items (the mock's meter): what it would bill
        # if the proxy forwarded the request as sent, so 'saved' compares like with like.
        sent = responses_prompt_tokens(body, self._counter)
        self._sending(sent)
        if self.stats.stream:
            body["stream"] = True
        raw = await sdk.responses.with_raw_response.create(**body)
        exchange = self._note(sent, raw.headers)
        parsed = raw.parse()
        if isinstance(parsed, openai.AsyncStream):
            output, usage = await _assemble(parsed)
        else:
            output = [item.model_dump(exclude_none=True) for item in parsed.output]
            usage = parsed.usage
        if usage is not None:
            self._bill(usage.input_tokens, usage.input_tokens_details.cached_tokens)
        self._history.extend(output)
        calls = [
            Call(item["call_id"], item["name"], item["arguments"])
            for item in output
            if item.get("type") == "function_call"
        ]
        return calls, exchange

    def _add_result(self, call: Call, output: str) -> None:
        self._history.append({"type": "function_call_output", "call_id": call.id, "output": output})


async def _assemble(stream: openai.AsyncStream[Any]) -> tuple[list[JSON], ResponseUsage | None]:
    """A streamed response's output items and usage; raises `FailedResponseError` when it
    failed or ended before `response.completed`."""
    streamed = StreamedResponse()
    async for event in stream:
        streamed.add(event)
    if streamed.failure is not None or not streamed.completed:
        raise FailedResponseError(streamed.failure or "the stream ended before it completed")
    return streamed.output(), streamed.usage
