"""Summaries written off the request path (`service/preparer.py`), over the real parts: the
embedded store (Redis where the store going away is the point), the summarizer calling the
mock provider through `AsgiUpstream` (see test_compactor.py for the parts).

With the policy below a conversation of `history(n)` passes the preparation level (0.7) at
n = 15 and the trigger (0.85) at n = 18; a summary request is visible in
`mock.summary_requests`, a job being run in `preparer.running`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from proxy.core.breaker import Breaker
from proxy.core.plan import NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.prepared import note_key
from proxy.core.session import known_notes
from proxy.core.summary import FOLD_IN
from proxy.mock_upstream import MockUpstream, Reply
from proxy.service import preparer as preparer_module
from proxy.service.outcome import unchanged
from proxy.service.turns import Turn
from tests.service.outage import OUTAGES, Outage, outage_of
from tests.service.test_compactor import (
    SUMMARY_FAILS,
    WINDOW,
    Parts,
    build,
    fallback_of,
    history,
    tool_session,
    turn_of,
)

POLICY = ContextPolicy(context_window=WINDOW, keep_recent=2, output_reserved=500, cooldown_turns=0)
PREPARED = 15
"""Rounds past the preparation level, under the trigger."""
AT_TRIGGER = 18


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    async for found in build(policy=POLICY):
        yield found


def running(parts: Parts) -> int:
    """Jobs being run now (the preparer's own table: a job is nobody's request)."""
    return len(parts.compactor.preparer._running)


def forced(turn: Turn) -> NeedsSummary:
    """The plan a compaction of `turn` would make now."""
    situation = Situation(
        unchanged(turn).messages,
        turn.request.body,
        turn.policy,
        turn.budget,
        force=True,
        notes=known_notes(turn.checkpoint),
    )
    need = plan_compaction(situation, turn.counter)
    assert isinstance(need, NeedsSummary)
    return need


def span_keys(turn: Turn) -> list[str]:
    """The keys of the span a compaction of `turn` would summarize now."""
    return forced(turn).keys


async def prepared(
    parts: Parts, rounds: int = PREPARED, *, session: str = "s1", topic: str = "question"
) -> Turn:
    """`history(rounds)` of `session` prepared, the job finished."""
    turn = await turn_of(parts, history(rounds, topic=topic), session=session)
    parts.compactor.preparer.prepare(turn, unchanged(turn))
    await parts.compactor.preparer.settle()
    return turn


# --- preparing -------------------------------------------------------------------------------


async def test_a_summary_prepared_here_is_found_by_another_replica(parts: Parts) -> None:
    turn = await prepared(parts)
    assert len(parts.mock.summary_requests) == 1
    assert parts.counted("summaries_prepared") == 1
    keys = span_keys(turn)
    elsewhere = parts.other_replica().preparer
    found = await elsewhere.find(turn.tenant, turn.session, keys)
    assert list(found) == [keys[-1]]  # the whole span's summary, from the store
    assert found[keys[-1]].text


async def test_under_the_preparation_level_nothing_is_prepared(parts: Parts) -> None:
    turn = await turn_of(parts, history(10))
    parts.compactor.preparer.prepare(turn, unchanged(turn))
    assert running(parts) == 0


async def test_one_job_per_conversation_at_a_time(parts: Parts) -> None:
    turn = await turn_of(parts, history(PREPARED))
    grown = await turn_of(parts, history(PREPARED + 2))
    preparer = parts.compactor.preparer
    preparer.prepare(turn, unchanged(turn))
    preparer.prepare(grown, unchanged(grown))  # still being written: not a second job
    assert running(parts) == 1
    await preparer.settle()
    assert len(parts.mock.summary_requests) == 1


async def test_a_conversation_is_checked_again_only_once_it_has_grown(parts: Parts) -> None:
    """A check plans a whole compaction: not on every request, only after growth of
    `RECHECK_SHARE` of the usable input (or a shrink, or a new checkpoint)."""
    preparer = parts.compactor.preparer
    turn = await prepared(parts)
    preparer.prepare(turn, unchanged(turn))
    assert running(parts) == 0  # the same prompt: not checked again
    outcome = unchanged(turn)
    grown = replace(outcome, tokens_after=outcome.tokens_after + turn.budget.tokens_at(0.06))
    preparer.prepare(turn, grown)
    assert running(parts) == 1
    await preparer.settle()
    shrunk = replace(outcome, tokens_after=outcome.tokens_after - 10)
    preparer.prepare(turn, shrunk)  # an edited or rewound conversation: checked again
    assert running(parts) == 1
    await preparer.settle()
    # Its summary covers the span but the newest few messages: not worth another.
    assert len(parts.mock.summary_requests) == 1


async def test_a_conversation_that_needs_no_summary_is_not_prepared(parts: Parts) -> None:
    """Clearing old tool results is enough: no summary is written ahead for it."""
    turn = await turn_of(parts, tool_session(9))
    assert turn.policy.preparation_level <= turn.budget.pressure(unchanged(turn).tokens_after)
    parts.compactor.preparer.prepare(turn, unchanged(turn))
    assert running(parts) == 1  # checked...
    await parts.compactor.preparer.settle()
    assert parts.mock.summary_requests == []  # ...and nothing to write


async def test_a_span_another_replica_is_summarizing_is_left_to_it(parts: Parts) -> None:
    turn = await turn_of(parts, history(PREPARED))
    lock = f"summary:{span_keys(turn)[-1]}"
    token = await parts.memory.acquire(turn.tenant, lock, 30.0)
    assert token is not None
    parts.compactor.preparer.prepare(turn, unchanged(turn))
    await parts.compactor.preparer.settle()
    assert parts.mock.summary_requests == []  # the compaction finds theirs in the store
    await parts.memory.release(turn.tenant, lock, token)


async def test_jobs_past_their_bound_are_skipped_not_queued() -> None:
    """`max_concurrent * WAITING_PER_SLOT` jobs at once: the next conversation is asked
    again by its next request rather than queued without bound."""
    slow = MockUpstream(summary_latency_s=5.0)
    async for parts in build(policy=POLICY, max_concurrent=1, mock=slow):
        preparer = parts.compactor.preparer
        bound = preparer_module.WAITING_PER_SLOT
        turns = [
            await turn_of(parts, history(PREPARED, topic=f"topic{n}"), session=f"s{n}")
            for n in range(bound + 1)
        ]
        for turn in turns:
            preparer.prepare(turn, unchanged(turn))
        assert running(parts) == bound
        for _ in range(500):
            if slow.summary_requests:
                break  # the first is being written
            await asyncio.sleep(0.01)
        await asyncio.wait_for(preparer.aclose(), 1.0)  # abandoned, not awaited
        assert running(parts) == 0


# --- folding what a truncation dropped --------------------------------------------------------


async def test_what_a_truncation_dropped_is_summarized_for_the_next_compaction(
    parts: Parts,
) -> None:
    turn = await turn_of(parts, history(AT_TRIGGER))
    outcome = await parts.compactor.before_forward(turn)
    assert outcome.strategy == "truncate"  # nothing prepared: truncated at once
    await parts.compactor.preparer.settle()
    assert len(parts.mock.summary_requests) == 1
    assert (
        parts.metrics.registry.get_sample_value(
            "compaction_proxy_summaries_prepared_total", {"kind": "fold"}
        )
        == 1
    )


async def test_a_drop_is_folded_once_across_replicas(parts: Parts) -> None:
    turn = await turn_of(parts, history(AT_TRIGGER))
    result = fallback_of(turn)
    parts.compactor.preparer.fold(turn, result)
    await parts.compactor.preparer.settle()
    other = parts.other_replica().preparer
    other.fold(turn, result)
    await other.settle()
    assert len(parts.mock.summary_requests) == 1  # written meanwhile: found, not rewritten


async def test_only_a_summarizing_policy_folds_and_only_what_was_dropped(parts: Parts) -> None:
    turn = await turn_of(parts, history(AT_TRIGGER))
    result = fallback_of(turn)
    preparer = parts.compactor.preparer
    truncating = replace(turn, policy=turn.policy.replace(strategy="truncate"))
    preparer.fold(truncating, result)
    preparer.fold(turn, replace(result, dropped=None))
    assert running(parts) == 0


async def test_a_drop_while_a_job_runs_is_folded_after_it_the_latest_one(parts: Parts) -> None:
    preparer = parts.compactor.preparer
    turn = await turn_of(parts, history(PREPARED))
    first = await turn_of(parts, history(AT_TRIGGER))
    latest = await turn_of(parts, history(AT_TRIGGER + 1))
    preparer.prepare(turn, unchanged(turn))
    preparer.fold(first, fallback_of(first))
    preparer.fold(latest, fallback_of(latest))  # replaces the one waiting
    await preparer.settle()
    fold = parts.metrics.registry.get_sample_value(
        "compaction_proxy_summaries_prepared_total", {"kind": "fold"}
    )
    assert fold == 1
    assert parts.counted("summaries_prepared") == 2


async def test_a_span_prepared_while_the_compaction_truncated_is_not_summarized_again(
    parts: Parts,
) -> None:
    """The compaction at the trigger found nothing (the summary was still being written) and
    truncated; when its drop is folded the summary of the span's start is there, and only
    the rest is summarized, over it."""
    parts.mock.summary_latency_s = 0.5  # still being written when the compaction looks
    preparer = parts.compactor.preparer
    early = await turn_of(parts, history(PREPARED))
    preparer.prepare(early, unchanged(early))
    outcome = await parts.compactor.before_forward(await turn_of(parts, history(AT_TRIGGER)))
    assert outcome.strategy == "truncate"
    await preparer.settle()
    requests = parts.mock.summary_requests
    assert len(requests) == 2
    # Asked as the conversation's prefix (which the provider has cached): the span's start is
    # in it as the conversation, and the prepared summary of it is folded in, not rewritten.
    key = span_keys(early)[-1]
    start = (await preparer.find(early.tenant, early.session, [key]))[key].text
    closing = requests[1].json()["messages"][-1]["content"]
    assert early.request.messages[1] in requests[1].json()["messages"]
    assert closing.partition(FOLD_IN)[2] == start


async def test_a_span_prepared_but_for_a_few_messages_stands_for_the_whole_drop(
    parts: Parts,
) -> None:
    """As above, but the prepared summary lacks only the last round: too little to be worth
    a summary, so it stands for the whole drop (the ledger keeps what the user said)."""
    parts.mock.summary_latency_s = 0.5  # still being written when the compaction looks
    preparer = parts.compactor.preparer
    early = await turn_of(parts, history(AT_TRIGGER - 1))
    preparer.prepare(early, unchanged(early))
    outcome = await parts.compactor.before_forward(await turn_of(parts, history(AT_TRIGGER)))
    assert outcome.strategy == "truncate"
    await preparer.settle()
    assert len(parts.mock.summary_requests) == 1
    fold = parts.metrics.registry.get_sample_value(
        "compaction_proxy_summaries_prepared_total", {"kind": "fold"}
    )
    assert fold == 1


async def test_after_a_truncation_the_next_summary_rolls_over_what_it_dropped(
    parts: Parts,
) -> None:
    """The summary of what the truncation dropped is the earlier summary the next one
    folds in, not the bare "[N earlier messages omitted]" marker the checkpoint holds."""
    first = await turn_of(parts, history(AT_TRIGGER))
    assert (await parts.compactor.before_forward(first)).strategy == "truncate"
    preparer = parts.compactor.preparer
    await preparer.settle()
    grown = [*history(AT_TRIGGER)[:-1], *history(14, topic="more")[1:]]  # prepared again
    turn = await turn_of(parts, grown)
    assert turn.checkpoint is not None
    need = forced(turn)
    assert need.anchor is not None
    assert turn.session is not None
    fold = note_key(need.anchor, turn.session)
    dropped = (await preparer.find(turn.tenant, turn.session, [fold]))[fold].text
    preparer.prepare(turn, unchanged(turn))
    await preparer.settle()
    assert len(parts.mock.summary_requests) == 2
    assert json.dumps(dropped)[1:-1] in parts.mock.summary_requests[-1].body.decode()


# --- the store, and the summaries kept in this process ----------------------------------------


async def test_a_summary_kept_here_is_found_before_the_store_is_asked(parts: Parts) -> None:
    turn = await prepared(parts)
    key = span_keys(turn)[-1]
    await parts.memory.store.put_summary(
        turn.tenant, turn.session or "", key, "written by another version"
    )
    found = await parts.compactor.preparer.find(turn.tenant, turn.session, [key])
    assert found[key].text != "written by another version"


async def test_a_summary_stored_before_its_input_was_recorded_is_found(parts: Parts) -> None:
    older = json.dumps({"text": "- the summary", "model": "m", "tokens": 90})
    await parts.memory.store.put_summary("t", "s", "k", older)
    found = (await parts.compactor.preparer.find("t", "s", ["k"]))["k"]
    assert (found.text, found.tokens, found.input_tokens, found.cached_tokens) == (
        "- the summary", 90, 0, 0,
    )  # fmt: skip


async def test_a_summary_s_input_and_cached_tokens_are_stored_with_it(parts: Parts) -> None:
    turn = await prepared(parts)
    key = span_keys(turn)[-1]
    found = (await parts.other_replica().preparer.find(turn.tenant, turn.session, [key]))[key]
    [usage] = parts.mock.summary_usage
    assert (found.input_tokens, found.cached_tokens) == (usage.prompt_tokens, usage.cached_tokens)
    assert found.input_tokens > 0


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        json.dumps(["a list"]),
        json.dumps({"model": "m"}),
        json.dumps({"text": "t", "tokens": "many"}),
    ],
)
async def test_a_stored_summary_another_version_wrote_is_ignored(parts: Parts, raw: str) -> None:
    await parts.memory.store.put_summary("t", "s", "k", raw)
    assert await parts.compactor.preparer.find("t", "s", ["k"]) == {}


@pytest.fixture(params=OUTAGES)
async def outage(request: pytest.FixtureRequest) -> AsyncIterator[Outage]:
    async with outage_of(request.param, request, timeout_s=0.3) as made:
        yield made


async def test_with_the_store_down_summaries_are_kept_here_and_stored_when_it_is_back(
    outage: Outage,
) -> None:
    store = outage.store
    async for parts in build(policy=POLICY, store=store):
        preparer = parts.compactor.preparer
        outage.stop()
        turn = await turn_of(parts, history(PREPARED))
        assert parts.memory.down
        preparer.prepare(turn, unchanged(turn))
        assert running(parts) == 0  # without the store: no summary ahead
        # What a truncation drops is summarized all the same, and kept here.
        at_trigger = await turn_of(parts, history(AT_TRIGGER))
        dropped = fallback_of(at_trigger)
        preparer.fold(at_trigger, dropped)
        await preparer.settle()
        assert len(parts.mock.summary_requests) == 1
        kept = await preparer.find(at_trigger.tenant, at_trigger.session, [dropped.covers or ""])
        assert list(kept) == [dropped.covers]
        # The next job tries to store it first; still down, it stays here.
        other = await turn_of(parts, history(AT_TRIGGER, topic="other"), session="s2")
        preparer.fold(other, fallback_of(other))
        await preparer.settle()
        outage.start()
        while parts.memory.down:
            await parts.memory.find_summaries("t", "s", ["k"])
            await asyncio.sleep(0.05)
        third = await turn_of(parts, history(AT_TRIGGER, topic="third"), session="s3")
        preparer.fold(third, fallback_of(third))
        await preparer.settle()
        stored = await store.find_summaries(
            at_trigger.tenant, at_trigger.session or "", [dropped.covers or ""]
        )
        assert list(stored) == [dropped.covers]


# --- what was used, what was wasted ------------------------------------------------------------


async def test_summaries_prepared_and_never_used_are_counted_wasted(parts: Parts) -> None:
    turn = await prepared(parts)
    preparer = parts.compactor.preparer
    preparer.settled(turn, used=False)  # compacted without it (say, by a hook's truncation)
    assert parts.counted("summaries_wasted") == 1
    preparer.settled(turn, used=True)
    assert parts.counted("summaries_used") == 1
    assert parts.counted("summaries_wasted") == 1  # nothing more was waiting
    sessionless = replace(turn, session=None)
    preparer.settled(sessionless, used=False)
    assert parts.counted("summaries_wasted") == 1


async def test_a_conversation_forgotten_with_summaries_waiting_counts_them_wasted(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preparer_module, "MAX_AWAITING", 1)
    await prepared(parts, session="a")
    await prepared(parts, session="b", topic="b")  # pushes a's out: never used while remembered
    assert parts.counted("summaries_wasted") == 1


async def test_a_conversation_forgotten_by_the_checks_is_checked_again(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table of last checks is bounded too: a conversation it dropped costs one more
    check (a plan), and finds its summary written already."""
    monkeypatch.setattr(preparer_module, "MAX_CHECKED", 1)
    a = await prepared(parts, session="a")
    await prepared(parts, session="b", topic="b")
    parts.compactor.preparer.prepare(a, unchanged(a))
    assert running(parts) == 1
    await parts.compactor.preparer.settle()
    assert len(parts.mock.summary_requests) == 2


# --- the breaker -------------------------------------------------------------------------------


async def test_a_failing_summarizer_opens_the_breaker_and_preparing_stops() -> None:
    async for parts in build(policy=POLICY, breaker=Breaker(threshold=1, cool_off_s=600.0)):
        parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
        preparer = parts.compactor.preparer
        await prepared(parts, session="a")
        assert not preparer.allows()
        assert "circuit open after 1 failed summaries" in (preparer.state() or "")
        turn = await turn_of(parts, history(PREPARED, topic="b"), session="b")
        preparer.prepare(turn, unchanged(turn))
        assert running(parts) == 0


async def test_a_job_waiting_for_a_slot_when_the_breaker_opens_is_skipped() -> None:
    async for parts in build(
        policy=POLICY,
        breaker=Breaker(threshold=1, cool_off_s=600.0),
        max_concurrent=1,
        mock=MockUpstream(summary_latency_s=0.1),
    ):
        parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
        preparer = parts.compactor.preparer
        for session in ("a", "b"):
            turn = await turn_of(parts, history(PREPARED, topic=session), session=session)
            preparer.prepare(turn, unchanged(turn))
        await preparer.settle()
        assert len(parts.mock.summary_requests) == 1
        assert parts.counted("summaries_skipped") == 1


async def test_a_summarizer_answering_again_closes_the_breaker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async for parts in build(policy=POLICY, breaker=Breaker(threshold=1, cool_off_s=0.05)):
        parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
        preparer = parts.compactor.preparer
        await prepared(parts, session="a")
        assert preparer.state() is not None
        await asyncio.sleep(0.06)
        assert preparer.state() is None  # cooled off: asked again
        caplog.set_level(logging.WARNING, logger="proxy.compaction")
        await prepared(parts, session="b")
        assert preparer.allows()
        assert "the summarizer answers again" in caplog.text


# --- jobs are nobody's request ----------------------------------------------------------------


async def test_a_job_that_raises_is_logged_and_counted_not_lost(
    parts: Parts, caplog: pytest.LogCaptureFixture
) -> None:
    async def defect() -> None:
        raise RuntimeError("a defect in a job")

    parts.compactor.preparer._start(("t", "s"), defect)
    await parts.compactor.preparer.settle()
    assert "a background summary failed" in caplog.text
    assert (
        parts.metrics.registry.get_sample_value(
            "compaction_proxy_background_task_failures_total", {"kind": "summary"}
        )
        == 1
    )


async def test_one_failed_summary_does_not_stop_the_next(parts: Parts) -> None:
    """Under the breaker's threshold a failure is counted, and summaries go on."""
    parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
    preparer = parts.compactor.preparer
    await prepared(parts, session="a")
    assert preparer.allows()
    assert preparer.state() is None
    await prepared(parts, session="b", topic="b")
    assert parts.counted("summaries_prepared") == 1


async def test_jobs_storing_what_the_outage_kept_at_once_each_store_it_once(
    outage: Outage,
) -> None:
    """Summaries written while the store was down wait here; the jobs that start once it is
    back store them first, several at once: none may fail for another having stored it (a
    replica's log showed 'a background summary failed: KeyError' after a Redis restart)."""
    store = outage.store
    async for parts in build(policy=POLICY, store=store):
        preparer = parts.compactor.preparer
        outage.stop()
        kept = []
        for topic in ("one", "two", "three", "four", "five", "six"):
            turn = await turn_of(parts, history(AT_TRIGGER, topic=topic), session=topic)
            dropped = fallback_of(turn)
            preparer.fold(turn, dropped)
            kept.append((turn.tenant, turn.session or "", dropped.covers or ""))
        await preparer.settle()
        outage.start()
        while parts.memory.down:
            await parts.memory.find_summaries("t", "s", ["k"])
            await asyncio.sleep(0.05)
        for topic in ("seven", "eight", "nine", "ten"):
            turn = await turn_of(parts, history(AT_TRIGGER, topic=topic), session=topic)
            preparer.fold(turn, fallback_of(turn))
        await preparer.settle()
        assert parts.counted("background_task_failures") == 0
        for tenant, session, key in kept:
            assert list(await store.find_summaries(tenant, session, [key])) == [key]
