"""What a turn did, as the operator sees it: a point on the session's timeline and the
context report of what was forwarded.

Made after the answer has gone out and stored best effort like everything else, but still
on the event loop that serves the next request: nothing here walks the whole history. The
context report stored per turn carries the numbers only; its breakdown by category (which
counts every forwarded message) is made when an operator asks for it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from proxy.core.breakdown import breakdown
from proxy.core.digests import digest
from proxy.core.session import Checkpoint, ContextReport, TurnPoint
from proxy.service.outcome import Outcome
from proxy.service.turns import Turn

# Sessions whose last stored request shape (the body without messages) is remembered, so
# that the shape is written only when it changes (least recently used dropped first).
MAX_SHAPES = 10_000


def turn_point(turn: Turn, outcome: Outcome, sent: int, recalls: int = 0) -> TurnPoint:
    """The turn on the session's timeline, in calibrated (provider) tokens; `sent` is our
    raw count of the client's request (see `SentTokens`); `recalls`, the `context_recall`
    calls the proxy answered for it."""
    budget = turn.budget
    return TurnPoint(
        turn=turn.state.turns,
        at=time.time(),
        pressure=round(budget.pressure(outcome.tokens_after), 4),
        tokens_before=budget.estimate(sent),
        tokens_after=budget.estimate(outcome.tokens_after),
        action=outcome.strategy or "none",
        recalls=recalls,
    )


def context_numbers(turn: Turn, outcome: Outcome) -> ContextReport:
    """The forwarded request against its window, without the breakdown by category."""
    budget, policy = turn.budget, turn.policy
    return ContextReport(
        window=budget.context_window,
        output_reserved=budget.output_reserve,
        pressure=round(budget.pressure(outcome.tokens_after), 4),
        trigger=policy.compression_trigger,
        target=policy.compaction_target,
        calibration=budget.calibration,
        tokens=outcome.tokens_after,
        breakdown=None,
        working_set=turn.working_tokens,
    )


def context_report(turn: Turn, outcome: Outcome) -> ContextReport:
    """Where the forwarded request's tokens went (our raw count, by category)."""
    counted = breakdown(outcome.forwarded, turn.request.body, turn.counter)
    numbers = context_numbers(turn, outcome)
    return replace(numbers, tokens=counted.total, breakdown=counted.as_dict())


class SentTokens:
    """Our count of what the client sent, without counting its whole history each turn.

    With no checkpoint the forwarded view is the request, already counted. With one, the
    request is the view with the checkpoint's messages R swapped back for the k original
    messages they replaced; those k are counted once per checkpoint and remembered (least
    recently used dropped first).
    """

    def __init__(self, capacity: int = MAX_SHAPES) -> None:
        self._capacity = capacity
        self._covered: OrderedDict[tuple[str, str], int] = OrderedDict()

    def of(self, turn: Turn, checkpoint: Checkpoint | None, view_tokens: int) -> int:
        """The client's request of `turn`, whose view with `checkpoint` counts
        `view_tokens` (tools included)."""
        if checkpoint is None:
            return view_tokens
        key = (turn.tenant, checkpoint.prefix_hash)
        covered = self._covered.get(key)
        if covered is None:
            covered = sum(turn.counter.message(m) for m in turn.body[: checkpoint.covered])
            self._covered[key] = covered
            if len(self._covered) > self._capacity:
                self._covered.popitem(last=False)
        else:
            self._covered.move_to_end(key)
        frozen = sum(turn.counter.message(m) for m in checkpoint.messages)
        return view_tokens - frozen + covered


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
