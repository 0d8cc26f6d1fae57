"""A tool-schema-heavy client: schemas take 0.9 of the usable input, the user's turns are short
plain requests whose values the next call needs ("Flag it as urgent.", "Use card 4417.").

Replayed function-calling trajectories met this shape at 6k. The ledger's allowance is a
quarter of the room the schemas leave, and its extension counted only the user's rules and
specifics: a plain request ranks as chatter, so a third of the earlier sentences of ten
short turns were in no forwarded message.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.core import statements as ledger
from proxy.core.budget import request_budget
from proxy.core.messages import Message, role, text
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import detach_notes, note_digest, notes_in
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER

ASKED = (
    "Send 'The budget review moved to Thursday' to Maria Chen. Flag it as urgent.",
    "Book an economy flight from SFO to JFK on 2024-12-05 for Alex Rivera. Use card 4417.",
    "Buy 35 shares of NVDA at a limit of 118.40 dollars.",
    "Make a folder called quarterly_reports. Put budget_final.xlsx in it next.",
    "Post 'Landing at 18:20' to the travel channel.",
    "Add TSLA and AMD to my watchlist.",
    "Insure booking BK-20931 for 250 dollars. Pay with the same card.",
    "Find messages from Maria Chen that mention the budget.",
    "Cancel the NVDA limit order if it has not filled.",
    "What does a business seat from JFK to LHR cost on 2025-01-14?",
)


NOTE = "The queue consumer caches the error responses and reports progress to the operator. " * 2


def schemas(tokens: int) -> dict[str, Any]:
    """About `tokens` of tool schemas, in a dozen tools."""
    words = " ".join(f"field{i}" for i in range(tokens // 12))
    tools: list[dict[str, Any]] = []
    for n in range(12):
        parameters = {"type": "object", "properties": {"value": {"description": words}}}
        tools.append(
            {"type": "function", "function": {"name": f"tool_{n}", "parameters": parameters}}
        )
    return {"tools": tools}


def sentences(asked: str) -> list[str]:
    return [s.text for s in ledger.message_statements(user(asked), False)]


def test_every_earlier_sentence_is_in_the_ledger_or_forwarded() -> None:
    budget = request_budget(6144, {}, output_reserved=1024, margin_share=0.03)
    tools = schemas(int(budget.tokens_at(1.0) * 0.9))
    messages: list[Message] = [system("You complete the user's requests with the tools given.")]
    notes: frozenset[str] = frozenset()
    compactions = 0
    for turn, asked in enumerate(ASKED):
        call = f"call_{turn}"
        for step in ([user(asked)], [assistant_calls(call, name=f"tool_{turn}")]):
            messages = [*messages, *step]
        note = "The queue consumer caches the error responses and reports progress to the operator."
        messages += [
            tool_result(call, json.dumps({"status": "success", "turn": turn, "note": note}))
        ]
        situation = Situation(messages, tools, ContextPolicy(), budget, notes=notes, recall="s")
        plan = plan_compaction(situation, COUNTER)
        result = (
            plan.complete("The user asked for things.") if isinstance(plan, NeedsSummary) else plan
        )
        if isinstance(result, Compacted):
            messages, notes = list(result.messages), result.notes
            compactions += 1
        ours = [n for n in notes_in(messages) if note_digest(n) in notes]
        kept = {s.text for s in ledger.without_ledger(ours[-1])[1]} if ours else set()
        forwarded = "\n".join(text(detach_notes(m)[0]) for m in messages if role(m) == "user")
        earlier = [s for asked_before in ASKED[:turn] for s in sentences(asked_before)]
        missing = [s for s in earlier if s not in kept and s not in forwarded]
        assert not missing, (turn, missing)
        # The running ask goes as the user sent it.
        assert any(text(detach_notes(m)[0]).endswith(asked) for m in messages if role(m) == "user")
        messages.append(assistant(f"Done: turn {turn}."))
    assert compactions >= 2
