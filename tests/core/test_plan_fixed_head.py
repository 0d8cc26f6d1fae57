"""A fixed-heavy client: instructions and tools take most of the usable input.

Seen with Codex through the proxy (its instructions and tools take about 70 % of a 16k
model's usable input): the default target (0.45 of U) lay below the head alone, so every
compaction landed as low as it could, near the trigger, and the next request compacted again
(2.07 requests per compaction in the matrix); and its first turn's user message, the task
and the running turn at once, was let go like any pinned task.
"""

from __future__ import annotations

from proxy.core.messages import Message
from proxy.core.plan import Allowances, Unchanged, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import detach_notes, note_of, notes_in
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.test_plan import run, situation, target_of, words
from tests.core.words import COUNTER

HEAD = system(words(1380, "rule"))
"""About 70 % of the usable input of the 2,000-token window the tests use."""


def turn(n: int, rounds: int) -> list[Message]:
    """A user message pasting a chunk, then `rounds` tool rounds of about 75 tokens."""
    said = f"Chunk {n} of the file follows. Store chunk {n} in region eu-{n}. "
    messages = [user(said + words(100, f"code{n}"))]
    for r in range(rounds):
        call = f"t{n}r{r}"
        messages += [assistant_calls(call), tool_result(call, f"src/m{n}_{r}.py " + words(60))]
    return messages


def test_the_trigger_applies_to_the_room_the_head_leaves() -> None:
    # At 0.91 of U, past the trigger of 0.85, but short of 0.85 of the room left (0.955).
    waiting = situation([HEAD, *turn(0, rounds=4)], window=2000)
    assert waiting.fixed(COUNTER) > 0.7
    plan = plan_compaction(waiting, COUNTER)
    assert isinstance(plan, Unchanged)
    assert plan.reason == "under_trigger"
    assert waiting.budget.pressure(plan.tokens) > ContextPolicy().compression_trigger


def test_a_compaction_leaves_room_for_several_requests_before_the_next() -> None:
    # The first turn's rounds are history once the next ask comes (a running turn's rounds
    # are cut, never cleared: they are what must stay).
    ask = user("Now check chunk 0 again.")
    asked = situation([HEAD, *turn(0, rounds=6), assistant("done"), ask], window=2000)
    result = run(plan_compaction(asked, COUNTER))
    assert result.tokens_after <= target_of(asked)
    # Three more rounds (three more requests of the agent) and it is still under the trigger.
    grown = [*result.messages, *turn(1, rounds=3)[1:]]
    assert grown.index(ask) == len(result.messages) - 1
    later = plan_compaction(situation(grown, window=2000, notes=result.notes), COUNTER)
    assert isinstance(later, Unchanged)
    assert later.reason == "under_trigger"


def test_the_block_s_allowances_are_shares_of_the_room() -> None:
    asked = situation([HEAD, user("hi")], window=2000, ledger_share=0.1)
    budget, policy = asked.budget, asked.policy
    whole, room = Allowances.of(budget, policy), Allowances.of(budget, policy, 0.7)
    assert room.ledger < whole.ledger
    assert room.summary <= whole.summary
    assert room.artifacts < whole.artifacts
    assert room.target == budget.tokens_at(0.7 + ContextPolicy().compaction_target * 0.3)
    assert room.limit == whole.limit


def test_a_first_turn_s_user_message_is_the_task_and_stays_in_place() -> None:
    messages = [HEAD, *turn(0, rounds=10)]
    result = run(plan_compaction(situation(messages, window=2000), COUNTER))
    assert "release_task" not in result.steps
    assert detach_notes(result.messages[1])[0] == messages[1]


def test_a_running_turn_let_go_keeps_its_user_message_and_the_block_opens_it() -> None:
    # Fifteen rounds: more than the room the head leaves holds, their results as placeholders.
    running = turn(1, rounds=15)
    messages = [HEAD, *turn(0, rounds=1), assistant("done with chunk 0"), *running]
    result = run(plan_compaction(situation(messages, window=2000), COUNTER))
    assert "release_running" in result.steps
    start = next(i for i, m in enumerate(result.messages) if "Chunk 1" in str(m["content"]))
    # The user message stands where it stood, as it was sent, last of the user's words: the
    # one block of the compaction stands alone before it, never after the ask (the earlier
    # block was folded into this one, not left beside it).
    assert result.messages[start] == running[0]
    notes = notes_in(result.messages)
    assert len(notes) == 1
    assert note_of(result.messages[start - 1]) == notes[0]
    assert "[" in notes[0]
    # What follows it is the running turn's newest rounds, whole and in order.
    after = result.messages[start + 1 :]
    assert after == running[len(running) - len(after) :]
