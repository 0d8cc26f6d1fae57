"""The bill: what the mock provider received, per agent and in all.

The agents know what they sent and what `usage` said was forwarded; only the provider knows
the rest. The summaries the proxy asked for on an agent's behalf carry that agent's key (the
summarizer uses the client's own credentials), so they are counted against it; and the last
request forwarded for an agent shows whether the facts planted in its session survived.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core import anthropic
from proxy.core.responses import chat_view
from proxy.core.tokens import TokenCounter
from proxy.demo.agents import AgentStats
from proxy.mock_upstream import MockUpstream, Recorded


@dataclass(frozen=True, slots=True)
class Totals:
    """All agents together, from the provider's records."""

    sent_tokens: int
    forwarded_tokens: int
    cached_tokens: int
    summary_calls: int
    summary_tokens: int
    compactions: Counter[str]
    errors: int
    overflows: int
    """Requests the provider refused as too long (the proxy retries those once)."""
    rejections: int
    """Requests the provider refused for broken tool pairing or role order, or on the
    Responses API for reasoning parted from its items or altered."""
    reasoning_returned: int = 0
    """Reasoning items (with their `encrypted_content`) the Responses API agents' requests
    brought back to the provider, which checked each in strict mode."""

    @property
    def saved_share(self) -> float:
        """The share of the sent tokens the provider never saw, summaries paid for."""
        spent = self.forwarded_tokens + self.summary_tokens
        return 1 - spent / self.sent_tokens if self.sent_tokens else 0.0


def settle(upstream: MockUpstream, agents: Sequence[AgentStats], counter: TokenCounter) -> Totals:
    """Fill in each agent's summaries and kept facts from `upstream`'s records; the totals."""
    by_key = {f"Bearer {agent.api_key}": agent for agent in agents}
    for request in upstream.summary_requests:
        agent = by_key.get(request.header("authorization") or "")
        if agent is not None:
            agent.summary_calls += 1
            agent.summary_tokens += counter.request(_as_chat(request))
    for key, request in _last_forwarded(upstream).items():
        agent = by_key.get(key)
        if agent is not None:
            body = request.json()
            # The chat messages, or the Responses API's items.
            forwarded = json.dumps(body.get("messages", body.get("input")), ensure_ascii=False)
            agent.facts_kept = sum(fact in forwarded for fact in agent.facts)
    return Totals(
        sent_tokens=sum(agent.sent_tokens for agent in agents),
        forwarded_tokens=sum(upstream.prompt_tokens),
        cached_tokens=sum(upstream.cached_tokens),
        summary_calls=upstream.summary_calls,
        summary_tokens=sum(agent.summary_tokens for agent in agents),
        compactions=sum((agent.compactions for agent in agents), Counter[str]()),
        errors=sum(agent.errors for agent in agents),
        overflows=upstream.overflows,
        rejections=upstream.strict_rejections,
        reasoning_returned=sum(_reasoning_items(request) for request in upstream.requests),
    )


def _as_chat(request: Recorded) -> dict[str, Any]:
    """`request`'s body as a chat completion, the form the counter reads: a summary asked
    over the Responses API (a conversation's prefix) is its chat view."""
    body: dict[str, Any] = request.json()
    if request.path.endswith("/messages"):
        return anthropic.chat_view(body)
    return chat_view(body) if request.path.endswith("/responses") else body


def _reasoning_items(request: Recorded) -> int:
    """The encrypted reasoning items in `request`, if it is a Responses API request."""
    if not request.path.endswith("/responses"):
        return 0
    items = request.json().get("input")
    return sum(
        isinstance(item, dict) and item.get("type") == "reasoning" and "encrypted_content" in item
        for item in (items if isinstance(items, list) else ())
    )


def _last_forwarded(upstream: MockUpstream) -> dict[str, Recorded]:
    """The last chat or Responses request (summaries apart) the provider got, by
    `Authorization` value."""
    summaries = {id(request) for request in upstream.summary_requests}
    last: dict[str, Recorded] = {}
    for request in upstream.requests:
        conversation = request.path.endswith(("/chat/completions", "/responses", "/messages"))
        if conversation and id(request) not in summaries:
            last[request.header("authorization") or ""] = request
    return last
