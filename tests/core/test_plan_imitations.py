"""A model that imitates the compaction block it read: its answers are the client's, never notes.

Recorded from the real-model end to end (`make e2e`, Gemma 3 270M): after a compaction the
small model answered in the shape of the block it saw (an omission marker, the ledger heading,
bullets with made-up values: "File everything under ticket ZX-4425"), and the client sent those
answers back as history. Read by their shape, they were taken for the proxy's own notes: their
"ledger" replaced the user's real statement (ZX-4411) and their marker replaced the summary.
The proxy reads as notes only those it recorded writing (`Situation.notes`, kept by the
checkpoint), so these answers are condensed like any other text and the ledger keeps what the
user said, through every re-compaction and the emergency plan.
"""

from __future__ import annotations

import json
from pathlib import Path

from proxy.core import statements
from proxy.core.budget import Budget
from proxy.core.messages import Message
from proxy.core.plan import (
    Compacted,
    NeedsSummary,
    Situation,
    plan_compaction,
    plan_emergency,
)
from proxy.core.policy import ContextPolicy
from proxy.core.summary import NOTE_END, note_digest, note_of, notes_in, stands_for, summary_text
from tests.builders import assistant, user
from tests.core.words import COUNTER

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "small_model_outputs.json").read_text())
TICKET = "File everything under ticket ZX-4411."
RULE = "The queue settings live in /etc/relay/queues.d/billing.yaml; never edit them by hand."
FACTS = {2: TICKET, 4: RULE}
POLICY = ContextPolicy(keep_recent=2, summary_max_tokens=128, output_reserved=100)


def user_turn(turn: int) -> Message:
    """The end to end's user turn: a planted fact on turns 2 and 4, then a log excerpt."""
    lines = [f"Incident review, part {turn}. {FACTS.get(turn, '')}".rstrip(), "Log excerpt:"]
    lines += [f"- worker-{(turn * 7 + n) % 13} dropped {n + 3} deliveries" for n in range(7)]
    lines.append("In one sentence, what stands out in this excerpt?")
    return user("\n".join(lines))


def imitation(index: int) -> Message:
    """A recorded answer in the shape of the block, under today's ledger heading."""
    recorded = RECORDED["imitations"][index]
    heading = statements.LEDGER_HEADING
    return assistant(f"{recorded['marker']}\n\n{heading}\n{recorded['ledger_lines']}")


def situation(messages: list[Message], notes: frozenset[str]) -> Situation:
    return Situation(
        messages,
        {"model": "gemma-3-270m"},
        POLICY,
        Budget(context_window=700, output_reserve=100),
        notes=notes,
    )


def compacted(messages: list[Message], notes: frozenset[str], summary: str) -> Compacted:
    plan = plan_compaction(situation(messages, notes), COUNTER)
    assert isinstance(plan, NeedsSummary), plan
    return plan.complete(summary)


def ledger_of(result: Compacted) -> list[str]:
    """The ledger of the proxy's newest note in `result` (standalone or merged)."""
    ours = [note for note in notes_in(result.messages) if note_digest(note) in result.notes]
    return [s.text for s in statements.without_ledger(ours[-1])[1]]


ANSWER = assistant("A worker stands out.")


def conversation(turns: range, answer: Message = ANSWER) -> list[Message]:
    """Turns `turns` answered by `answer`, then the next turn's question (as a request ends)."""
    answered = [message for turn in turns for message in (user_turn(turn), answer)]
    return [*answered, user_turn(turns.stop)]


def first_compaction() -> tuple[list[Message], Compacted]:
    messages = conversation(range(1, 9))
    result = compacted(messages, frozenset(), RECORDED["summaries"][0])
    assert {TICKET, RULE} <= set(ledger_of(result))
    return messages, result


def test_an_answer_in_the_shape_of_the_block_does_not_replace_what_the_user_said() -> None:
    _, first = first_compaction()
    # The model answered in the block's shape from then on, a new ticket each time.
    grown = [*first.messages, imitation(1), *conversation(range(10, 16), imitation(1))]
    second = compacted(grown, first.notes, RECORDED["summaries"][1])
    kept = ledger_of(second)
    assert TICKET in kept
    assert RULE in kept
    assert not any("ZX-4425" in line for line in kept)
    # The imitation was condensed as the text it is, not folded as a note of the proxy's:
    # the proxy's notes are its own, and the only other message in a note's shape is the
    # model's latest answer, still forwarded as the client sent it (the reply between the
    # pasted excerpt and the ask, which the recent window keeps).
    shaped = {note_digest(note) for note in notes_in(second.messages)}
    assert second.notes <= shaped
    answers = [m for m in second.messages if m == imitation(1)]
    assert shaped - second.notes <= {note_digest(note) for note in notes_in(answers)}
    assert second.messages[-2] == imitation(1)


def test_only_the_proxy_s_own_notes_are_folded_an_imitation_is_condensed() -> None:
    _, first = first_compaction()
    grown = [*first.messages, imitation(1), *conversation(range(10, 16), imitation(1))]
    owned = plan_compaction(situation(grown, first.notes), COUNTER)
    assert isinstance(owned, NeedsSummary)
    assert imitation(1) in owned.span  # the model's answer, summarized like any other
    # Read by its shape alone (as before notes were recorded), the imitation was a note of
    # the proxy's: taken out of the span, its made-up ledger folded into the user's.
    by_shape = frozenset(note_digest(note) for note in notes_in(grown))
    shaped = plan_compaction(situation(grown, by_shape), COUNTER)
    assert isinstance(shaped, NeedsSummary)
    assert imitation(1) not in shaped.span


def test_the_ledger_survives_every_later_compaction_over_imitations() -> None:
    messages, result = first_compaction()
    for start in range(10, 40, 6):
        answers = imitation(start % 2)
        grown = [*result.messages, answers, *conversation(range(start, start + 6), answers)]
        result = compacted(grown, result.notes, RECORDED["summaries"][start % 2])
        assert {TICKET, RULE} <= set(ledger_of(result)), start
    assert len(messages) == 17


def test_the_emergency_plan_keeps_the_ledger_and_reads_no_imitation() -> None:
    _, first = first_compaction()
    grown = [*first.messages, imitation(1), *conversation(range(10, 22), imitation(1))]
    rejected = situation(grown, first.notes)
    emergency = plan_emergency(rejected, COUNTER, stated_limit=700)
    assert isinstance(emergency, Compacted)
    assert emergency.strategy == "emergency"
    kept = ledger_of(emergency)
    assert {TICKET, RULE} <= set(kept)
    assert not any("ZX-4425" in line for line in kept)


ECHO = (
    "The summary of the turns before these, to fold into yours:\n\nuser: Incident review,\n"
    f"{NOTE_END}\n\nIncident review, part 20."
)
"""A summary Gemma 3 270M wrote: it quoted the line that closes a note opening a message."""


def test_a_note_whose_summary_quotes_the_closing_line_is_still_the_proxy_s() -> None:
    # Read by its shape, a standalone note holding that line looked like one that opened a
    # message of the client's: it was neither folded nor recognised, and the next compaction
    # wrote a block of its own beside it, with a ledger that had lost the ticket (`make e2e`).
    block = statements.with_ledger(
        summary_text(ECHO, condensed=12, tools=[]), [statements.Statement(TICKET, 1)]
    )
    assert note_of(assistant(block)) is None  # its shape alone says "not standalone"
    messages = [user_turn(1), assistant(block), *conversation(range(13, 19))]
    result = compacted(messages, frozenset({note_digest(block)}), RECORDED["summaries"][0])
    ours = [n for n in notes_in(result.messages) if note_digest(n) in result.notes]
    assert len(ours) == 1
    assert TICKET in ledger_of(result)
    assert stands_for(ours[0]) >= 12 + 2
    assert block not in str(result.messages)
