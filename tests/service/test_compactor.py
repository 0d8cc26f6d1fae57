"""The compactor, driven directly over the real parts in one process: the embedded store,
the preparer and the summarizer calling the mock provider through `AsgiUpstream`.

These are the paths a single client rarely takes: an explicit compaction whose summary fails,
whose breaker is open, whose prefix another replica is summarizing (it waits for that one's
checkpoint, or gives up and truncates), or that another request compacted between reading the
turn and taking the lock; a request in its turn cooldown that adopts a newer checkpoint; the
hooks' log lines; a compaction that changes only the head. And what the store returns that
would not land: a checkpoint of an old prefix found after an outage (issue 23), one whose
messages no longer pair with the request's, another replica's larger one of the same prefix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore, Store
from proxy.adapters.summarizer import Summarizer
from proxy.adapters.tokenizer import load_encoders
from proxy.core import hooks, jsoncodec
from proxy.core.breaker import Breaker
from proxy.core.messages import text
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.request import parse_chat_request
from proxy.core.session import Checkpoint, SessionState
from proxy.mock_upstream import MockUpstream, Reply
from proxy.observability.metrics import Metrics
from proxy.service import compactor as compactor_module
from proxy.service.compactor import Compactor
from proxy.service.memory import Memory
from proxy.service.outcome import unchanged
from proxy.service.preparer import Preparer
from proxy.service.replies import Incoming
from proxy.service.turns import Turn, Turns
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.service.stores import TurnTaking

WINDOW = 6_000
SUMMARY_FAILS = {"error": {"message": "the summary brain is down", "type": "server_error"}}


@dataclass
class Parts:
    mock: MockUpstream
    memory: Memory
    turns: Turns
    compactor: Compactor
    metrics: Metrics

    def other_replica(self) -> Compactor:
        """A second compactor over the same store, as another replica runs it."""
        preparer = Preparer(
            memory=self.memory,
            summarizer=Summarizer(AsgiUpstream(self.mock.app)),
            metrics=Metrics(),
        )
        return Compactor(
            memory=self.memory,
            preparer=preparer,
            rules=(),
            summary_timeout_s=5.0,
            metrics=Metrics(),
        )

    def counted(self, name: str) -> float:
        """The counter `name`, summed over its labels."""
        wanted = f"compaction_proxy_{name}_total"
        return sum(
            sample.value
            for metric in self.metrics.registry.collect()
            for sample in metric.samples
            if sample.name == wanted
        )


async def build(
    *,
    policy: ContextPolicy | None = None,
    rules: tuple[hooks.Hook, ...] = (),
    breaker: Breaker | None = None,
    store: Store | None = None,
    mock: MockUpstream | None = None,
    max_concurrent: int = 4,
) -> AsyncIterator[Parts]:
    """The parts over `store` (a new embedded one when None) and `mock` (a new one)."""
    mock = mock or MockUpstream()
    upstream = AsgiUpstream(mock.app)
    await upstream.open()
    metrics = Metrics()
    memory = Memory(store or MemoryStore(), metrics=metrics)
    policy = policy or ContextPolicy(context_window=WINDOW, keep_recent=2, output_reserved=500)
    turns = Turns(
        memory=memory,
        policies=ModelPolicies(default=policy),
        encoders=load_encoders(),
        upstream=upstream,
        upstream_api_key=None,
    )
    preparer = Preparer(
        memory=memory,
        summarizer=Summarizer(upstream),
        metrics=metrics,
        breaker=breaker,
        max_concurrent=max_concurrent,
    )
    compactor = Compactor(
        memory=memory, preparer=preparer, rules=rules, summary_timeout_s=5.0, metrics=metrics
    )
    try:
        yield Parts(mock, memory, turns, compactor, metrics)
    finally:
        await preparer.aclose()
        await memory.aclose()
        await upstream.aclose()


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    async for found in build():
        yield found


def history(
    rounds: int, *, words: int = 120, system: str = "You are terse.", topic: str = "question"
) -> list[Any]:
    messages: list[Any] = [{"role": "system", "content": system}]
    for n in range(rounds):
        messages += [
            {"role": "user", "content": f"{topic} {n}: " + "word " * words},
            {"role": "assistant", "content": f"answer {n}: " + "word " * words},
        ]
    return [*messages, {"role": "user", "content": "and now?"}]


async def turn_of(parts: Parts, messages: list[Any], *, session: str = "s1") -> Turn:
    body = {"model": "mock-model", "messages": messages}
    incoming = Incoming(
        "POST", "chat/completions", "", [("authorization", "Bearer k"), ("x-session-id", session)]
    )
    return await parts.turns.begin(incoming, parse_chat_request(jsoncodec.dumps(body)))


def fallback_of(turn: Turn) -> Compacted:
    """The truncation an explicit compaction of `turn` makes when no summary is at hand."""
    situation = Situation(
        unchanged(turn).messages, turn.request.body, turn.policy, turn.budget, force=True
    )
    need = plan_compaction(situation, turn.counter)
    assert isinstance(need, NeedsSummary)
    return need.fallback()


async def test_an_explicit_compaction_waits_for_its_summary(parts: Parts) -> None:
    turn = await turn_of(parts, history(10))
    outcome = await parts.compactor.compact_now(turn, None)
    assert outcome.strategy == "summarize"
    assert outcome.summary_wait_s > 0
    assert outcome.tokens_after < outcome.tokens_before
    assert len(parts.mock.summary_requests) == 1
    # Frozen: the next request finds it and forwards the same prefix.
    assert (
        await parts.memory.find_checkpoint(turn.tenant, turn.session, turn.hashes)
        == outcome.checkpoint
    )


async def test_a_failed_summary_truncates_instead(parts: Parts) -> None:
    parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
    turn = await turn_of(parts, history(10))
    outcome = await parts.compactor.compact_now(turn, None)
    assert outcome.strategy == "truncate"
    assert outcome.checkpoint is not None
    assert outcome.summary_wait_s > 0  # it did wait for the summary that failed
    assert outcome.tokens_after < outcome.tokens_before


async def test_an_open_breaker_truncates_without_asking() -> None:
    async for parts in build(breaker=Breaker(threshold=1, cool_off_s=600.0)):
        parts.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
        await parts.compactor.compact_now(await turn_of(parts, history(10), session="a"), None)
        asked = len(parts.mock.summary_requests)
        outcome = await parts.compactor.compact_now(
            await turn_of(parts, history(10, topic="another"), session="b"), None
        )
        assert len(parts.mock.summary_requests) == asked  # the brain is not asked again
        assert parts.counted("summaries_skipped") == 1
        assert outcome.strategy == "truncate"
        assert outcome.summary_wait_s == 0


async def test_a_prefix_another_replica_summarizes_is_waited_for(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compactor_module, "LOCK_WAIT_S", 5.0)
    turn = await turn_of(parts, history(10))
    token = await parts.memory.acquire(turn.tenant, f"compact:{turn.hashes[-1]}", 30.0)
    assert token is not None
    waiting = asyncio.create_task(parts.compactor.compact_now(turn, None))
    await asyncio.sleep(0.15)
    assert not waiting.done()
    theirs = await parts.other_replica().freeze(turn, fallback_of(turn), "manual", unchanged(turn))
    outcome = await waiting
    # Theirs is forwarded, byte for byte, and this request wrote no summary of its own.
    assert outcome.checkpoint == theirs.outcome.checkpoint
    assert outcome.messages == theirs.outcome.messages
    assert parts.mock.summary_requests == []


async def test_a_wait_for_another_replica_is_bounded(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compactor_module, "LOCK_WAIT_S", 0.3)
    turn = await turn_of(parts, history(10))
    assert await parts.memory.acquire(turn.tenant, f"compact:{turn.hashes[-1]}", 30.0)
    outcome = await parts.compactor.compact_now(turn, None)
    assert outcome.strategy == "truncate"  # gave up waiting: truncated, asked no summary
    assert outcome.checkpoint is not None
    assert parts.mock.summary_requests == []


async def test_a_compaction_stored_before_the_lock_was_taken_is_used(parts: Parts) -> None:
    """Two requests read the same conversation; the first compacts and lets the lock go;
    the second gets the lock, finds the first's checkpoint and uses it: one summary."""
    messages = history(10)
    first, second = await turn_of(parts, messages), await turn_of(parts, messages)
    done = await parts.compactor.compact_now(first, None)
    again = await parts.compactor.compact_now(second, None)
    assert again.checkpoint == done.checkpoint
    assert again.messages == done.messages
    assert len(parts.mock.summary_requests) == 1


async def test_a_request_in_cooldown_adopts_a_newer_checkpoint() -> None:
    """Over the trigger yet in its turn cooldown: normally forwarded as is, unless another
    request has stored a checkpoint since this one was read; then that one is forwarded."""
    policy = ContextPolicy(
        context_window=WINDOW, keep_recent=2, output_reserved=500, cooldown_turns=5
    )
    async for parts in build(policy=policy):
        early = await turn_of(parts, history(18))
        first = await parts.compactor.before_forward(early)
        assert first.checkpoint is not None  # compacted at the trigger: the cooldown starts
        grown = [*history(18)[:-1], *history(15, topic="more")[1:]]
        cooling, racing = await turn_of(parts, grown), await turn_of(parts, grown)
        assert cooling.checkpoint == first.checkpoint
        assert unchanged(cooling).pressure > policy.compression_trigger  # over, yet cooling
        unchanged_view = await parts.compactor.before_forward(cooling)
        assert unchanged_view.strategy is None  # in cooldown: no compaction this turn
        assert not unchanged_view.tried
        assert unchanged_view.checkpoint == first.checkpoint
        newer = await parts.compactor.compact_now(racing, None)
        assert newer.checkpoint is not None
        assert newer.checkpoint.covered > first.checkpoint.covered
        adopted = await parts.compactor.before_forward(cooling)
        assert adopted.checkpoint == newer.checkpoint
        assert adopted.messages == newer.messages


async def test_hook_log_lines_and_messages_at_turn_start_and_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rules = (
        hooks.Hook("turn_start", hooks.Always(), hooks.Log("start of turn {turn}")),
        hooks.Hook(
            "turn_start", hooks.Always(), hooks.InjectMessage(role="system", message="be brief")
        ),
        hooks.Hook("turn_end", hooks.Always(), hooks.Log("end at {messages} messages")),
    )
    async for parts in build(rules=rules):
        turn = await turn_of(parts, history(1))
        with caplog.at_level(logging.INFO, logger="proxy.compaction"):
            outcome = await parts.compactor.before_forward(turn)
            await parts.compactor.after_answer(turn, outcome)
        assert outcome.injected == ({"role": "system", "content": "be brief"},)
        assert outcome.forwarded[-1] == {"role": "system", "content": "be brief"}
        assert outcome.strategy is None
        logged = [r.getMessage() for r in caplog.records]
        assert logged == ["hook: start of turn 1", "hook: end at 4 messages"]


async def test_hook_cooldowns_are_kept_for_a_bounded_number_of_sessions(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook with a cooldown fires once per session until the session is forgotten (the
    least recently seen beyond `MAX_HOOK_SESSIONS`); forgetting only loses the cooldown."""
    monkeypatch.setattr(compactor_module, "MAX_HOOK_SESSIONS", 1)
    rules = (hooks.Hook("turn_start", hooks.Always(), hooks.Log("once"), cooldown_s=3600.0),)
    async for parts in build(rules=rules):
        with caplog.at_level(logging.INFO, logger="proxy.compaction"):
            for session in ("a", "a", "b", "a"):
                await parts.compactor.before_forward(
                    await turn_of(parts, history(1), session=session)
                )
        # a fires, a is cooling, b fires and pushes a out, a fires again.
        assert [r.getMessage() for r in caplog.records] == ["hook: once"] * 3


async def test_a_compaction_that_took_no_step_is_not_stored(parts: Parts) -> None:
    turn = await turn_of(parts, history(10))
    nothing = replace(fallback_of(turn), steps=())
    frozen = await parts.compactor.freeze(turn, nothing, "manual", unchanged(turn))
    assert not frozen.stored
    assert frozen.outcome == unchanged(turn)
    assert await parts.memory.find_checkpoint(turn.tenant, turn.session, turn.hashes) is None


@pytest.mark.parametrize("with_recall", [True, False])
async def test_a_compaction_of_the_head_alone_is_forwarded_not_stored(
    parts: Parts, with_recall: bool
) -> None:
    """Only the instructions were cut: there is no prefix of the conversation to freeze."""
    turn = await turn_of(parts, history(1, system="rules " * 400))
    head_cut = [{"role": "system", "content": "rules"}, *turn.body]
    # What its note's recall id stands for is stored all the same.
    recalls = {"rc_aaaaaaaaaa": (turn.head[0],)} if with_recall else {}
    result = Compacted(
        head_cut, "truncate", 900, 60, fits=True, steps=("truncate",), recalls=recalls
    )
    frozen = await parts.compactor.freeze(turn, result, "overflow", unchanged(turn))
    assert frozen.stored  # recorded as this turn's compaction
    assert frozen.outcome.messages == head_cut
    assert frozen.outcome.checkpoint is None
    assert frozen.outcome.tokens_after < frozen.outcome.tokens_before
    assert await parts.memory.find_checkpoint(turn.tenant, turn.session, turn.hashes) is None
    # The id is stored (an unknown one is None); the client's message it stands for is
    # archived with the turn's answer, none here.
    recalled = await parts.memory.recalled(turn.tenant, turn.session, "rc_aaaaaaaaaa")
    assert recalled == ([] if with_recall else None)
    assert await parts.memory.recalled(turn.tenant, turn.session, "rc_bbbbbbbbbb") is None


def tool_session(calls: int, *, size: int = 400) -> list[Any]:
    """An agent reading files: big tool results, short words around them."""
    messages: list[Any] = [system(), user("fix the bug")]
    for n in range(calls):
        messages += [assistant_calls(f"c{n}"), tool_result(f"c{n}", f"file {n}: " + "x " * size)]
    return [*messages, assistant("found it"), user("go on")]


async def test_clearing_old_tool_results_is_frozen_without_a_summary(parts: Parts) -> None:
    turn = await turn_of(parts, tool_session(14))
    outcome = await parts.compactor.before_forward(turn)
    assert outcome.tried
    assert outcome.strategy == "clear_tool_results"
    assert outcome.checkpoint is not None
    assert parts.mock.summary_requests == []


async def test_nothing_to_remove_is_tried_and_forwarded_as_is(parts: Parts) -> None:
    turn = await turn_of(parts, history(1))
    outcome = await parts.compactor.compact_now(turn, None)
    assert outcome.tried  # compaction had its chance: an overflow now is the client's
    assert outcome == replace(unchanged(turn), tried=True)


async def test_of_two_requests_compacting_one_prefix_the_first_stored_wins(parts: Parts) -> None:
    messages = history(10)
    first, second = await turn_of(parts, messages), await turn_of(parts, messages)
    won = await parts.compactor.freeze(first, fallback_of(first), "pressure", unchanged(first))
    lost = await parts.compactor.freeze(second, fallback_of(second), "pressure", unchanged(second))
    assert won.stored
    assert not lost.stored
    assert lost.outcome.checkpoint == won.outcome.checkpoint
    assert parts.counted("compactions") == 1  # fifty identical requests are one compaction


async def test_a_request_read_before_another_compacted_forwards_that_compaction() -> None:
    """Both read the conversation over the trigger before either compacted: the second finds
    the first's checkpoint instead of compacting again."""
    policy = ContextPolicy(context_window=WINDOW, keep_recent=2, output_reserved=500)
    async for parts in build(policy=policy):
        messages = history(18)
        first, second = await turn_of(parts, messages), await turn_of(parts, messages)
        done = await parts.compactor.before_forward(first)
        again = await parts.compactor.before_forward(second)
        assert done.checkpoint is not None
        assert again.checkpoint == done.checkpoint
        assert again.messages == done.messages
        assert parts.counted("compactions") == 1


async def test_a_summary_prepared_below_the_trigger_is_used_at_it() -> None:
    """Past the preparation level the span's summary is written off the path; at the
    trigger the compaction uses it, and nobody waits for a summary."""
    async for parts in build():
        preparing = await parts.compactor.before_forward(await turn_of(parts, history(15)))
        assert preparing.strategy is None  # under the trigger: forwarded as is
        await parts.compactor.preparer.settle()
        assert len(parts.mock.summary_requests) == 1
        at_trigger = await parts.compactor.before_forward(await turn_of(parts, history(18)))
        assert at_trigger.strategy == "summarize"
        assert at_trigger.summary_wait_s == 0
        assert len(parts.mock.summary_requests) == 1
        assert parts.counted("summaries_used") == 1


async def test_what_a_truncation_dropped_is_summarized_and_folded_into_the_next() -> None:
    """At the trigger with nothing prepared: truncated at once, and what it dropped is
    summarized off the path; the next compaction folds that summary in, without waiting."""
    policy = ContextPolicy(
        context_window=WINDOW, keep_recent=2, output_reserved=500, cooldown_turns=0
    )
    async for parts in build(policy=policy):
        first = await parts.compactor.before_forward(await turn_of(parts, history(18)))
        assert first.strategy == "truncate"
        await parts.compactor.preparer.settle()
        folds = len(parts.mock.summary_requests)
        assert folds >= 1  # what the truncation dropped, summarized for the next time
        grown = [*history(18)[:-1], *history(15, topic="more")[1:]]
        second = await parts.compactor.before_forward(await turn_of(parts, grown))
        assert second.checkpoint is not None
        assert first.checkpoint is not None
        assert second.checkpoint.covered > first.checkpoint.covered
        assert second.summary_wait_s == 0
        assert parts.counted("summaries_used") == 1
        note = jsoncodec.dumps(second.checkpoint.messages).decode()
        assert "## " in note  # the summary of what the first one dropped, folded in


async def test_a_compaction_hook_at_turn_end_prepares_the_next_turn() -> None:
    rules = (hooks.Hook("turn_end", hooks.MessageCount(20), hooks.CompactContext()),)
    async for parts in build(rules=rules):
        assert parts.compactor.has_turn_end_hooks
        turn = await turn_of(parts, history(10))
        outcome = await parts.compactor.before_forward(turn)
        assert outcome.checkpoint is None  # a compaction hook replaces the default one
        await parts.compactor.after_answer(turn, outcome)
        stored = await parts.memory.find_checkpoint(turn.tenant, turn.session, turn.hashes)
        assert stored is not None  # the next request of the conversation starts from it


@pytest.mark.parametrize("store", [MemoryStore, TurnTaking], ids=["embedded", "turn-taking"])
async def test_two_requests_compacting_at_once_forward_one_compaction(
    store: Callable[[], Store],
) -> None:
    """Read and compacted side by side: both plan, one stores its checkpoint first, the
    other's is refused (set-if-absent) and it forwards the winner's, recorded once. On a
    store whose every call takes a turn of the loop (as on Redis, where two replicas race),
    both also look for a prepared summary before either stores, and only the winner's drop
    is folded into the next summary."""
    async for parts in build(store=store()):
        messages = history(18)
        first, second = await turn_of(parts, messages), await turn_of(parts, messages)
        one, two = await asyncio.gather(
            parts.compactor.before_forward(first), parts.compactor.before_forward(second)
        )
        assert one.checkpoint is not None
        assert one.checkpoint == two.checkpoint
        assert one.messages == two.messages
        assert parts.counted("compactions") == 1
        await parts.compactor.preparer.settle()
        assert len(parts.mock.summary_requests) == 1


async def test_a_checkpoint_found_after_an_outage_read_none_is_not_forwarded_whole() -> None:
    """Issue 23: the turn was read while the store was down (no checkpoint, a fresh state);
    by its compaction the store was back, restored from a snapshot taken long before, with a
    checkpoint of the conversation's first messages. "Newer" than none, that one was
    forwarded with all the history since after it: 35,875 tokens of an 8k window, refused
    by the proxy itself. A stored checkpoint is used only when the view over it lands."""
    async for parts in build():
        old = await parts.compactor.before_forward(await turn_of(parts, history(18)))
        assert old.checkpoint is not None
        grown = [*history(18)[:-1], *history(60, topic="more")[1:]]
        read = await turn_of(parts, grown)
        assert read.checkpoint == old.checkpoint  # what the store holds for it
        during_outage = replace(read, checkpoint=None, state=SessionState())
        outcome = await parts.compactor.before_forward(during_outage)
        budget = during_outage.budget
        stale = unchanged(read)
        assert not budget.fits(stale.tokens_after)  # what was forwarded (and refused)
        assert outcome.tried
        assert budget.fits(outcome.tokens_after)
        assert budget.pressure(outcome.tokens_after) < during_outage.policy.compression_trigger
        assert outcome.checkpoint is not None
        assert outcome.checkpoint.covered > old.checkpoint.covered
        assert parts.counted("checkpoints_refused") >= 1


async def stray_checkpoint(parts: Parts, turn: Turn, covered: int, *, words: int) -> Checkpoint:
    """A checkpoint of the turn's first `covered` body messages that the plan cannot use: its
    one message calls a tool whose result the request's tail never gives (another version's
    messages, that no longer pair with this request's), with `words` of arguments."""
    call = assistant_calls("gone", arguments={"q": "word " * words})
    checkpoint = Checkpoint(turn.hashes[covered - 1], covered, [call], 0.0, "truncate", 0, 0)
    await parts.memory.store.put_checkpoint(turn.tenant, turn.session or "", checkpoint)
    return checkpoint


@pytest.mark.parametrize(
    ("messages", "strategy"),
    [
        pytest.param(history(3), None, id="fits-alone"),
        pytest.param(tool_session(14), "clear_tool_results", id="cleared-alone"),
        pytest.param(history(30), "truncate", id="truncated-alone"),
    ],
)
async def test_a_stored_checkpoint_the_plan_cannot_use_gives_way_to_the_request_alone(
    parts: Parts, messages: list[Any], strategy: str | None
) -> None:
    """The view over the checkpoint is malformed (the plan forwards it as it is) and over
    the window: the request is compacted from its own messages instead, or forwarded as
    sent when they fit."""
    read = await turn_of(parts, messages)
    await stray_checkpoint(parts, read, 2, words=8_000)
    turn = await turn_of(parts, messages)
    assert turn.checkpoint is not None
    outcome = await parts.compactor.before_forward(turn)
    assert outcome.tried
    assert outcome.strategy == strategy
    assert turn.budget.fits(outcome.tokens_after)
    assert outcome.checkpoint is None or outcome.checkpoint.covered > 2
    assert outcome.tokens_before == unchanged(turn).tokens_before
    assert parts.counted("checkpoints_refused") >= 1


async def test_a_stored_checkpoint_smaller_than_the_request_alone_stays(parts: Parts) -> None:
    """Over the window either way (the instructions alone are): what stands on the
    checkpoint is smaller, and is forwarded (the proxy then answers the overflow itself)."""
    messages = history(3, system="rules " * 7_000)
    read = await turn_of(parts, messages)
    stray = await stray_checkpoint(parts, read, len(read.body) - 1, words=1)
    turn = await turn_of(parts, messages)
    outcome = await parts.compactor.before_forward(turn)
    assert outcome.checkpoint == stray
    assert not turn.budget.fits(outcome.tokens_after)


def grown_result(result: Compacted, words: int) -> Compacted:
    """`result` with its first compacted message (the note standing for the removed span)
    longer by `words`: the same prefix compacted by another replica, another way."""
    messages = list(result.messages)
    index = next(i for i, m in enumerate(messages) if m.get("role") != "system")
    messages[index] = {**messages[index], "content": text(messages[index]) + " word" * words}
    return replace(result, messages=messages)


async def test_a_same_prefix_checkpoint_over_the_trigger_is_not_forwarded(parts: Parts) -> None:
    """Another replica stored the same prefix first, and the view over it is over the turn's
    trigger (restored from a snapshot, or made under another window): this request forwards
    its own compaction instead, and leaves the stored one alone."""
    messages = history(10)
    first, second = await turn_of(parts, messages), await turn_of(parts, messages)
    big = grown_result(fallback_of(first), 5_000)
    theirs = await parts.other_replica().freeze(first, big, "pressure", unchanged(first))
    assert theirs.stored
    ours = await parts.compactor.freeze(second, fallback_of(second), "pressure", unchanged(second))
    assert not ours.stored
    assert ours.outcome.messages == fallback_of(second).messages
    assert second.budget.fits(ours.outcome.tokens_after)
    assert (
        await parts.memory.find_checkpoint(second.tenant, second.session, second.hashes)
        == theirs.outcome.checkpoint
    )


async def test_after_an_overflow_a_stored_checkpoint_is_used_only_when_no_larger(
    parts: Parts,
) -> None:
    """The emergency's retry forwards another request's compaction of the same prefix only
    when it is no larger than its own: the provider has just refused a larger request."""
    messages = history(10)
    first, second = await turn_of(parts, messages), await turn_of(parts, messages)
    result = fallback_of(second)
    await parts.other_replica().freeze(
        first, grown_result(result, 20), "pressure", unchanged(first)
    )
    larger = await parts.compactor.freeze(
        second, result, "overflow", unchanged(second), ceiling=result.tokens_after
    )
    assert larger.outcome.messages == result.messages
    same = await parts.compactor.freeze(
        second, result, "overflow", unchanged(second), ceiling=result.tokens_after + 40
    )
    assert same.outcome.messages != result.messages  # theirs: within the ceiling
    assert not same.stored


async def test_a_request_in_cooldown_keeps_its_view_over_a_checkpoint_that_does_not_land() -> None:
    policy = ContextPolicy(
        context_window=WINDOW, keep_recent=2, output_reserved=500, cooldown_turns=5
    )
    async for parts in build(policy=policy):
        early = await turn_of(parts, history(18))
        first = await parts.compactor.before_forward(early)
        assert first.checkpoint is not None
        grown = [*history(18)[:-1], *history(15, topic="more")[1:]]
        cooling = await turn_of(parts, grown)
        await stray_checkpoint(parts, cooling, first.checkpoint.covered + 2, words=8_000)
        outcome = await parts.compactor.before_forward(cooling)
        assert outcome.checkpoint == first.checkpoint  # the stored one is over the window
        assert outcome == unchanged(cooling)


async def test_two_requests_over_one_unusable_checkpoint_compact_alone_once(parts: Parts) -> None:
    """Both give way to their own messages: the first stores its compaction, the second
    forwards that one (one compaction, one prefix), and only the first's drop is summarized
    for the next compaction."""
    messages = history(30)
    await stray_checkpoint(parts, await turn_of(parts, messages), 2, words=8_000)
    first, second = await turn_of(parts, messages), await turn_of(parts, messages)
    one = await parts.compactor.before_forward(first)
    await parts.compactor.preparer.settle()
    folded = len(parts.mock.summary_requests)
    assert folded >= 1  # what the first one dropped, summarized for the next time
    two = await parts.compactor.before_forward(second)
    await parts.compactor.preparer.settle()
    assert one.checkpoint is not None
    assert one.checkpoint.covered > 2
    assert two.checkpoint == one.checkpoint
    assert two.messages == one.messages
    assert parts.counted("compactions") == 1
    assert len(parts.mock.summary_requests) == folded
