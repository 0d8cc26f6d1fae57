"""The compaction block gives way to what must stay: its summary first, then its trail and
its ledger, each losing its lowest-ranked entries first.

Seen in the matrix (4k window, tool-heavy agent, extractive summarizer): a compaction that
evicts everything before the running turn keeps that turn's user message (about 17 % of the
usable input) in place, and the block (ledger, artifact trail, a carried summary) took the
rest and more: 4 of 10 compactions landed above the target (0.487 for 0.45), so the next
request compacted again sooner. The block is the one thing left that can give.
"""

from __future__ import annotations

from typing import Any

from proxy.core import artifacts, turn_calls
from proxy.core import statements as ledger
from proxy.core.messages import Message
from proxy.core.plan import Compacted, plan_compaction
from proxy.core.plan.block import fitted
from proxy.core.summary import TOOLS_REMINDER, detach_notes, note_of
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.test_plan import run, situation, target_of, words
from tests.core.words import COUNTER

ROUNDS = 12
ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth"
CHATTER = [f"The {nth} part of the work went well." for nth in ORDINALS.split()]
"""A sentence of chatter in each round's user message: the ledger's lowest rank."""
SUMMARY = "\n".join(f"- summary line {i} " + words(8) for i in range(40))
"""A summarizer that writes more than the allowance: clipped to it, then fitted."""


def agent(running: Any, rounds: int = ROUNDS) -> list[Message]:
    """A task, rounds each with a user statement and a result naming a file and a build id,
    then the running turn's user message (`running`: its content)."""
    messages = [system(), user("the task: port the billing service")]
    for i in range(rounds):
        messages += [
            user(f"Deploy stage {i} to the eu-west-{i} region. {CHATTER[i % ROUNDS]}"),
            assistant_calls(f"c{i}", name="read_file"),
            tool_result(f"c{i}", f"src/billing/mod_{i}.py build-{i}7f3a9c2{i} " + words(120)),
            assistant(f"read {i}"),
        ]
    return [*messages, user(running)]


def compacted(running: Any, window: int = 2000, rounds: int = ROUNDS) -> tuple[Compacted, int, str]:
    """The plan's result for `agent(running, rounds)`, its target and its block."""
    asked = situation(agent(running, rounds), window=window)
    result = run(plan_compaction(asked, COUNTER), SUMMARY)
    return result, target_of(asked), block_of(result.messages)


def block_of(messages: list[Message]) -> str:
    for message in messages:
        standalone = note_of(message)
        found = [standalone] if standalone is not None else detach_notes(message)[1]
        if found:
            return found[-1]
    raise AssertionError("no block")


def parts(block: str) -> tuple[str, list[ledger.Statement], list[str]]:
    rest, kept = ledger.without_ledger(block)
    note, trail = artifacts.without_trail(rest)
    return note, kept, trail


def test_a_block_with_room_is_not_touched() -> None:
    result, target, block = compacted("now the next step: " + words(300))
    assert "fit_block" not in result.steps
    assert result.tokens_after <= target
    assert "- summary line 0" in block


def test_the_summary_gives_first_its_first_lines_and_the_tools_line_stay() -> None:
    roomy = parts(compacted("now the next step: " + words(300))[2])[0]
    result, target, block = compacted("now the next step: " + words(500))
    assert "fit_block" in result.steps
    assert result.tokens_after <= target
    note, kept, trail = parts(block)
    # The ledger and the trail stand whole (every round left: its two statements, its path
    # and its build id); the summary lost its last lines, not its first.
    assert len(kept) == 2 * ROUNDS
    assert len(trail) == 2 * ROUNDS
    assert "- summary line 0" in note
    assert "- summary line 6" in roomy
    assert "- summary line 6" not in note
    assert note.rstrip().endswith(f"{TOOLS_REMINDER}search.")
    assert "[Earlier turns of this conversation were condensed: " in note


def test_then_the_trail_s_paths_and_the_ledger_s_chatter_in_proportion() -> None:
    result, target, block = compacted("now the next step: " + words(620))
    assert result.tokens_after <= target
    note, kept, trail = parts(block)
    assert "summary line" not in note
    # The line naming the tools restates what the request offers: it went before anything
    # the user said; the note's first line (what it stands for) stays.
    assert TOOLS_REMINDER not in note
    assert note.startswith("[")
    # Both gave, neither all it could: the trail some paths, the ledger some chatter (the
    # oldest first). Every build id and every statement with a specific in it stands.
    ids = [name for name in trail if name.startswith("build-")]
    assert len(ids) == ROUNDS
    assert ROUNDS < len(trail) < 2 * ROUNDS
    said = [statement.text for statement in kept]
    assert all(f"Deploy stage {i} to the eu-west-{i} region." in said for i in range(ROUNDS))
    chatter = [text for text in said if text in CHATTER]
    assert 0 < len(chatter) < ROUNDS
    assert chatter == CHATTER[ROUNDS - len(chatter) :]
    # The conversation records the fitted block as the proxy's: the next compaction reads it.
    assert result.notes


def test_a_trail_s_name_a_kept_statement_quotes_goes_before_anything_else_gives() -> None:
    # A schema-heavy client's block (6k window, Responses): the user gave the booking id, a
    # result named it again. The ledger's line says it; the trail's is paid twice.
    note = f"[27 earlier messages omitted]\n\n{TOOLS_REMINDER}book_flight, purchase_insurance."
    said = [
        ledger.Statement("Insure booking BK-20931 for 250 dollars.", ledger.SPECIFIC),
        ledger.Statement("Use card 4417.", ledger.SPECIFIC),
        ledger.Statement("Thanks, that went well.", ledger.OTHER),
    ]
    trail = ["BK-20931", "INV-5521"]
    block = ledger.with_ledger(artifacts.with_trail(note, trail), said)
    count = COUNTER.text
    bare = ledger.with_ledger(artifacts.with_trail("[27 earlier messages omitted]", trail), said)
    # Less than the tools line and the quoted id together: both go, the rest stands.
    quoted = count(artifacts.with_trail("", trail)) - count(artifacts.with_trail("", trail[1:]))
    excess = count(block) - count(bare) + quoted // 2
    shortened, fitted_block = fitted(block, excess, count)
    _, kept, left = parts(fitted_block)
    assert shortened == "[27 earlier messages omitted]"
    assert left == ["INV-5521"]
    assert kept == said
    # What is quoted nowhere else stays to the last: the invoice id, the user's specifics.
    _, kept, left = parts(fitted(block, count(block), count)[1])
    assert left == ["INV-5521"]
    assert [statement.text for statement in kept] == [s.text for s in said[:2]]


def test_a_block_that_cannot_reach_the_target_stays_whole() -> None:
    result, target, block = compacted("now the next step: " + words(705))
    assert result.tokens_after > target
    assert "fit_block" not in result.steps
    note, kept, trail = parts(block)
    assert len(kept) == 2 * ROUNDS
    assert len(trail) == 2 * ROUNDS
    assert "- summary line 0" in note


def test_a_block_opening_a_multimodal_message_is_fitted_in_its_part() -> None:
    running = [
        {"type": "text", "text": "now the next step: " + words(300)},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    result, target, block = compacted(running, window=5000, rounds=30)
    assert "fit_block" in result.steps
    assert result.tokens_after <= target
    last = result.messages[-1]
    assert last["content"][-2:] == running  # the client's parts, whole, after the block
    assert "- summary line 6" not in block


def test_a_fit_that_keeps_overshooting_takes_the_barest_block() -> None:
    # Here each fit made again for its overshoot gives the same block again (the overshoot,
    # a token or two at the joins, is less than the entry that must go), the tries asking
    # twice as much more each time, until they run out: the barest block (no summary line,
    # no path, no chatter) fits.
    asked = situation(agent("now the next step: " + words(665)), window=2000)
    result = run(plan_compaction(asked, COUNTER), SUMMARY)
    assert "fit_block" in result.steps
    assert result.tokens_after <= target_of(asked)
    note, kept, trail = parts(block_of(result.messages))
    assert "summary line" not in note
    assert [s.text for s in kept] == [
        f"Deploy stage {i} to the eu-west-{i} region." for i in range(ROUNDS)
    ]
    assert trail == [f"build-{i}7f3a9c2{i}" for i in reversed(range(ROUNDS))]


def test_a_heading_whose_lines_all_went_goes_too() -> None:
    sections = [f"## Part {n}\n" + "\n".join(f"- point {n}.{i} " + words(8) for i in range(3))
                for n in range(8)]  # fmt: skip
    # Cut right after "## Part 1": the heading stands over nothing, and goes.
    asked = situation(agent("now the next step: " + words(480)), window=2000)
    result = run(plan_compaction(asked, COUNTER), "\n".join(sections))
    assert "fit_block" in result.steps
    note = parts(block_of(result.messages))[0]
    body = note.rpartition("\n\n")[0].splitlines()  # the summary, its tools line apart
    assert body[-1] == "- point 0.2 " + words(8)
    assert "## Part 1" not in body


def test_the_running_turn_s_calls_stay_listed_however_short_the_block_is_made() -> None:
    # Seen in the long single turn of tests/core/test_turn_calls.py once blocks were fitted
    # before the newest result was cut: the summary's last lines went, and with them the
    # calls listed after its first paragraph; the agent would run them again.
    lines = [
        f'read({{"path": "src/m{i}.py"}}): context_recall(id="rc_{i:012d}") returns its result'
        for i in range(8)
    ]
    note = turn_calls.with_calls("[16 earlier messages omitted]\n\n" + SUMMARY, lines)
    said = [ledger.Statement("Never touch main.", ledger.RULE)]
    whole = ledger.with_ledger(artifacts.with_trail(note, ["src/billing/mod_1.py"]), said)
    for shed in (False, True):
        short, block = fitted(whole, COUNTER.text(whole), COUNTER.text, shed=shed)
        assert turn_calls.without_calls(short)[1] == lines
        assert "summary line 39" not in block
        assert ledger.without_ledger(block)[1] == said
