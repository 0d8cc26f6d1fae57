"""An uncounted view: counted once, on the event loop while its request is answered, or
where it is needed; a count that fails fails the request, not the loop."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from proxy.service.outcome import Outcome, Uncounted

MESSAGES = [{"role": "user", "content": "hi"}]


def _outcome(tokens: int = 10) -> Outcome:
    return Outcome(MESSAGES, tokens, tokens, 0.1, None)


def test_a_view_is_counted_once_and_its_steps_apply_to_the_count() -> None:
    calls: list[int] = []

    def count() -> Outcome:
        calls.append(1)
        return _outcome()

    view = Uncounted(MESSAGES, count).then(lambda outcome: replace(outcome, sent=12))
    assert view.forwarded == MESSAGES
    assert view.done is None
    assert view.counted().sent == 12
    assert view.counted() is view.done
    assert calls == [1]


async def test_a_view_is_counted_on_the_loop_once_the_request_has_gone_out() -> None:
    view = Uncounted(MESSAGES, _outcome)
    view.count_soon()
    assert view.done is None  # not before this task waits
    await asyncio.sleep(0)
    assert view.done is None  # nor while the HTTP client's own task writes the request
    await asyncio.sleep(0)
    assert view.done == _outcome()


async def test_a_count_that_fails_on_the_loop_fails_where_it_is_needed() -> None:
    def count() -> Outcome:
        raise ValueError("no count")

    view = Uncounted(MESSAGES, count)
    view.count_soon()
    for _ in range(3):
        await asyncio.sleep(0)
    assert view.done is None
    with pytest.raises(ValueError, match="no count"):
        view.counted()
