"""Whether the upstream answers: probed now and then in the background, for `/readyz`'s details.

What it is not: a condition of readiness. Every replica shares one upstream, so a provider
that blips would take every replica out of the load balancer at once, turning a provider
outage into a proxy outage; and a ready proxy in front of a failing provider still does its
job, passing the provider's answers and errors (or its own 502/504) through to the client.
So the outcome is only shown, in `/readyz`'s `details`, for the operator to read.

What it costs: at most one `GET {base_url}/models` every `interval_s` per replica, however
often `/readyz` is asked, with a short time-out, and never waited on by `/readyz` itself: a
readiness probe must answer in well under a second, and a blackholed upstream would hold it
for the whole time-out. Any HTTP answer (401 without a key included) proves the upstream is
reachable; only a 5xx, a refused or dropped connection, or silence counts against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from proxy.adapters.upstream import Upstream, UpstreamRequest
from proxy.core.headers import upstream_request_headers
from proxy.errors import UpstreamTimeoutError, UpstreamUnreachableError

PROBE_INTERVAL_S: Final = 15.0
PROBE_TIMEOUT_S: Final = 3.0
"""Seconds a probe waits for the upstream's answer: a provider slower than this to list its
models is, for the operator, not answering."""


class Reachability:
    """The last outcome of probing the upstream, and the probe that renews it."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        api_key: str | None,
        interval_s: float = PROBE_INTERVAL_S,
        timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._upstream = upstream
        self._headers = upstream_request_headers([], api_key=api_key)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._started: float | None = None
        self._problem: tuple[str, float] | None = None
        """What went wrong at the last probe, and when it ended; None when it was answered."""
        self._task: asyncio.Task[None] | None = None

    def renew(self) -> None:
        """Start a probe in the background, unless one runs or the last began under
        `interval_s` ago."""
        now = self._clock()
        if self._task is not None and not self._task.done():
            return
        if self._started is not None and now - self._started < self._interval_s:
            return
        self._started = now
        self._task = asyncio.create_task(self._probe())

    def problem(self) -> str | None:
        """Why the upstream did not answer the last probe, and how long ago; None when it
        answered, or before the first probe has ended."""
        if self._problem is None:
            return None
        reason, at = self._problem
        return f"{reason} (checked {self._clock() - at:.0f} s ago; the proxy still serves)"

    async def settle(self) -> None:
        """Wait for the probe under way, if any, to end."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def aclose(self) -> None:
        """Abandon a probe under way."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _probe(self) -> None:
        reason = await self._reason()
        self._problem = None if reason is None else (reason, self._clock())

    async def _reason(self) -> str | None:
        """Why the upstream failed to answer `GET models`, or None when it answered."""
        request = UpstreamRequest("GET", "models", "", self._headers)
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._upstream.send(request)
        except TimeoutError:
            where = self._upstream.shown_url
            return f"the upstream at {where} did not answer in {self._timeout_s:g} s"
        except (UpstreamUnreachableError, UpstreamTimeoutError) as exc:
            return exc.message
        except RuntimeError:  # closed while the probe started: shutting down
            return None
        response.close()  # the listing itself is not needed: that it came is the answer
        if response.status >= 500:
            return f"the upstream at {self._upstream.shown_url} answered {response.status}"
        return None
