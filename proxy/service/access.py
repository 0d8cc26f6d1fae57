"""One compacted request (a chat completion or a Responses API request) as the operator sees
it: its timings, its outcome, its log line.

Two parts, because they change differently. An `Access` is what is known of the request, a
value: the service makes the next one as it learns more (the request, the turn, what
compaction decided, the outcome after a retry). A `Stopwatch` runs from the moment the
service has the body to the last byte of the answer and adds up the waits on the upstream as
they happen. When the answer is ready the stopwatch reports the proxy's overhead and the
forwarded pressure to the metrics; when it has been sent (a stream: at its end) it writes the
request's one line on the `proxy.access` logger from the last `Access`.

The line carries the API (`chat`, `responses` or `messages`), the session, a prefix of the tenant's
hash, the model, the tokens before and after, the pressure, the action, the status, the
latencies and the stream flag: numbers already counted for the response headers, so the line
costs nothing proportional to the history. Never a credential; the last user message only
with `log.content: true`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from proxy.core.messages import Message, role, text
from proxy.core.request import Api, ChatRequest
from proxy.errors import ProxyError
from proxy.observability.metrics import Metrics
from proxy.service.outcome import Outcome, Uncounted
from proxy.service.recalls import Tally
from proxy.service.replies import Reply
from proxy.service.turns import Turn

logger = logging.getLogger("proxy.access")

# Enough of the tenant hash to tell tenants apart in a log, too little to be a credential.
TENANT_CHARS = 8
# With `log.content: true`, the last user message is cut to this many characters.
CONTENT_CHARS = 500
# nginx's "client closed request", as the route answers it.
CLIENT_CLOSED = 499

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Access:
    """What is known of one request so far."""

    request: ChatRequest | None = None
    turn: Turn | None = None
    outcome: Outcome | Uncounted | None = None
    """What the turn forwards (a view counted while it is answered, known once counted)."""
    action: str | None = None
    """Set when no compaction was considered: `off` (X-Compaction: off), `command`,
    `server_state`, `passthrough` (any other `/v1/*` request, forwarded untouched); or for
    a client's compaction request: `compact`, `compaction_trigger`."""
    method: str | None = None
    path: str | None = None
    """A passthrough's method and path (relative to `/v1/`): its line says what it was."""
    tenant: str | None = None
    """The tenant, when known without a turn (a passthrough)."""
    compaction_by: str | None = None
    """Who answered a compaction request (`proxy` or `upstream`; `proxy.core.delegation`)."""
    api: Api | None = None
    """The API of the route the request came by, known before its body is read: a body that
    does not parse is still logged as what it was meant to be."""

    @property
    def counted(self) -> Outcome | None:
        """The turn's outcome, if known (an uncounted view's once it has been counted)."""
        return self.outcome.done if isinstance(self.outcome, Uncounted) else self.outcome

    def fields(self, status: int) -> dict[str, Any]:
        """The log line's fields known from the request (null when unknown); the
        stopwatch adds its latencies."""
        request, turn, outcome = self.request, self.turn, self.counted
        tenant = turn.tenant if turn else self.tenant
        fields: dict[str, Any] = {
            "api": request.api.value if request else self.api.value if self.api else None,
            "session": turn.session if turn else None,
            "tenant": tenant[:TENANT_CHARS] if tenant else None,
            "model": request.model if request else None,
            "stream": request.stream if request else False,
            "status": status,
            "action": self.action or (outcome.strategy or "none" if outcome else None),
            "tokens_before": None,
            "tokens_after": None,
            "pressure": None,
        }
        if self.path is not None:
            fields["method"], fields["path"] = self.method, f"/v1/{self.path}"
        if self.compaction_by is not None:
            fields["compaction_by"] = self.compaction_by
        if turn is not None and outcome is not None:
            budget = turn.budget
            fields["tokens_before"] = budget.estimate(outcome.sent or outcome.tokens_before)
            fields["tokens_after"] = budget.estimate(outcome.tokens_after)
            fields["pressure"] = round(budget.pressure(outcome.tokens_after), 4)
        return fields


class Stopwatch:
    """The timings of one request, and its log line once it has ended."""

    def __init__(self, metrics: Metrics, *, log_content: bool = False) -> None:
        self._metrics = metrics
        self._log_content = log_content
        self._started = time.perf_counter()
        self.upstream_s = 0.0
        """Time spent waiting on the upstream for this request's answer (every attempt)."""
        self.ready_s: float | None = None
        """Time from the start until the answer's headers were ready."""
        self.recalls: Tally | None = None
        """What the recall rounds did, when the request offered `context_recall`."""

    async def headers(self, send: Awaitable[_T]) -> _T:
        """`await send`: one attempt's wait for the upstream's response headers."""
        started = time.perf_counter()
        try:
            response = await send
        finally:
            waited = time.perf_counter() - started
            self.upstream_s += waited
        self._metrics.upstream_latency(waited)
        return response

    async def body(self, read: Awaitable[_T]) -> _T:
        """`await read`: a wait for the upstream's body (an error, a first event, a reply)."""
        started = time.perf_counter()
        try:
            return await read
        finally:
            self.upstream_s += time.perf_counter() - started

    @property
    def waited_s(self) -> float:
        """The time spent waiting on the upstream: every attempt and every recall round."""
        return self.upstream_s + (self.recalls.upstream_s if self.recalls else 0.0)

    def relay(self, reply: Reply, access: Access) -> Reply:
        """`reply`, reported now and logged once it has been sent (a stream: at its end)."""
        self.ready_s = time.perf_counter() - self._started
        if access.request is not None:
            # The proxy's time on the requests it reads (a passthrough's is a few headers).
            self._metrics.overhead(self.ready_s - self.waited_s)
        outcome = access.counted
        if access.turn is not None and outcome is not None:
            self._metrics.pressure(access.turn.budget.pressure(outcome.tokens_after))
        if isinstance(reply.body, bytes):
            self.finish(access, reply.status)
            return reply
        return Reply(reply.status, reply.headers, self._streamed(reply, access), reply.close)

    async def _streamed(self, reply: Reply, access: Access) -> AsyncIterator[bytes]:
        assert not isinstance(reply.body, bytes)
        # Counted from the first chunk pulled: a body the server never starts to send is
        # never closed either, and would leave the gauge one too high for good.
        self._metrics.stream_started()
        complete = False
        try:
            async for chunk in reply.body:
                yield chunk
            complete = True
        finally:
            self._metrics.stream_ended()
            self.finish(access, reply.status, aborted=not complete)

    def failed(self, access: Access, exc: BaseException) -> None:
        """The request ended with `exc` instead of a reply."""
        if isinstance(exc, ProxyError):
            status = exc.status_code
        elif isinstance(exc, asyncio.CancelledError):
            status = CLIENT_CLOSED
        else:
            status = 500
        self.finish(access, status)

    def finish(self, access: Access, status: int, *, aborted: bool = False) -> None:
        """Write the request's log line."""
        if not logger.isEnabledFor(logging.INFO):
            return  # `log.level: warning` or above: not even the fields are worth building
        fields = self.fields(access, status)
        if aborted:
            fields["aborted"] = True
        kind = "passthrough" if access.action == "passthrough" else fields["api"]
        logger.info(_MESSAGES.get(kind, "chat completion"), extra=fields)

    def fields(self, access: Access, status: int) -> dict[str, Any]:
        """The log line's fields (all of them, null when unknown)."""
        fields = access.fields(status)
        fields["latency_ms"] = _ms(time.perf_counter() - self._started)
        fields["upstream_ms"] = _ms(self.waited_s)
        ready = self.ready_s
        fields["overhead_ms"] = None if ready is None else _ms(ready - self.waited_s)
        recalls = self.recalls
        if recalls is not None and recalls.calls:
            # The rounds' upstream time is in `upstream_ms` too; this says how much they added.
            fields["recalls"] = recalls.calls
            fields["recall_rounds"] = recalls.rounds
            fields["recall_ms"] = _ms(recalls.upstream_s)
        if self._log_content and access.request is not None:
            fields["content"] = last_user_text(access.request.messages)
        return fields


# The message of each kind of line: what the request was.
_MESSAGES = {"responses": "response", "messages": "message", "passthrough": "passthrough"}


def last_user_text(messages: list[Message]) -> str | None:
    """The last user message's text, cut to `CONTENT_CHARS`."""
    # From the end: the last user message is nearly always among the last few.
    for message in reversed(messages):
        if role(message) == "user":
            content = text(message)
            if len(content) > CONTENT_CHARS:
                return content[:CONTENT_CHARS] + "…"
            return content
    return None


def _ms(seconds: float) -> float:
    return round(max(seconds, 0.0) * 1000, 1)
