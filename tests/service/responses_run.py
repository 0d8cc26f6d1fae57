"""A tool-using agent on the Responses API, driven by the OpenAI SDK, as Codex drives it.

Stateless (`store=False`): every request carries the whole history in `input`, the items of
each response's `output` (reasoning with its `encrypted_content`, function calls, messages)
appended as they came, then a `function_call_output` for each call. The model is the mock's
`AgentScript`; the tool results are the large ones of `agent_run.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from proxy.mock_upstream import MockUpstream, Recorded
from tests.service.agent_run import tool_output

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
INSTRUCTIONS = "You are a coding agent."
INCLUDE = ["reasoning.encrypted_content"]


@dataclass
class ResponsesRun:
    """The client's side of a Responses API session (async SDK)."""

    sdk: openai.AsyncOpenAI
    stream: bool
    items: list[Any] = field(default_factory=list)
    model_calls: int = 0
    applied: list[str] = field(default_factory=list)
    """Each answer's `x-compaction-applied` (whole answers only: a stream's headers are
    read through the same raw response)."""

    async def turn(self, text: str) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        self.items.append({"role": "user", "content": text})
        while True:
            output = await self._respond()
            self.model_calls += 1
            self.items += output
            calls = [item for item in output if item.get("type") == "function_call"]
            if not calls:
                return
            for call in calls:
                path = json.loads(call["arguments"])["path"]
                self.items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call["call_id"],
                        "output": tool_output(path, self.model_calls),
                    }
                )

    async def _respond(self) -> list[dict[str, Any]]:
        params: dict[str, Any] = {
            "model": "mock-model",
            "instructions": INSTRUCTIONS,
            "input": self.items,
            "tools": TOOLS,
            "store": False,
            "include": INCLUDE,
        }
        if not self.stream:
            raw = await self.sdk.responses.with_raw_response.create(**params)
            self.applied.append(raw.headers["x-compaction-applied"])
            return _items(raw.parse().output)
        async with self.sdk.responses.with_streaming_response.create(
            **params, stream=True
        ) as streamed:
            self.applied.append(streamed.headers["x-compaction-applied"])
            completed = None
            async for event in await streamed.parse():
                if event.type == "response.completed":
                    completed = event.response
        assert completed is not None, "the stream ended without response.completed"
        return _items(completed.output)


def _items(output: list[Any]) -> list[dict[str, Any]]:
    """Output items as the JSON the client sends back (what the provider sent, no nulls)."""
    return [item.model_dump(mode="json", exclude_none=True) for item in output]


def responses_requests(upstream: MockUpstream) -> list[Recorded]:
    """The Responses API requests the upstream answered for the conversation (summary
    requests apart: the prefix form of a summary is a Responses API request too)."""
    summaries = {id(r) for r in upstream.summary_requests}
    return [r for r in upstream.requests if r.path == "/v1/responses" and id(r) not in summaries]


def reasoning_items(items: list[Any]) -> dict[str, str]:
    """Each reasoning item's id, with the item as compact JSON."""
    return {
        item["id"]: json.dumps(item, sort_keys=True)
        for item in items
        if isinstance(item, dict) and item.get("type") == "reasoning"
    }
