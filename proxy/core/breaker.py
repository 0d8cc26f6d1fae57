"""The summarizer's circuit breaker: stop asking a summary brain that keeps failing.

Every failed summary costs the request that waits for it up to `summary_brain.timeout_s`,
and a brain that is down fails every time. After `failures` failures in a row the breaker
opens: for `cool_off_s` no summary is asked and compaction uses its deterministic layers
(the ledger keeps what the user said). The first compaction after the cool-off tries the
brain again (half-open): a success closes the breaker, a failure opens it for another
cool-off.

Pure: the caller passes the time and keeps the returned value (each method returns the
next state, the value itself never changes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class Breaker:
    """Consecutive failures, and until when the breaker stays open (None: closed)."""

    threshold: int = 3
    cool_off_s: float = 60.0
    failures: int = 0
    open_until: float | None = None

    def state(self, now: float) -> State:
        if self.open_until is None:
            return "closed"
        return "open" if now < self.open_until else "half_open"

    def allows(self, now: float) -> bool:
        """Whether a summary may be asked now."""
        return self.state(now) != "open"

    def failed(self, now: float) -> Breaker:
        """The breaker after a failed summary at `now`."""
        failures = self.failures + 1
        if failures >= self.threshold:
            return replace(self, failures=failures, open_until=now + self.cool_off_s)
        return replace(self, failures=failures)

    def succeeded(self) -> Breaker:
        """The breaker after a summary that worked: closed, the count reset."""
        return replace(self, failures=0, open_until=None)
