"""Answering the model's `context_recall` calls: the rounds the client never sees.

When a forwarded request offers `context_recall` (`proxy.core.recall`) and the answer calls
it and nothing of the client's, the proxy resolves each call (the compaction that named the
id in this very request, else the store), appends the call and its result and asks again,
at most `context.recall_max_rounds` times; the request after the last round no longer offers
the tool, so the model must answer. The client gets one answer (`proxy.core.recall_rounds`;
`proxy.core.anthropic_recall` on the Messages API): streamed as one response, the text written
before a call relayed as it came.

A recall never fails the request: an id the session does not hold gets a result saying so
(never another conversation's content), the store down gets "unavailable", and a round the
upstream refuses ends the rounds with what the client was already given (a stream) or with
the answer asked once more without the tool (a whole answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.adapters.store import StoreUnavailableError
from proxy.adapters.upstream import UpstreamResponse
from proxy.core import jsoncodec, recall
from proxy.core.anthropic_recall import (
    MessagesStream,
    earlier_content,
    messages_calls,
    messages_continued,
    messages_final,
)
from proxy.core.messages import Message, text
from proxy.core.recall_rounds import (
    Call,
    ChatStream,
    ResponsesStream,
    chat_calls,
    chat_continued,
    chat_final,
    chat_text,
    dumps,
    earlier_output,
    responses_calls,
    responses_continued,
    responses_final,
)
from proxy.core.sse import event_data
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from proxy.service.outcome import Outcome
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.recall")

Send = Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]
"""Sends one more round's body upstream (timed by the request's stopwatch)."""

# A recalled result is never cut below this: less is all note and no content.
_LEAST_RESULT = 256
_EVENT_END = re.compile(rb"\r?\n\r?\n")
# What a recall's call and result cost beyond the result's text (ids, roles, framing).
_PER_RESULT = 40
# The most messages one recall expands a note's chain of notes and placeholders into.
_MAX_EXPANDED = 5000


@dataclass(slots=True)
class Tally:
    """What the rounds of one request did, for its log line, its timeline point and the
    metrics: filled as they happen (a stream's at its end)."""

    rounds: int = 0
    """Rounds answered with recalled content."""
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    upstream_s: float = 0.0
    """The upstream time the rounds after the first added."""


class Recaller:
    """Resolves recall ids; `run` starts the rounds of one answer."""

    def __init__(self, *, memory: Memory, metrics: Metrics) -> None:
        self._memory = memory
        self._metrics = metrics

    def run(self, turn: Turn, outcome: Outcome, send: Send, estimate: int) -> RecallRun:
        """The rounds of the answer to `turn` (`estimate`: our count of its first request)."""
        return RecallRun(self, turn, outcome, send, _Used(turn, estimate))

    async def results(
        self, turn: Turn, outcome: Outcome, calls: Sequence[Call], used: int, tally: Tally
    ) -> list[tuple[Call, str]]:
        """Each call's result, cut so that all of them fit in what the request leaves of
        the usable input (`used`: our count of the request so far)."""
        limit = turn.budget.tokens_at(1.0)
        share = int(limit * turn.policy.recall_max_share)
        room = max((limit - used) // max(len(calls), 1), _LEAST_RESULT)
        cap = max(min(share, room), _LEAST_RESULT)
        answered = []
        for call in calls:
            found, label = await self.found(turn, outcome, call.rid)
            if label == "unavailable":
                result = recall.UNAVAILABLE
            else:
                if found:
                    found = await _Expansion(self, turn, outcome, call.rid).of(found)
                result = recall.answer(
                    call.rid, found, max_tokens=cap, count=turn.counter.text, query=call.query
                )
            tally.calls += 1
            tally.outcomes[label] += 1
            self._metrics.recall(label)
            answered.append((call, result))
        return answered

    async def found(
        self, turn: Turn, outcome: Outcome, rid: str | None
    ) -> tuple[Sequence[Message] | None, str]:
        """What `rid` stands for in this conversation, and the outcome's label."""
        if rid is None:
            return None, "invalid"
        if rid in outcome.recalls:
            return outcome.recalls[rid], "found"
        try:
            found = await self._memory.recalled(turn.tenant, turn.session, rid)
        except StoreUnavailableError:
            return None, "unavailable"
        if found is None:
            return None, "unknown"
        return found, "found" if found else "expired"


class RecallRun:
    """The rounds of one answer: its tally, and the count of its request as it grows."""

    def __init__(
        self, recaller: Recaller, turn: Turn, outcome: Outcome, send: Send, used: _Used
    ) -> None:
        self._recaller = recaller
        self._turn = turn
        self._outcome = outcome
        self._send = send
        self._used = used
        self.tally = Tally()

    async def _results(self, calls: Sequence[Call]) -> list[tuple[Call, str]]:
        results = await self._recaller.results(
            self._turn, self._outcome, calls, self._used.tokens, self.tally
        )
        self._used.add(results)
        self.tally.rounds += 1
        return results

    async def answered(
        self, body: dict[str, Any], raw: bytes
    ) -> tuple[bytes, Mapping[str, Any] | None]:
        """The whole answer the client gets for `raw` (the first round's), and the first
        round's usage (what calibration compares with the estimate)."""
        try:
            answer = jsoncodec.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return raw, None
        if not isinstance(answer, dict):
            return raw, None
        first = answer.get("usage") if isinstance(answer.get("usage"), dict) else None
        rounds = _Rounds(self._turn, body, answer.get("usage"))
        while True:
            calls, theirs = rounds.calls(answer)
            if not calls and rounds.count == 0 and not rounds.echoes_tool(raw):
                return raw, first
            if not calls or theirs or rounds.count >= rounds.max_rounds:
                break
            rounds.answer(answer, await self._results(calls))
            following = await self._following(rounds)
            if following is None:
                # The round failed upstream: the answer once more, as if nothing was
                # offered to recall (one request, the client's own, without the tool).
                following = await self._following(rounds.without_recall())
                answer = following if following is not None else answer
                break
            answer = following
        return dumps(rounds.final(answer)), first

    async def _following(self, rounds: _Rounds) -> dict[str, Any] | None:
        """The next round's whole answer, or None when the upstream refused it."""
        started = time.perf_counter()
        response = await self._send(rounds.body)
        try:
            raw = await response.read()
        finally:
            response.close()
            self.tally.upstream_s += time.perf_counter() - started
        if response.status >= 400:
            logger.warning("a recall round got %d from the upstream", response.status)
            return None
        try:
            answer = jsoncodec.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(answer, dict):
            return None
        rounds.usages.append(answer.get("usage"))
        return answer

    async def streamed(
        self,
        body: dict[str, Any],
        first: Opened,
        *,
        usage_wanted: bool,
        record: Callable[[Mapping[str, Any] | None], None],
    ) -> AsyncIterator[bytes]:
        """The client's stream: every round's events rewritten as one response's. The
        upstream response being read is closed when the client goes away; `record` gets the
        first round's usage once the stream has ended."""
        stream = _stream_of(self._turn)
        named = self._turn.responses or self._turn.anthropic
        current: Opened | None = first
        try:
            while current is not None:
                async for events in self._relayed(current, stream):
                    yield events
                current.response.close()
                current, body = await self._next_round(stream, body)
            ending = [_event(out, named=named) for out in stream.finish(with_usage=usage_wanted)]
            if not named:
                ending.append(b"data: [DONE]\n\n")
            yield b"".join(ending)  # never empty: every API's stream has a closing event
            record(stream.first_usage)
        finally:
            if current is not None:
                current.response.close()

    async def _relayed(self, opened: Opened, stream: _Stream) -> AsyncIterator[bytes]:
        """One round's events as the client gets them: those that came in one read go out
        in one write. A provider often sends several events at once, and each write costs
        the proxy a pass through the server's stack and a system call (8 us here)."""
        named = self._turn.responses or self._turn.anthropic
        async for events in _events(opened.head, opened.response):
            out: list[bytes] = []
            for data, event in events:
                if data is None:
                    if b"[DONE]" not in event:
                        out.append(event)  # a comment (a keep-alive)
                    continue
                # A chunk the rewriting left as it was goes on as the provider's bytes.
                out += [
                    event if chunk is data else _event(chunk, named=named)
                    for chunk in stream.feed(data)
                ]
            if out:
                yield b"".join(out)

    async def _next_round(
        self, stream: _Stream, body: dict[str, Any]
    ) -> tuple[Opened | None, dict[str, Any]]:
        """The next round's stream, opened, and its body; None when the rounds are over."""
        calls, theirs = stream.end_round()
        max_rounds = self._turn.policy.recall_max_rounds
        if not calls or theirs or self.tally.rounds >= max_rounds:
            return None, body
        body = stream.continued(body, await self._results(calls))
        if self.tally.rounds >= max_rounds:
            body = recall.without_tool(body)
        started = time.perf_counter()
        response = await self._send(body)
        self.tally.upstream_s += time.perf_counter() - started
        if response.status >= 400:
            response.close()
            logger.warning("a recall round got %d from the upstream", response.status)
            stream.refused()  # the client's stream closes with this round's finish
            return None, body
        return Opened(response), body


class _Expansion:
    """What an id stands for, with the placeholders and notes in it replaced by what they
    stand for in turn: a note's span holds the results its compaction had cleared and the
    note of the compaction before it, and the model asked for the turns, not for a chain of
    ids to follow one round at a time. Bounded (`_MAX_EXPANDED` messages); an id that does not
    resolve leaves its message as it is."""

    def __init__(self, recaller: Recaller, turn: Turn, outcome: Outcome, rid: str | None) -> None:
        self._recaller = recaller
        self._turn = turn
        self._outcome = outcome
        self._seen = {rid}
        self._left = _MAX_EXPANDED

    async def of(self, messages: Sequence[Message]) -> list[Message]:
        out: list[Message] = []
        for message in messages:
            nested = [i for i in recall.ids_in(text(message)) if i not in self._seen]
            if not nested or self._left <= 0:
                out.append(message)
                continue
            self._seen.update(nested)
            found = await asyncio.gather(
                *(self._recaller.found(self._turn, self._outcome, rid) for rid in nested)
            )
            resolved = [m for messages_, _ in found if messages_ for m in messages_]
            if not resolved:
                out.append(message)
                continue
            self._left -= len(resolved)
            out.extend(await self.of(resolved))
        return out


@dataclass(frozen=True, slots=True)
class Opened:
    """A round's streamed response, and bytes of it already read (the first round's head)."""

    response: UpstreamResponse
    head: bytes = b""


class _Used:
    """Our count of a request as its rounds grow it: the first round's estimate, and each
    result added (with a message's overhead; the call itself is a few tokens more)."""

    def __init__(self, turn: Turn, estimate: int) -> None:
        self._turn = turn
        self.tokens = estimate

    def add(self, results: Sequence[tuple[Call, str]]) -> None:
        self.tokens += sum(self._turn.counter.text(text) + _PER_RESULT for _, text in results)


class _Rounds:
    """The rounds of a whole (not streamed) answer: the body as it grows, what earlier rounds
    wrote for the client, every round's usage."""

    def __init__(self, turn: Turn, body: dict[str, Any], usage: object) -> None:
        self.body = body
        self.first_body = body
        self.responses = turn.responses
        self.anthropic = turn.anthropic
        self.max_rounds = turn.policy.recall_max_rounds
        self.count = 0
        self.earlier: list[Any] = []
        self.usages: list[Mapping[str, Any] | None] = [usage if isinstance(usage, dict) else None]

    def echoes_tool(self, raw: bytes) -> bool:
        """Whether the answer names the proxy's tool where the client would see it (a
        Responses API response echoes the request's `tools`)."""
        return self.responses and recall.TOOL.encode() in raw

    def calls(self, answer: Mapping[str, Any]) -> tuple[list[Call], bool]:
        if self.anthropic:
            return messages_calls(answer)
        return responses_calls(answer) if self.responses else chat_calls(answer)

    def answer(self, answer: Mapping[str, Any], results: Sequence[tuple[Call, str]]) -> None:
        """Ask again with `answer`'s calls answered by `results`."""
        if self.anthropic:
            content = answer.get("content")
            content = content if isinstance(content, list) else []
            self.body = messages_continued(self.body, content, results)
            self.earlier += earlier_content(content)
        elif self.responses:
            output = answer.get("output")
            output = output if isinstance(output, list) else []
            self.body = responses_continued(self.body, output, results)
            self.earlier += earlier_output(output)
        else:
            self.body = chat_continued(self.body, answer, results)
            self.earlier.append(chat_text(answer))
        self.count += 1
        if self.count >= self.max_rounds:
            # The last answer may not recall again: it must answer with what it has.
            self.body = recall.without_tool(self.body)

    def without_recall(self) -> _Rounds:
        """These rounds undone: the first body, offering no tool of the proxy's."""
        self.body = recall.without_tool(self.first_body)
        self.earlier = []
        return self

    def final(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        if self.anthropic:
            return messages_final(answer, self.earlier, self.usages)
        if self.responses:
            return responses_final(answer, self.earlier, self.usages)
        return chat_final(answer, self.earlier, self.usages)


async def _events(
    head: bytes, response: UpstreamResponse
) -> AsyncIterator[list[tuple[dict[str, Any] | None, bytes]]]:
    """The stream's events (with `head`, its bytes already read, first), those completed by
    one read together: each one's JSON (None for a comment or `[DONE]`) and its bytes."""
    pending = bytearray(head)

    def complete() -> list[tuple[dict[str, Any] | None, bytes]]:
        found, start = [], 0
        for end in _EVENT_END.finditer(pending):
            event = bytes(pending[start : end.end()])
            found.append((event_data(event), event))
            start = end.end()
        del pending[:start]
        return found

    if events := complete():
        yield events
    async for chunk in response.iter_chunks():
        pending.extend(chunk)
        if events := complete():
            yield events
    if pending.strip():
        yield [(event_data(bytes(pending)), bytes(pending))]


_Stream = ChatStream | ResponsesStream | MessagesStream


def _stream_of(turn: Turn) -> _Stream:
    """The rewriting of the turn's API's stream."""
    if turn.anthropic:
        return MessagesStream()
    return ResponsesStream() if turn.responses else ChatStream()


def _event(data: Mapping[str, Any], *, named: bool) -> bytes:
    """One event as the client gets it (a Responses or Messages stream names its event
    type in an `event:` line)."""
    if named:
        return b"event: " + str(data.get("type", "")).encode() + b"\ndata: " + dumps(data) + b"\n\n"
    return b"data: " + dumps(data) + b"\n\n"
