"""What a turn leaves for the operator (`service/reports.py`), over the real parts: a turn read
by `Turns` from the embedded store, compacted by the real compactor where a checkpoint is
needed (see test_compactor.py for the parts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from proxy.core import jsoncodec
from proxy.core.request import parse_chat_request
from proxy.service.outcome import unchanged
from proxy.service.replies import Incoming
from proxy.service.reports import (
    SentTokens,
    Shapes,
    context_numbers,
    context_report,
    turn_point,
)
from proxy.service.turns import Turn
from tests.service.test_compactor import Parts, build, history, turn_of


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    async for found in build():
        yield found


async def checkpointed(parts: Parts, rounds: int = 10, *, session: str = "s1") -> Turn:
    """A turn that comes with a checkpoint: its conversation was compacted before."""
    compacted = await parts.compactor.compact_now(
        await turn_of(parts, history(rounds), session=session), None
    )
    assert compacted.checkpoint is not None
    turn = await turn_of(parts, history(rounds), session=session)
    assert turn.checkpoint == compacted.checkpoint
    return turn


async def test_a_turn_point_says_what_the_turn_did_in_provider_tokens(parts: Parts) -> None:
    turn = await turn_of(parts, history(4))
    turn = replace(turn, budget=replace(turn.budget, calibration=1.5))
    outcome = unchanged(turn)
    point = turn_point(turn, outcome, outcome.tokens_before + 100)
    assert point.action == "none"  # nothing compacted this turn
    assert point.tokens_before == turn.budget.estimate(outcome.tokens_before + 100)
    assert point.tokens_after == turn.budget.estimate(outcome.tokens_after)
    assert point.tokens_after > outcome.tokens_after  # calibrated: the provider counts more
    compacted = turn_point(turn, replace(outcome, strategy="summarize"), 0)
    assert compacted.action == "summarize"


async def test_the_stored_report_has_the_numbers_and_the_asked_one_the_breakdown(
    parts: Parts,
) -> None:
    """Per turn only the numbers are stored (a breakdown walks every message); the
    operator's report counts the forwarded view by category."""
    turn = await turn_of(parts, history(4))
    outcome = unchanged(turn)
    numbers = context_numbers(turn, outcome)
    assert numbers.breakdown is None
    assert numbers.tokens == outcome.tokens_after
    assert numbers.window == turn.budget.context_window
    report = context_report(turn, outcome)
    assert report.breakdown is not None
    assert report.breakdown["total"] == report.tokens == outcome.tokens_after
    assert replace(report, tokens=numbers.tokens, breakdown=None) == numbers


async def test_without_a_checkpoint_the_client_sent_what_is_forwarded(parts: Parts) -> None:
    turn = await turn_of(parts, history(4))
    assert SentTokens().of(turn, None, 1234) == 1234


async def test_with_a_checkpoint_the_client_request_is_counted_whole(parts: Parts) -> None:
    """The view forwards R for the first k messages: what the client sent is the view with
    the k originals swapped back, the same count as counting the request itself."""
    turn = await checkpointed(parts)
    assert turn.checkpoint is not None
    view = unchanged(turn).tokens_after
    whole = turn.tokens(turn.request.messages)
    assert view < whole
    sent = SentTokens()
    assert sent.of(turn, turn.checkpoint, view) == whole
    # The k originals were counted once for this checkpoint; the next turn reuses that.
    assert sent.of(turn, turn.checkpoint, view + 10) == whole + 10


async def test_the_counts_kept_per_checkpoint_are_bounded(parts: Parts) -> None:
    """Least recently used dropped first, so that a long-lived replica's memory stays flat;
    a dropped checkpoint's count is made again, the same."""
    one = await checkpointed(parts, session="one")
    two = await checkpointed(parts, 11, session="two")
    assert one.checkpoint is not None
    assert two.checkpoint is not None
    sent = SentTokens(capacity=1)
    first = sent.of(one, one.checkpoint, 100)
    sent.of(two, two.checkpoint, 100)
    assert len(sent._covered) == 1
    assert sent.of(one, one.checkpoint, 100) == first


def incoming_of(session: str | None) -> Incoming:
    headers = [("authorization", "Bearer k")]
    if session is not None:
        headers.append(("x-session-id", session))
    return Incoming("POST", "chat/completions", "", headers)


async def turn_with(parts: Parts, session: str | None = "s1", **shape: object) -> Turn:
    body = {"model": "mock-model", "messages": history(2), **shape}
    incoming = incoming_of(session)
    return await parts.turns.begin(incoming, parse_chat_request(jsoncodec.dumps(body)))


async def test_a_request_shape_is_stored_only_when_it_changes(parts: Parts) -> None:
    shapes = Shapes()
    first = await turn_with(parts, temperature=0.2)
    assert shapes.changed(first) == {"model": "mock-model", "temperature": 0.2}
    assert shapes.changed(await turn_with(parts, temperature=0.2)) is None  # same: no write
    assert shapes.changed(await turn_with(parts, temperature=0.7)) == {
        "model": "mock-model",
        "temperature": 0.7,
    }


async def test_a_turn_without_a_session_has_no_shape_to_store(parts: Parts) -> None:
    """Only instructions, no conversation and no header: there is no session to keep it."""
    body = {"model": "mock-model", "messages": [{"role": "system", "content": "rules"}]}
    turn = await parts.turns.begin(incoming_of(None), parse_chat_request(jsoncodec.dumps(body)))
    assert turn.session is None
    assert Shapes().changed(turn) is None


async def test_the_shapes_remembered_are_bounded(parts: Parts) -> None:
    """A forgotten session's shape is written again: at worst one extra write."""
    shapes = Shapes(capacity=1)
    a, b = await turn_with(parts, "a"), await turn_with(parts, "b")
    assert shapes.changed(a) is not None
    assert shapes.changed(b) is not None
    assert shapes.changed(b) is None
    assert shapes.changed(a) is not None  # a was dropped to keep b
