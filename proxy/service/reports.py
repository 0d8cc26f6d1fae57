"""What a turn did, as the operator sees it: a point on the session's timeline and the
context report of what was forwarded.

Made after the answer has gone out (counting by category walks the whole forwarded
request), and stored best effort like everything else.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from proxy.core.breakdown import breakdown
from proxy.core.digests import digest
from proxy.core.session import ContextReport, TurnPoint
from proxy.service.compactor import Outcome
from proxy.service.turns import Turn

# Sessions whose last stored request shape (the body without messages) is remembered, so
# that the shape is written only when it changes (least recently used dropped first).
MAX_SHAPES = 10_000


def turn_point(turn: Turn, outcome: Outcome) -> TurnPoint:
    """The turn on the session's timeline, in calibrated (provider) tokens."""
    budget = turn.budget
    sent = turn.tokens(turn.request.messages)
    return TurnPoint(
        turn=turn.state.turns,
        at=time.time(),
        pressure=round(budget.pressure(outcome.tokens_after), 4),
        tokens_before=budget.estimate(sent),
        tokens_after=budget.estimate(outcome.tokens_after),
        action=outcome.strategy or "none",
    )


def context_report(turn: Turn, outcome: Outcome) -> ContextReport:
    """Where the forwarded request's tokens went (our raw count, by category)."""
    budget, policy = turn.budget, turn.policy
    counted = breakdown(outcome.forwarded, turn.request.body, turn.counter)
    return ContextReport(
        window=budget.context_window,
        output_reserved=budget.output_reserve,
        pressure=round(budget.pressure(outcome.tokens_after), 4),
        trigger=policy.compression_trigger,
        target=policy.compaction_target,
        calibration=budget.calibration,
        tokens=counted.total,
        breakdown=counted.as_dict(),
    )


class Shapes:
    """The last request shape stored per session, to write it only when it changed."""

    def __init__(self, capacity: int = MAX_SHAPES) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, str], bytes] = OrderedDict()

    def changed(self, turn: Turn) -> dict[str, Any] | None:
        """The turn's body without its messages when it differs from the last one stored
        for its session; None when it is the same (or there is no session)."""
        if turn.session is None:
            return None
        shape = {k: v for k, v in turn.request.body.items() if k != "messages"}
        key, found = (turn.tenant, turn.session), digest(shape)
        if self._seen.get(key) == found:
            self._seen.move_to_end(key)
            return None
        self._seen[key] = found
        self._seen.move_to_end(key)
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return shape
