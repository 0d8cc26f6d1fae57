"""A client's compaction beside the user message it keeps, and a block that must still give
way: with recall, all but its rules.

Seen in the matrix's client-compacting cells (16k window, an 8k fixed head): the latest user
message, which the client keeps verbatim beside the block, took most of the room the target
leaves; the block, sized as if it stood alone, put every request after it above the target,
and its ledger repeated that user message. And a client's block that stands before the
running turn's user message cannot be evicted (a span of notes alone gains nothing): only
shortening it lands the request.
"""

from __future__ import annotations

from proxy.core import artifacts
from proxy.core import statements as ledger
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import Compacted, NeedsSummary, Plan, Situation, Unchanged, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import note_digest
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.test_plan import target_of, words
from tests.core.words import COUNTER, TOOLS

POLICY = ContextPolicy(keep_recent=4, summary_max_tokens=100)
SCOPE = "tenant\0session"
TASK = user("Fix ticket ABC-123. Never touch main.")


def agent(rounds: int = 8) -> list[Message]:
    """A task, then rounds each with the user's statements (a rule among them) and a file
    read naming a path and a build id."""
    messages = [system("be brief"), TASK]
    for i in range(rounds):
        messages += [
            user(f"Deploy stage {i} to eu-west-{i}. The {i} part went well. Never push {i}."),
            assistant_calls(f"c{i}", name="read_file", arguments={"path": f"src/mod_{i}.py"}),
            tool_result(f"c{i}", f"src/billing/mod_{i}.py build-{i}7f3a9c2{i} " + words(80)),
            assistant(f"read {i}"),
        ]
    return messages


def condensed(
    messages: list[Message], beside: Message | None, window: int, recall: str | None = None
) -> tuple[Compacted, Situation]:
    asked = Situation(
        messages,
        {"model": "m", **TOOLS},
        POLICY,
        Budget(context_window=window, output_reserve=0),
        force=True,
        whole=True,
        beside=beside,
        recall=recall,
    )
    return completed(plan_compaction(asked, COUNTER)), asked


def completed(plan: Plan) -> Compacted:
    if isinstance(plan, NeedsSummary):
        return plan.complete("- summary " + words(60))
    assert isinstance(plan, Compacted)
    return plan


def parts(block: str | None) -> tuple[list[ledger.Statement], list[str]]:
    rest, kept = ledger.without_ledger(block or "")
    return kept, artifacts.without_trail(rest)[1]


def test_the_ledger_does_not_repeat_the_user_message_beside_the_block() -> None:
    latest = user("Now the docs. Keep every page under 50 lines.")
    messages = [*agent(), latest]
    alone, _ = condensed(messages, None, window=4000)
    beside, _ = condensed(messages, latest, window=4000)
    assert "- Keep every page under 50 lines." in (alone.block or "")
    assert "50 lines" not in (beside.block or "")
    assert "- Deploy stage 7 to eu-west-7." in (beside.block or "")  # the rest, as before


def test_the_block_gives_way_to_the_message_beside_it() -> None:
    latest = user("Now the next step: " + words(600))
    messages = [*agent(), latest]
    result, asked = condensed(messages, latest, window=1950)
    assert "fit_block" in result.steps
    # The plan counts the message beside the block: what is forwarded lands at the target.
    assert result.tokens_after == COUNTER.messages(result.messages) + COUNTER.tools(
        asked.body
    ) + COUNTER.message(latest)
    assert result.tokens_after <= target_of(asked)
    assert result.tokens_before == COUNTER.messages(messages) + COUNTER.tools(asked.body)


def test_a_block_over_the_target_keeps_the_user_s_facts_while_the_request_fits() -> None:
    latest = user("Now the next step: " + words(600))
    messages = [*agent(), latest]
    # Over the target, within the usable input: with recall or without, the block stays
    # whole; reaching the target is no reason to hide what the user said.
    whole, asked = condensed(messages, latest, window=1650)
    for recall in (None, SCOPE):
        kept, asked = condensed(messages, latest, window=1650, recall=recall)
        assert kept.tokens_after > target_of(asked)
        assert kept.fits
        assert parts(kept.block) == parts(whole.block)


def test_with_recall_a_block_over_the_usable_input_keeps_only_what_fits() -> None:
    latest = user("Now the next step: " + words(600))
    messages = [*agent(), latest]
    whole, _ = condensed(messages, latest, window=960)
    assert not whole.fits  # without recall, what the block lists would be lost for good
    shed, asked = condensed(messages, latest, window=960, recall=SCOPE)
    assert shed.fits
    assert shed.tokens_after > target_of(asked)  # as far as the usable input needs
    assert shed.steps[-1] == "fit_block"
    rules = ["Never touch main.", *(f"Never push {i}." for i in range(8))]
    kept, _ = parts(shed.block)
    assert sorted(s.text for s in kept if s.rank == ledger.RULE) == sorted(rules)


def test_a_block_a_little_over_the_usable_input_sheds_only_what_that_needs() -> None:
    # The recall tool's schema put the request a few tokens over the usable input, where the
    # barest block would have reached the target: shed to the target, it lost every one of
    # the user's specifics (17 of them) for a few tokens the summary's lines give (a
    # schema-heavy client's 6k cell over Responses lost the values its next calls needed).
    latest = user("Now the next step: " + words(120))
    messages = [*agent(), latest]
    whole, _ = condensed(messages, latest, window=500)
    shed, asked = condensed(messages, latest, window=500, recall=SCOPE)
    assert shed.fits
    assert shed.tokens_after > target_of(asked)
    assert shed.steps[-1] == "fit_block"
    assert parts(shed.block) == parts(whole.block)  # every statement, every name


def test_an_earlier_block_too_big_to_shorten_to_the_target_stays_whole() -> None:
    latest = user("Now the next step: " + words(300))
    block = condensed([*agent(), latest], latest, window=4000, recall=SCOPE)[0].block or ""
    later = [
        system("be brief"),
        TASK,
        assistant(block),
        latest,
        assistant_calls("c9", name="read_file", arguments={"path": "src/x.py"}),
        tool_result("c9", "src/x.py " + words(400)),
    ]
    for recall in (None, SCOPE):
        asked = Situation(
            later,
            {"model": "m", **TOOLS},
            POLICY,
            Budget(context_window=1200, output_reserve=0),
            notes=frozenset({note_digest(block)}),
            recall=recall,
        )
        plan = plan_compaction(asked, COUNTER)
        # A span of notes alone is never evicted, and the block cannot shrink enough, even
        # shed with recall on and the newest result cut to its least: the request goes as it
        # is, above the target, the result the model just asked for whole.
        assert plan == Unchanged("nothing_to_remove", plan.tokens)  # type: ignore[union-attr]
