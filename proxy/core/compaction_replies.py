"""The proxy's answers to a compaction request, in OpenAI's shapes.

- `POST /v1/responses/compact`: a `CompactedResponse`, `{"id", "object":
  "response.compaction", "created_at", "output", "usage"}`, whose `output` is the user
  messages, then exactly one `compaction` item (`compacted_response`);
- a `/v1/responses` request ending with `compaction_trigger`: a `Response` whose `output` is
  exactly that one `compaction` item (`triggered_response`), and no model answer; streamed,
  OpenAI's sequence of events (`triggered_events`): `response.created`,
  `response.in_progress`, `response.output_item.added`, `response.compaction.compacting`,
  `response.output_item.done`, `response.completed`, numbered by `sequence_number` from 0.

`usage` is what the compaction cost at the provider: the summary written for it, if one was
(a summary prepared earlier was paid for then; a truncation costs nothing).

The ids of these answers (`response_id`) say that the proxy made them: no provider stored
them, so a later request that names one in `previous_response_id` is refused by the proxy
with the reason (`proxy_response`), not forwarded to a provider that never saw it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core import jsoncodec

RESPONSE_PREFIX: Final = "resp_compaction_proxy_"
"""How the ids of the proxy's own answers begin."""


def response_id() -> str:
    """A new id for one of the proxy's answers."""
    return f"{RESPONSE_PREFIX}{uuid.uuid4().hex}"


def proxy_response(ident: str) -> bool:
    """Whether `ident` names one of the proxy's own answers."""
    return ident.startswith(RESPONSE_PREFIX)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens billed by the provider for one compaction."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            # What the summary wrote to the provider's cache is not known: none is claimed.
            "input_tokens_details": {"cached_tokens": self.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


def compacted_response(
    ident: str, created_at: int, output: Sequence[Any], usage: Usage
) -> dict[str, Any]:
    """The answer to `POST /v1/responses/compact`."""
    return {
        "id": ident,
        "object": "response.compaction",
        "created_at": created_at,
        "output": list(output),
        "usage": usage.to_json(),
    }


def triggered_response(
    body: Mapping[str, Any], ident: str, created_at: int, item: Mapping[str, Any], usage: Usage
) -> dict[str, Any]:
    """The completed `Response` to a request ending with `compaction_trigger`: the request's
    settings echoed as OpenAI echoes them, `output` the one compaction item."""
    reasoning = body.get("reasoning")
    return {
        "id": ident,
        "object": "response",
        "created_at": created_at,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model"),
        "output": [dict(item)],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": reasoning if isinstance(reasoning, dict) else {"effort": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text", {"format": {"type": "text"}}),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage.to_json(),
        "metadata": body.get("metadata", {}),
    }


def triggered_events(response: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The stream of a completed triggered `response`, event by event, numbered."""
    item = response["output"][0]
    opened = {**response, "status": "in_progress", "output": [], "usage": None}
    where = {"output_index": 0}
    unnumbered: list[dict[str, Any]] = [
        {"type": "response.created", "response": opened},
        {"type": "response.in_progress", "response": opened},
        {"type": "response.output_item.added", **where, "item": item},
        # OpenAI's sign that the summary is being sampled; it carries none of it.
        {"type": "response.compaction.compacting", "item_id": item["id"], **where},
        {"type": "response.output_item.done", **where, "item": item},
        {"type": "response.completed", "response": response},
    ]
    for number, event in enumerate(unnumbered):
        yield {**event, "sequence_number": number}


def sse(event: Mapping[str, Any]) -> bytes:
    """One event as the Responses API frames it: an `event:` line and a `data:` line."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + jsoncodec.dumps(event) + b"\n\n"
