"""`POST /v1/messages/count_tokens`: the provider's exact count, or the proxy's own.

Claude Code asks for a count while it compacts its own conversation. Anthropic answers it; an
Anthropic-compatible provider often has no such endpoint (a 404, or a 405 where its router
knows the path for another method). The request is forwarded first, body untouched; when the
provider lacks the endpoint, the proxy answers `{"input_tokens": N}` itself: its count of the
body (the approximate counter for Claude models, erring high) times the tenant's calibration
for the model, learned from the provider's usage. The header `x-compaction-proxy-count:
estimated` says the number is the proxy's. Any other answer of the provider (its count, its
refusal of a bad body) goes back as it came.
"""

from __future__ import annotations

import math
from dataclasses import replace

from proxy.adapters.upstream import Upstream, UpstreamRequest
from proxy.core import jsoncodec
from proxy.core.headers import upstream_request_headers
from proxy.core.request import parse_messages_request
from proxy.observability.metrics import Metrics
from proxy.service.access import Access, Stopwatch
from proxy.service.memory import Memory
from proxy.service.replies import Incoming, Reply, buffered
from proxy.service.turns import Turns, credentials_of

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

    async def _counted(self, raw: bytes, tenant: str) -> Reply:
        """`{"input_tokens": N}` by the proxy's calibrated count of the body."""
        request = parse_messages_request(raw)
        counter = self._turns.counter(request.model)
        tokens = counter.messages(request.messages) + counter.tools(request.body)
        calibration = await self._memory.calibration(tenant, request.model) or 1.0
        body = jsoncodec.dumps({"input_tokens": math.ceil(round(tokens * calibration, 6))})
        headers = [("content-type", "application/json"), (COUNT_HEADER, "estimated")]
        return Reply(200, headers, body)
