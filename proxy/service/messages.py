"""`POST /v1/messages/count_tokens`: the provider's exact count, or the proxy's own.

Claude Code asks for a count while it compacts its own conversation. Anthropic answers it; an
Anthropic-compatible provider often has no such endpoint (a 404, or a 405 where its router
knows the path for another method). The request is forwarded first, body untouched; when the
provider lacks the endpoint, the proxy answers `{"input_tokens": N}` itself: its count of the
body (the approximate counter for Claude models, erring high) times the tenant's calibration
for the model, learned from the provider's usage. The header `x-compaction-proxy-count:
estimated` says the number is the proxy's. Any other answer of the provider (its count, its
refusal of a bad body) goes back as it came.

The same endpoint calibrates the proxy before its first answer (`calibrated`): a Claude
model's count is the approximate counter's until a response's usage corrects it, and it
errs high (1.1-1.7x). On a tenant's first request for the model that the estimate would
compact, the proxy asks the provider's count of the request as the client sent it and
takes its calibration from that: uncorrected, aider's files at 0.77 of the usable input
read as 1.18, and the first request was truncated. A provider without the endpoint, or
one that fails, leaves the estimate as it was.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Final

from proxy.adapters.upstream import Upstream, UpstreamRequest
from proxy.core import jsoncodec
from proxy.core.calibration import updated_calibration
from proxy.core.headers import upstream_request_headers
from proxy.core.request import parse_messages_request
from proxy.core.room import in_room
from proxy.observability.metrics import Metrics
from proxy.service.access import Access, Stopwatch
from proxy.service.memory import Memory
from proxy.service.replies import Incoming, Reply, buffered
from proxy.service.turns import Turn, Turns, credentials_of

COUNTED_FIELDS: Final = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking"}
)
"""The fields of a Messages body that count_tokens takes (it refuses the others)."""
LACKING = frozenset({404, 405})
"""A provider's answers that say it has no count_tokens endpoint."""
COUNT_HEADER = "x-compaction-proxy-count"


class TokenCounts:
    """Answers count_tokens requests: forwarded, or counted by the proxy."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        turns: Turns,
        memory: Memory,
        api_key: str | None,
        metrics: Metrics,
    ) -> None:
        self._upstream = upstream
        self._turns = turns
        self._memory = memory
        self._api_key = api_key
        self._metrics = metrics
        self._uncounted: set[str | None] = set()
        """Models whose provider said it has no count_tokens: not asked again."""

    async def answer(self, incoming: Incoming, raw: bytes) -> Reply:
        """The provider's answer to the count, or the proxy's when it lacks the endpoint.
        Raises AuthenticationError (a key `auth.keys` does not list) before anything is
        sent, and InvalidRequestError for a body the proxy must count but cannot read."""
        watch = Stopwatch(self._metrics)
        access = Access(action="passthrough", method=incoming.method, path=incoming.path)
        try:
            tenant = self._turns.tenant(credentials_of(incoming))
            access = replace(access, tenant=tenant)
            headers = upstream_request_headers(
                incoming.headers, api_key=self._api_key, identity_encoding=True, anthropic=True
            )
            request = UpstreamRequest("POST", incoming.path, incoming.query, headers, raw)
            reply = await watch.body(buffered(await watch.headers(self._upstream.send(request))))
            if reply.status in LACKING:
                access = replace(access, action="count_tokens")
                reply = await self._counted(raw, tenant)
        except BaseException as exc:
            watch.failed(access, exc)
            raise
        return watch.relay(reply, access)

    async def calibrated(self, turn: Turn) -> Turn:
        """`turn` calibrated by the provider's count of its request, where its count is an
        estimate no answer has corrected yet (`Turn.estimated`) and the estimate is at the
        trigger; `turn` itself otherwise, and when the provider cannot count it."""
        if not turn.estimated or not turn.anthropic or turn.model in self._uncounted:
            return turn
        estimate = turn.tokens(turn.request.messages)
        if turn.budget.pressure(estimate) < in_room(turn.policy.compression_trigger, turn.fixed):
            return turn
        try:
            sent = jsoncodec.loads(turn.request.raw)
            body = {k: v for k, v in sent.items() if k in COUNTED_FIELDS}
            headers = upstream_request_headers(
                turn.incoming.headers, api_key=self._api_key, identity_encoding=True, anthropic=True
            )
            path = turn.incoming.path.rstrip("/") + "/count_tokens"
            request = UpstreamRequest("POST", path, "", headers, jsoncodec.dumps(body))
            response = await self._upstream.send(request)
            try:
                raw = await response.read()
            finally:
                response.close()
            if response.status in LACKING:
                self._uncounted.add(turn.model)  # asked once: it has no such endpoint
            counted = jsoncodec.loads(raw) if response.status == 200 else None
        except Exception:  # a count is a refinement: without it the estimate stands
            return turn
        reported = counted.get("input_tokens") if isinstance(counted, dict) else None
        if not isinstance(reported, int):
            return turn
        factor = updated_calibration(None, estimated=estimate, reported=reported)
        if factor is None:
            return turn
        await self._memory.set_calibration(turn.tenant, turn.model, factor)
        return replace(turn, budget=replace(turn.budget, calibration=factor), estimated=False)

    async def _counted(self, raw: bytes, tenant: str) -> Reply:
        """`{"input_tokens": N}` by the proxy's calibrated count of the body."""
        request = parse_messages_request(raw)
        counter = self._turns.counter(request.model)
        tokens = counter.messages(request.messages) + counter.tools(request.body)
        calibration = await self._memory.calibration(tenant, request.model) or 1.0
        body = jsoncodec.dumps({"input_tokens": math.ceil(round(tokens * calibration, 6))})
        headers = [("content-type", "application/json"), (COUNT_HEADER, "estimated")]
        return Reply(200, headers, body)
