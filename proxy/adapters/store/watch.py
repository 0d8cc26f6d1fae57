"""How long a call to Redis may wait: silence from Redis, measured in time the proxy could hear.

A hung Redis answers nobody, and each call to it should end `timeout_s` after it began. A
proxy too busy to read the replies (a burst of requests on one event loop, each counting its
tokens) hears nothing for as long, with Redis answering at once: its calls must wait on
rather than lose what they were storing. Two things tell them apart:

- `Call.heard` (in `nodes.py`): Redis answering other calls meanwhile is not silence;
- `LoopClock`: wall time, less the time the event loop spent behind on other work. At the
  start of a burst nobody has been answered yet (every call is still connecting), and a lap
  of the loop can take longer than the timeout: by wall time every call would have timed
  out, by this clock only the laps' first moments have passed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# A call waits past `timeout_s` only while Redis answers other calls (the proxy is busy, not
# Redis), and never past this many times `timeout_s` of the clock.
PATIENCE = 5
# The clock ticks this many times per `timeout_s` while calls are in flight; a tick that
# comes late is credited at most two ticks.
_TICKS_PER_TIMEOUT = 20


class LoopClock:
    """Time the event loop was free: it ticks while calls are in flight, and credits each
    tick at most two tick lengths however late it came.

    On an idle loop it keeps wall time (a tick comes on time). On a loop busy with other
    work, a tick comes a lap late and the lap counts as two ticks. Between bursts it does not
    tick (an idle proxy is not woken), and the gap counts in full: no call was waiting.
    """

    def __init__(self, timeout_s: float) -> None:
        self._tick = timeout_s / _TICKS_PER_TIMEOUT
        self._loop: asyncio.AbstractEventLoop | None = None
        self._credited = 0.0
        self._last = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._active = 0

    def now(self) -> float:
        loop = self._running()
        return self._credited + min(loop.time() - self._last, 2 * self._tick)

    def begin(self) -> None:
        """A call is in flight: tick until none is."""
        loop = self._running()
        self._active += 1
        if self._handle is None:
            now = loop.time()
            self._credited += now - self._last
            self._last = now
            self._handle = loop.call_at(now + self._tick, self._on_tick)

    def end(self) -> None:
        self._active -= 1

    def _running(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A store outlives one event loop only in tests (and the CLI's commands); a new
            # loop's clock starts where the old one left off, never going back.
            self._loop = loop
            self._handle = None
            self._active = 0
            self._credited += 2 * self._tick
            self._last = loop.time()
        return loop

    def _on_tick(self) -> None:
        loop = self._running()
        now = loop.time()
        self._credited += min(now - self._last, 2 * self._tick)
        self._last = now
        self._handle = loop.call_at(now + self._tick, self._on_tick) if self._active else None


class Watch:
    """Ends a call to Redis (expires its `deadline`) once Redis has answered no call for
    `timeout_s` of `clock` since the call began, or at `PATIENCE` times `timeout_s` of it
    in any case."""

    def __init__(
        self,
        deadline: asyncio.Timeout,
        timeout_s: float,
        clock: LoopClock,
        answered: Callable[[], float],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = deadline
        self._timeout_s = timeout_s
        self._clock = clock
        self._answered = answered
        clock.begin()
        self._began = clock.now()
        self._handle = self._loop.call_later(timeout_s, self._check)

    def _check(self) -> None:
        now = self._clock.now()
        heard = max(self._began, self._answered())
        last_chance = self._began + self._timeout_s * PATIENCE
        if now - heard >= self._timeout_s or now >= last_chance:
            self._deadline.reschedule(self._loop.time())
            return
        # The clock runs no faster than wall time: what it still lacks is a wall-time lower
        # bound on when the call can end.
        left = min(heard + self._timeout_s, last_chance) - now
        self._handle = self._loop.call_later(left, self._check)

    def cancel(self) -> None:
        self._handle.cancel()
        self._clock.end()
