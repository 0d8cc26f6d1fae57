"""The ledger lists what the user said in the order first said, through every compaction.

Found by the issue's bench run: "Step 1, 2, 3, then Step 0". A pinned task too large to stay
is let go after the turns after it were already folded into a block: the block written for
the task stood before the earlier one (which opened the recent window), so the request held
two blocks, and the newer one's ledger put the task's words after what was said later.
"""

from __future__ import annotations

from proxy.core import statements as ledger
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import note_digest, notes_in
from tests.builders import assistant, user
from tests.core.words import COUNTER

POLICY = ContextPolicy(keep_recent=2, summary_max_tokens=64, output_reserved=100)
TASK = "Step 0: the budget is $500."


def compacted(messages: list[Message], notes: frozenset[str]) -> Compacted | None:
    budget = Budget(context_window=1200, output_reserve=100)
    plan = plan_compaction(Situation(messages, {}, POLICY, budget, notes=notes), COUNTER)
    if isinstance(plan, NeedsSummary):
        return plan.fallback()
    return plan if isinstance(plan, Compacted) else None


def test_a_released_task_is_first_in_the_one_block_that_folds_the_earlier_one() -> None:
    messages = [user(f"{TASK} " + " ".join(["Please read every file carefully."] * 90))]
    messages.append(assistant("ok"))
    notes: frozenset[str] = frozenset()
    released = None
    for turn in range(1, 12):
        ask = user(f"Step {turn + 1}: next.")
        messages.append(user(f"Step {turn}: use ticket OPS-{turn}. " + "more words here " * 20))
        messages.append(assistant("done " * 30))
        result = compacted([*messages, ask], notes)
        if result is None:
            continue
        ours = [note for note in notes_in(result.messages) if note_digest(note) in result.notes]
        assert len(ours) == 1, result.steps  # one block, never two
        said = [s.text for s in ledger.without_ledger(ours[0])[1]]
        steps = [int(s.split()[1].rstrip(":")) for s in said if s.startswith("Step ")]
        assert steps == sorted(steps), said
        if "release_task" in result.steps:
            released = said
            break
        messages, notes = list(result.messages[:-1]), result.notes
    assert released is not None
    assert released[0] == TASK
