"""The simulated agents: OpenAI SDK clients running tool-using sessions through the proxy.

Each agent is what a coding agent's harness does: it sends its whole history on every
request (it knows nothing of the proxy), runs the tools the model asks for, sends their
results back, and goes on until the model answers; then the next user turn. What it sees of
the proxy is only what any client sees: the `x-compaction-*` and `x-context-pressure`
response headers, and the provider's `usage`, which the proxy relays untouched.

`SimulatedAgent` is the harness's loop, whatever the API; `ChatAgent` speaks chat
completions, `proxy.demo.responses_agent.ResponsesAgent` the Responses API, and
`proxy.demo.messages_agent.MessagesAgent` the Messages API (with the `anthropic` SDK).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import openai
from openai.types import CompletionUsage

from proxy.core.tokens import TokenCounter
from proxy.demo.streams import StreamedMessage
from proxy.demo.workload import MODEL, TOOLS, facts, tool_output, user_message

JSON = dict[str, Any]
AgentApi = Literal["chat", "responses", "messages"]
SYSTEM_PROMPT = "You are a coding agent."


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the model asked for, whatever the API: the client runs it."""

    id: str
    name: str
    arguments: str


class FailedResponseError(Exception):
    """A response that failed after its stream had started (the Responses API's
    `response.failed`, `response.incomplete` or `error` event): the SDK does not raise."""


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
    api: AgentApi = "chat"
    session: str | None = None
    requests: int = 0
    sent_tokens: int = 0
    """The prompts as the client sent them (its whole history every time)."""
    forwarded_tokens: int = 0
    """The prompts as the provider counted them (`usage.prompt_tokens`, or `input_tokens`
    on the Responses API): what was forwarded."""
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


class SimulatedAgent(ABC):
    """One agent: its SDK client, the history it resends, and its numbers.

    A subclass speaks one API: it sends the history and adds the model's answer to it
    (`_round`), and adds a tool's result to it (`_add_result`).
    """

    api: AgentApi

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
        self.stats = AgentStats(name, f"sk-demo-{name}", stream=index % 2 == 1, api=self.api)
        self._base_url = base_url
        self._counter = counter
        self._on_turn = on_turn
        self._history: list[JSON] = []
        """The conversation after the system prompt, as the API's items or messages."""

    async def run(self, turns: int) -> AgentStats:
        """Play `turns` user turns, one after the other, reporting each."""
        self.stats.facts = tuple(fact.key for fact in facts(self.index) if fact.turn <= turns)
        async with self._client() as sdk:
            for turn in range(1, turns + 1):
                self._on_turn(await self._turn(sdk, turn))
        return self.stats

    def _client(self) -> AbstractAsyncContextManager[Any]:
        """The SDK client this agent's API is spoken with (the OpenAI SDK's by default)."""
        # No retries: an error must show in the table, not be papered over by the SDK.
        return openai.AsyncOpenAI(
            api_key=self.stats.api_key,
            base_url=self._base_url,
            max_retries=0,
            # Generous: a busy machine must slow the demo down, not fail it.
            timeout=300.0,
        )

    async def _turn(self, sdk: Any, turn: int) -> TurnReport:
        """Send the user's message, run the requested tools until the model answers."""
        mark = len(self._history)
        # An easy input message: the same dict on both APIs.
        self._history.append({"role": "user", "content": user_message(self.index, turn)})
        shown: Exchange | None = None
        try:
            while True:
                calls, exchange = await self._round(sdk)
                shown = _more_telling(shown, exchange)
                if not calls:
                    return TurnReport(self.stats.name, turn, shown)
                for call in calls:
                    output = tool_output(call.name, call.arguments, self.stats.requests)
                    self._add_result(call, output)
        except (openai.APIError, anthropic.APIError, FailedResponseError) as exc:
            # The turn is abandoned, as an agent would; the error is counted and shown.
            del self._history[mark:]
            self.stats.errors += 1
            self.stats.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
            return TurnReport(self.stats.name, turn, shown, error=type(exc).__name__)

    @abstractmethod
    async def _round(self, sdk: Any) -> tuple[list[Call], Exchange]:
        """Send the history (with `sdk`, `_client`'s); add the model's answer to it; the
        tool calls it asks for."""

    @abstractmethod
    def _add_result(self, call: Call, output: str) -> None:
        """Add `call`'s result to the history."""

    def _sending(self, tokens: int) -> None:
        """Count a request of `tokens` (the client's count), answered or not."""
        self.stats.sent_tokens += tokens
        self.stats.requests += 1

    def _note(self, tokens: int, headers: Mapping[str, str]) -> Exchange:
        """What the answer's headers say the proxy did to a request of `tokens`."""
        exchange = _exchange(tokens, headers)
        self.stats.session = exchange.session or self.stats.session
        if exchange.compacted:
            self.stats.compactions[exchange.action] += 1
        return exchange

    def _bill(self, prompt_tokens: int, cached_tokens: int | None) -> None:
        """What `usage` said the provider was sent, and read from its prompt cache."""
        self.stats.forwarded_tokens += prompt_tokens
        self.stats.cached_tokens += cached_tokens or 0


class ChatAgent(SimulatedAgent):
    """An agent on chat completions: the system prompt and the messages, every time."""

    api: AgentApi = "chat"

    async def _round(self, sdk: openai.AsyncOpenAI) -> tuple[list[Call], Exchange]:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *self._history]
        body: JSON = {"model": MODEL, "messages": messages, "tools": TOOLS}
        sent = self._counter.request(body)
        self._sending(sent)
        if self.stats.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        raw = await sdk.chat.completions.with_raw_response.create(**body)
        exchange = self._note(sent, raw.headers)
        parsed = raw.parse()
        if isinstance(parsed, openai.AsyncStream):
            message, usage = await _assemble(parsed)
        else:
            message, usage = parsed.choices[0].message.model_dump(exclude_none=True), parsed.usage
        self._bill_usage(usage)
        self._history.append(message)
        return [_chat_call(call) for call in message.get("tool_calls") or []], exchange

    def _bill_usage(self, usage: CompletionUsage | None) -> None:
        if usage is None:
            return
        details = usage.prompt_tokens_details
        self._bill(usage.prompt_tokens, details.cached_tokens if details else 0)

    def _add_result(self, call: Call, output: str) -> None:
        self._history.append({"role": "tool", "tool_call_id": call.id, "content": output})


def _chat_call(call: JSON) -> Call:
    function = call["function"]
    return Call(call["id"], function["name"], function["arguments"])


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
