"""Forwarding a compacted chat completion: one retry after an overflow, usage recorded.

Errors are classified with the core's overflow classifier. An overflow that compaction can
fix is retried exactly once, after the emergency plan (no LLM call) and after learning the
window the error stated, when its numbers are about the request that was sent
(`proxy.core.lessons`); a second overflow, or one compaction cannot fix, goes back to the
client as the provider sent it, with `x-should-retry: false` so SDKs do not retry it
themselves. Any other error goes back unchanged at once.

A stream's status line is not an error when the provider reports the overflow in its first
event (older llama.cpp, OpenRouter): that first event is read before anything is relayed, so
the same retry applies while nothing has reached the client yet.

Every successful response's `usage.prompt_tokens`, compared with our estimate of the same
payload, updates the model's calibration. Both facts are the tenant's own (another tenant's
requests never read them) and expire after `context.learned_ttl_s`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.adapters.upstream import Upstream, UpstreamRequest, UpstreamResponse
from proxy.core import jsoncodec
from proxy.core.anthropic_stream import MessagesTap
from proxy.core.anthropic_usage import calibration_usage
from proxy.core.budget import output_reserve
from proxy.core.calibration import updated_calibration
from proxy.core.headers import Headers, client_response_headers, upstream_request_headers
from proxy.core.lessons import window_lesson
from proxy.core.overflow import Verdict, classify
from proxy.core.plan import Compacted, Situation, plan_emergency
from proxy.core.request import Api, ChatRequest, wire_body
from proxy.core.sse import StreamTap, opening_error, usage_requested_in, with_usage_requested
from proxy.errors import UpstreamError
from proxy.observability.metrics import Metrics
from proxy.service.access import Stopwatch
from proxy.service.compactor import Compactor
from proxy.service.memory import Memory
from proxy.service.outcome import Outcome, Uncounted
from proxy.service.recalls import Opened, Recaller, Tally
from proxy.service.replies import Reply
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.chat")

_NO_RETRY: Headers = [("x-should-retry", "false")]


@dataclass(frozen=True, slots=True)
class Answer:
    """The reply to a turn, and the outcome it answers: after a retry, the emergency
    compaction's (what the provider accepted, or refused a second time)."""

    reply: Reply
    outcome: Outcome
    recalls: Tally | None = None
    """What the recall rounds did (None: the request offered no recall); a stream's is
    complete once it has been relayed."""


@dataclass(frozen=True, slots=True)
class _Sent:
    """One attempt: the response, and what is known of it before relaying."""

    response: UpstreamResponse
    estimate: int
    """Our count of what was sent (raw tokens): the number calibration compares."""
    usage_added: bool
    head: bytes = b""
    """Bytes of a stream already read (its first event) and not yet relayed."""
    error: bytes | None = None
    """The body (or first event) of an error, already read."""
    body: dict[str, Any] | None = None
    """The body sent, when it offers `context_recall` (the rounds that answer it extend it)."""
    outcome: Outcome | None = None
    """What was forwarded, counted (an `Uncounted` view is counted while it is answered)."""


class ChatForwarder:
    """Sends a turn's messages upstream and turns the answer into a `Reply`."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        memory: Memory,
        compactor: Compactor,
        api_key: str | None,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        metrics: Metrics,
    ) -> None:
        self._upstream = upstream
        self._memory = memory
        self._compactor = compactor
        self._api_key = api_key
        self._metrics = metrics
        # Usage is recorded in the background: the answer need not wait for the store.
        self._spawn = spawn
        self._recaller = Recaller(memory=memory, metrics=metrics)

    async def forward(self, turn: Turn, forwarded: Outcome | Uncounted, watch: Stopwatch) -> Answer:
        """Forward what `forwarded` says; after an overflow compaction can fix, compact hard
        and forward once more. `watch` times the waits on the upstream."""
        sent = await self._send(turn, forwarded, watch)
        outcome = sent.outcome
        assert outcome is not None  # `_send` counts what it forwarded
        verdict = self._verdict(turn, sent)
        if verdict is None:
            return await self._answer(turn, outcome, sent, watch)
        if not verdict.overflow:
            return Answer(self._error(sent, []), outcome)
        retry = await self._after_overflow(turn, outcome, verdict, sent.estimate)
        if retry is None:
            return Answer(self._error(sent, _NO_RETRY), outcome)
        sent.response.close()
        again = await self._retry(turn, retry, watch)
        second = self._verdict(turn, again)
        self._metrics.retry(succeeded=second is None)
        if second is None:
            return await self._answer(turn, retry, again, watch)
        # Refused twice: the client's own retry would meet the same refusal.
        return Answer(self._error(again, _NO_RETRY if second.overflow else []), retry)

    async def _retry(self, turn: Turn, outcome: Outcome, watch: Stopwatch) -> _Sent:
        try:
            return await self._send(turn, outcome, watch)
        except UpstreamError:
            self._metrics.retry(succeeded=False)
            raise

    async def _send(self, turn: Turn, forwarded: Outcome | Uncounted, watch: Stopwatch) -> _Sent:
        request, messages = turn.request, forwarded.forwarded
        usage_added = False
        if request.stream and request.api is Api.CHAT:
            usage_added = with_usage_requested(request.body)[1]
        # Unchanged: the client's own bytes. Changed: one deterministic serialization, so a
        # frozen prefix is the same bytes on every request (the provider caches by prefix).
        offered = turn.offers_recall(messages)
        body: dict[str, Any] | None = None
        unchanged = messages == request.messages and not offered
        spliced = None
        if unchanged and usage_added:
            spliced = usage_requested_in(request.raw, request.body)
        if unchanged and not usage_added:
            payload = request.raw
        elif spliced is not None:
            payload = spliced  # the client's bytes, the usage option added at their end
        else:
            body = wire_body(request, messages)
            body = with_usage_requested(body)[0] if usage_added else body
            body = turn.with_recall(body) if offered else body
            payload = _dumps(body)
        if isinstance(forwarded, Uncounted):
            forwarded.count_soon()
        response = await self._post(turn, payload, watch)
        head, error = await watch.body(_opening(response, request))
        outcome = forwarded.counted() if isinstance(forwarded, Uncounted) else forwarded
        estimate = _estimate(turn, outcome)
        body = body if offered else None
        return _Sent(response, estimate, usage_added, head, error, body, outcome)

    async def _post(self, turn: Turn, payload: bytes, watch: Stopwatch) -> UpstreamResponse:
        return await watch.headers(self._upstream.send(self._request(turn, payload)))

    def _request(self, turn: Turn, payload: bytes) -> UpstreamRequest:
        headers = upstream_request_headers(
            turn.incoming.headers,
            api_key=self._api_key,
            identity_encoding=True,
            anthropic=turn.request.api is Api.MESSAGES,
        )
        incoming = turn.incoming
        return UpstreamRequest("POST", incoming.path, incoming.query, headers, payload)

    def _verdict(self, turn: Turn, sent: _Sent) -> Verdict | None:
        """None for a success; else what kind of error it is (an overflow is counted)."""
        if sent.error is None:
            return None
        status = sent.response.status
        # What the client asked for, not our default reserve: the provider counts only that.
        requested = output_reserve(turn.request.body, 0) or None
        verdict = classify(
            status, sent.error, dict(sent.response.headers), requested_output=requested
        )
        if verdict.overflow:
            self._metrics.overflow(verdict.kind.value.lower())
        return verdict

    async def _after_overflow(
        self, turn: Turn, outcome: Outcome, verdict: Verdict, estimate: int
    ) -> Outcome | None:
        """Learn from the overflow and compact hard: what to forward instead, or None when
        nothing can be done."""
        window = await self._lesson(turn, verdict, estimate)
        if not verdict.compaction_can_fix:
            return None
        situation = Situation(
            outcome.messages,
            turn.tools_body(),
            turn.policy,
            turn.budget,
            notes=turn.notes(outcome.checkpoint),
            recall=turn.recall_scope,
            working=turn.working,
        )
        result = await turn.planned(
            lambda c, m: plan_emergency(situation, c, stated_limit=window, mentions=m)
        )
        if not isinstance(result, Compacted):
            return None
        logger.info(
            "overflow (%s): emergency compaction %d -> %d tokens, retrying once",
            verdict.kind,
            result.tokens_before,
            result.tokens_after,
        )
        # Another request's checkpoint of the same prefix is forwarded instead only when it
        # is no larger: the provider just refused a larger one.
        frozen = await self._compactor.freeze(
            turn, result, "overflow", outcome, ceiling=result.tokens_after
        )
        return frozen.outcome

    async def _lesson(self, turn: Turn, verdict: Verdict, estimate: int) -> int | None:
        """The window the overflow taught the tenant, if its numbers are believed."""
        if verdict.limit is None:
            return None
        sent = turn.budget.estimate(estimate)  # in the provider's tokens, as it states them
        output = output_reserve(turn.request.body, 0) or None
        window = window_lesson(verdict, sent=sent, output=output)
        if window is None:
            logger.warning(
                "overflow (%s) states a limit of %d tokens and a prompt of %s, but about %d "
                "were sent: not learned",
                verdict.rule,
                verdict.limit,
                verdict.prompt_tokens,
                sent,
            )
            return None
        await self._memory.learn_window(turn.tenant, turn.model, window)
        return window

    def _error(self, sent: _Sent, extra: Headers) -> Reply:
        sent.response.close()
        headers = client_response_headers(sent.response.headers)
        headers = (
            [(k, v) for k, v in headers if k.lower() != "x-should-retry"] if extra else headers
        )
        return Reply(sent.response.status, [*headers, *extra], sent.error or b"")

    async def _answer(self, turn: Turn, outcome: Outcome, sent: _Sent, watch: Stopwatch) -> Answer:
        """The reply to a request the upstream accepted: with recall rounds when it offered
        `context_recall`."""
        if sent.body is None:
            return Answer(await self._success(turn, outcome, sent, watch), outcome)
        body = sent.body

        async def send(next_body: dict[str, Any]) -> UpstreamResponse:
            # Timed by the rounds themselves (`Tally.upstream_s`), body included.
            return await self._upstream.send(self._request(turn, _dumps(next_body)))

        run = self._recaller.run(turn, outcome, send, sent.estimate)
        watch.recalls = run.tally
        headers = client_response_headers(sent.response.headers)
        if turn.request.stream:

            def record(usage: Mapping[str, Any] | None) -> None:
                self._reported(turn, sent.estimate, usage)

            relay = run.streamed(
                body,
                Opened(sent.response, sent.head),
                usage_wanted=not sent.usage_added,
                record=record,
            )
            reply = Reply(sent.response.status, headers, relay, sent.response.close)
            return Answer(reply, outcome, run.tally)
        try:
            raw = await watch.body(sent.response.read())
        finally:
            sent.response.close()
        raw, usage = await run.answered(body, raw)
        self._reported(turn, sent.estimate, usage)
        return Answer(Reply(sent.response.status, headers, raw), outcome, run.tally)

    async def _success(self, turn: Turn, outcome: Outcome, sent: _Sent, watch: Stopwatch) -> Reply:
        headers = client_response_headers(sent.response.headers)
        if not turn.request.stream:
            try:
                raw = await watch.body(sent.response.read())
            finally:
                sent.response.close()
            self._reported(turn, sent.estimate, _usage_of(raw))
            return Reply(sent.response.status, headers, raw)
        relay = self._relay(turn, outcome, sent)
        return Reply(sent.response.status, headers, relay, sent.response.close)

    async def _relay(self, turn: Turn, outcome: Outcome, sent: _Sent) -> AsyncIterator[bytes]:
        tap: StreamTap | MessagesTap = (
            MessagesTap()
            if turn.request.api is Api.MESSAGES
            else StreamTap(strip_usage_chunk=sent.usage_added)
        )
        first = tap.feed(sent.head)
        if first:
            yield first
        async for chunk in sent.response.iter_chunks():
            out = tap.feed(chunk)
            if out:
                yield out
        rest = tap.flush()
        if rest:
            yield rest
        self._reported(turn, sent.estimate, tap.usage)

    def _reported(self, turn: Turn, estimate: int, usage: Mapping[str, Any] | None) -> None:
        """Keep the usage the answer reported for the turn's end (written with its record,
        `ProxyService._after`, which runs after this), and calibrate the counter by it."""
        if usage is None:
            return
        if turn.request.api is Api.MESSAGES:
            # Its `input_tokens` is only the uncached part: the prompt is that plus the
            # cache's reads and writes, added as `prompt_tokens`.
            usage = calibration_usage(usage)
        turn.answered.usage = dict(usage)
        # Chat's `prompt_tokens`; the Responses API's `input_tokens`.
        reported = usage.get("prompt_tokens", usage.get("input_tokens"))
        if isinstance(reported, int):
            self._spawn(self._calibrate(turn, estimate, reported))

    async def _calibrate(self, turn: Turn, estimate: int, reported: int) -> None:
        current = await self._memory.calibration(turn.tenant, turn.model)
        factor = updated_calibration(current, estimated=estimate, reported=reported)
        # Small drifts are not worth a write on every response.
        if factor is not None and (current is None or abs(factor - current) > 0.002):
            await self._memory.set_calibration(turn.tenant, turn.model, factor)


async def _opening(response: UpstreamResponse, request: ChatRequest) -> tuple[bytes, bytes | None]:
    """What must be read before anything is relayed: an error's body, or a stream's opening
    events (its head) and whether they hold an error (then they are the error too)."""
    if response.status >= 400:
        try:
            return b"", await response.read()
        finally:
            response.close()
    if not request.stream:
        return b"", None
    responses = request.api is Api.RESPONSES
    buffer = b""
    failed: bool | None = None
    async for chunk in response.iter_chunks():
        buffer += chunk
        failed = opening_error(buffer, responses=responses)
        if failed is not None:
            break
    return buffer, buffer if failed else None


def _estimate(turn: Turn, outcome: Outcome) -> int:
    """Our count of what is sent: known already unless hooks injected messages."""
    return turn.tokens(outcome.forwarded) if outcome.injected else outcome.tokens_after


def _usage_of(raw: bytes) -> dict[str, Any] | None:
    try:
        payload = jsoncodec.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    usage = payload.get("usage") if isinstance(payload, dict) else None
    return usage if isinstance(usage, dict) else None


def _dumps(body: dict[str, Any]) -> bytes:
    return jsoncodec.dumps(body)
