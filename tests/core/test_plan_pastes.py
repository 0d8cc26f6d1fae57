"""A paste per user turn: the ledger keeps the user's words, names each paste, and keeps order.

The issue's tool-heavy agent in an 8k window, each user turn pasting about 600 tokens of
unique log beside one statement, two results of about 1k tokens per turn, compacted request
after request as the checkpoint does (the last compaction's messages, then the new turn).
Before pastes were data, the ledger kept turn 0's 42 pasted lines and turn 1's 15, then
nothing of turns 3 to 19: half the planted statements were lost.
"""

from __future__ import annotations

import pytest

from proxy.core import pastes
from proxy.core import statements as ledger
from proxy.core.budget import request_budget
from proxy.core.messages import Message, role, text
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import detach_notes, note_digest, notes_in
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER, TOOLS

PLANTED = tuple(
    f"Remember: the {what} is {value}."
    for what, value in [
        ("deploy region", "eu-west-7"),
        ("ticket", "OPS-4411"),
        ("budget", "$9,120"),
        ("on-call handle", "@mkovacs"),
        ("freeze date", "2026-12-18"),
        ("queue", "billing-retry-3"),
        ("owner", "Priya Raman"),
        ("port", "8443"),
        ("bucket", "s3://relay-archive-9"),
        ("release", "v4.12.1"),
    ]
)
TURNS = 20


def pasted_log(turn: int) -> str:
    """About 600 tokens of log no other turn has."""
    return "\n".join(
        f"2026-11-30T{turn:02d}:{n:02d}:07Z worker-{(turn + n) % 9} relay=eu{turn} "
        f"delivered={turn * 100 + n} dropped={n % 4} lag_ms={(turn * 37 + n * 11) % 900}"
        for n in range(60)
    )


SHAPES = ("chat", "one part", "parts")
"""A user message as chat sends it (a string), as the Messages and Responses APIs carry it
(text parts: the Anthropic SDK's one block), and with the paste a block of its own."""


def user_turn(turn: int, shape: str = "chat") -> Message:
    said = PLANTED[turn // 2] if turn % 2 == 0 else f"Turn {turn}: look at the relay again."
    paste = f"```\n{pasted_log(turn)}\n```"
    if shape == "chat":
        return user(f"{said}\n\n{paste}")
    texts = [f"{said}\n\n{paste}"] if shape == "one part" else [said, paste]
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def tool_round(turn: int, n: int) -> list[Message]:
    call = f"call_{turn}_{n}"
    body = " ".join(f"line{turn}_{n}_{i}" for i in range(1_000))
    return [assistant_calls(call), tool_result(call, body)]


def situation(messages: list[Message], notes: frozenset[str]) -> Situation:
    budget = request_budget(8192, TOOLS, output_reserved=1024, margin_share=0.03)
    return Situation(messages, TOOLS, ContextPolicy(), budget, notes=notes, recall="s")


def compacted(messages: list[Message], notes: frozenset[str]) -> Compacted | None:
    plan = plan_compaction(situation(messages, notes), COUNTER)
    if isinstance(plan, NeedsSummary):
        return plan.complete("The agent looked at the relay.")  # a summary that says nothing
    return plan if isinstance(plan, Compacted) else None


def block_ledger(messages: list[Message], notes: frozenset[str]) -> list[ledger.Statement]:
    ours = [note for note in notes_in(messages) if note_digest(note) in notes]
    return ledger.without_ledger(ours[-1])[1] if ours else []


@pytest.mark.parametrize("shape", SHAPES)
def test_every_statement_is_kept_in_order_and_no_pasted_line_is_in_the_ledger(
    shape: str,
) -> None:
    messages: list[Message] = [system("You are an operations agent.")]
    notes: frozenset[str] = frozenset()
    for turn in range(TURNS):
        messages = [*messages, user_turn(turn, shape)]
        for n in range(2):
            messages += tool_round(turn, n)
            result = compacted(messages, notes)
            if result is not None:
                messages, notes = list(result.messages), result.notes
        messages.append(assistant(f"Turn {turn} checked."))
    kept = block_ledger(messages, notes)
    assert kept, "no compaction"
    words = [s.text for s in kept if s.rank != ledger.PASTE]
    forwarded = "\n".join(text(detach_notes(m)[0]) for m in messages)
    # Every planted statement, in the ledger in the order said or still forwarded.
    in_ledger = [s for s in PLANTED if s in words]
    assert all(s in words or s in forwarded for s in PLANTED)
    assert in_ledger == sorted(in_ledger, key=PLANTED.index)
    assert len(in_ledger) >= 5
    # No pasted line is a statement; each paste that left is named in one line, by its id.
    assert not any("worker-" in s for s in words)
    named = [s.text for s in kept if s.rank == ledger.PASTE]
    assert named
    assert all('context_recall(id="rc_' in line for line in named)
    # The pastes still forwarded before the recent turns were cut to head and tail, their
    # words whole, whatever the shape (text parts cut in place, not left whole for the
    # older turns to be dropped instead: with parts, only the last two were left).
    users = [m for m in messages if role(m) == "user"]
    assert len(users) > 2
    assert all(pastes.is_cut(text(m)) for m in users[:-2])
    assert all(text(m).startswith(("Remember: ", "Turn ")) for m in users)
