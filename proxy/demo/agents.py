"""The simulated agents: OpenAI SDK clients running tool-using sessions through the proxy.

Each agent is what a coding agent's harness does: it sends its whole history on every
request (it knows nothing of the proxy), runs the tools the model asks for, sends their
results back, and goes on until the model answers; then the next user turn. What it sees of
the proxy is only what any client sees: the `x-compaction-*` and `x-context-pressure`
response headers, and the provider's `usage`, which the proxy relays untouched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types import CompletionUsage

from proxy.core.tokens import TokenCounter
from proxy.demo.streams import StreamedMessage
from proxy.demo.workload import MODEL, TOOLS, facts, tool_output, user_message

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one answer's headers say the proxy did to its request, and what was sent."""

    sent_tokens: int
    """The request as the client sent it, in tokens (the client's own count)."""
    session: str | None
    action: str
    tokens_before: int
    tokens_after: int
    pressure: float

    @property
    def compacted(self) -> bool:
        return self.action != "none"


@dataclass(frozen=True, slots=True)
class TurnReport:
    """One user turn of one agent, for the per-turn line."""

    agent: str
    turn: int
    exchange: Exchange | None
    """The turn's most telling answer: its compaction when there was one, else its last."""
    error: str | None = None


@dataclass(slots=True)
class AgentStats:
    """One agent's session in numbers."""

    name: str
    api_key: str
    stream: bool
    session: str | None = None
    requests: int = 0
    sent_tokens: int = 0
    """The prompts as the client sent them (its whole history every time)."""
    forwarded_tokens: int = 0
    """The prompts as the provider counted them (`usage.prompt_tokens`): what was forwarded."""
    cached_tokens: int = 0
    compactions: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    # Read from the mock's records once the sessions are over (see `proxy.demo.accounting`).
    summary_calls: int = 0
    summary_tokens: int = 0
    facts: tuple[str, ...] = ()
    """What must survive of the facts planted in the turns played."""
    facts_kept: int = 0


class SimulatedAgent:
    """One agent: its SDK client, the history it resends, and its numbers."""

    def __init__(
        self,
        index: int,
        base_url: str,
        counter: TokenCounter,
        on_turn: Callable[[TurnReport], None],
    ) -> None:
        self.index = index
        name = f"agent-{index + 1}"
        # A key of its own: the proxy keeps each key's sessions apart (a tenant), and the
        # summaries it asks for on this agent's behalf carry it too, so they can be counted.
        # Every other agent streams: the proxy's SSE path does the same work.
        self.stats = AgentStats(name, f"sk-demo-{name}", stream=index % 2 == 1)
        self._base_url = base_url
        self._counter = counter
        self._on_turn = on_turn
        self._messages: list[JSON] = [{"role": "system", "content": "You are a coding agent."}]

    async def run(self, turns: int) -> AgentStats:
        """Play `turns` user turns, one after the other, reporting each."""
        self.stats.facts = tuple(fact.key for fact in facts(self.index) if fact.turn <= turns)
        # No retries: an error must show in the table, not be papered over by the SDK.
        async with openai.AsyncOpenAI(
            api_key=self.stats.api_key,
            base_url=self._base_url,
            max_retries=0,
            # Generous: a busy machine must slow the demo down, not fail it.
            timeout=300.0,
        ) as sdk:
            for turn in range(1, turns + 1):
                self._on_turn(await self._turn(sdk, turn))
        return self.stats

    async def _turn(self, sdk: openai.AsyncOpenAI, turn: int) -> TurnReport:
        """Send the user's message, run the requested tools until the model answers."""
        mark = len(self._messages)
        self._messages.append({"role": "user", "content": user_message(self.index, turn)})
        shown: Exchange | None = None
        try:
            while True:
                message, exchange = await self._complete(sdk)
                shown = _more_telling(shown, exchange)
                self._messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    return TurnReport(self.stats.name, turn, shown)
                self._run_tools(calls)
        except openai.APIError as exc:
            # The turn is abandoned, as an agent would; the error is counted and shown.
            del self._messages[mark:]
            self.stats.errors += 1
            self.stats.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
            return TurnReport(self.stats.name, turn, shown, error=type(exc).__name__)

    async def _complete(self, sdk: openai.AsyncOpenAI) -> tuple[JSON, Exchange]:
        body: JSON = {"model": MODEL, "messages": self._messages, "tools": TOOLS}
        sent = self._counter.request(body)
        self.stats.sent_tokens += sent
        self.stats.requests += 1
        if self.stats.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        raw = await sdk.chat.completions.with_raw_response.create(**body)
        exchange = _exchange(sent, raw.headers)
        self._note(exchange)
        parsed = raw.parse()
        if isinstance(parsed, openai.AsyncStream):
            message, usage = await _assemble(parsed)
        else:
            message, usage = parsed.choices[0].message.model_dump(exclude_none=True), parsed.usage
        self._bill(usage)
        return message, exchange

    def _note(self, exchange: Exchange) -> None:
        self.stats.session = exchange.session or self.stats.session
        if exchange.compacted:
            self.stats.compactions[exchange.action] += 1

    def _bill(self, usage: CompletionUsage | None) -> None:
        if usage is None:
            return
        self.stats.forwarded_tokens += usage.prompt_tokens
        details = usage.prompt_tokens_details
        self.stats.cached_tokens += (details.cached_tokens or 0) if details else 0

    def _run_tools(self, calls: list[JSON]) -> None:
        for call in calls:
            function = call["function"]
            output = tool_output(function["name"], function["arguments"], self.stats.requests)
            self._messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


def _exchange(sent: int, headers: Mapping[str, str]) -> Exchange:
    return Exchange(
        sent_tokens=sent,
        session=headers.get("x-session-id"),
        action=headers.get("x-compaction-applied", "none"),
        tokens_before=int(headers.get("x-compaction-tokens-before", "0")),
        tokens_after=int(headers.get("x-compaction-tokens-after", "0")),
        pressure=float(headers.get("x-context-pressure", "0")),
    )


def _more_telling(current: Exchange | None, new: Exchange) -> Exchange:
    """The exchange a turn's line shows: a compaction beats none, a bigger one a smaller."""
    if current is None or not current.compacted:
        return new
    if not new.compacted:
        return current
    saved = new.tokens_before - new.tokens_after
    return new if saved > current.tokens_before - current.tokens_after else current


async def _assemble(stream: openai.AsyncStream[Any]) -> tuple[JSON, CompletionUsage | None]:
    """A streamed answer as the message it adds up to, and the usage of its last chunk."""
    streamed = StreamedMessage()
    async for chunk in stream:
        streamed.add(chunk)
    return streamed.message(), streamed.usage
