"""Issue 38's tool-schema-heavy client: schemas fill about 0.9 of a 6k window's usable input.

Shaped like the multi-turn function-calling trajectories the issue replayed (file system,
messaging, travel and trading tools): a short system prompt, about thirty tools with long
descriptions and described parameters, then ten short user turns, each giving the values
the next call needs (a message to send, a travel class, a share count), one call a turn with
those values, a small JSON result and a one-line answer. What is left of the window for the
conversation is a few hundred tokens, so the proxy compacts nearly every request; the
running user message must still go out verbatim, and every earlier sentence the user said
must still be in the request (the ledger, or the message itself).

The session is as long whatever the plan: every earlier sentence and the running turn must
be able to fit in the room the schemas leave (`tests/test_bench_workloads.py` checks it).
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from bench.workloads.filler import prose
from bench.workloads.model import Plan, UserTurn, Workload
from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript

HEAD_TOKENS: Final = 3_500
"""The system prompt and the tools' schemas, ours: 0.87 of a 6,144-token window's usable
input (4,423 of the provider's tokens, which count 10 % more than ours, as the matrix's mock
does), the issue's "about 0.9"."""
_TOOLS: Final = (
    ("ls", ("path", "show_hidden")), ("cd", ("folder",)), ("mkdir", ("dir_name",)),
    ("mv", ("source", "destination")), ("cp", ("source", "destination")),
    ("cat", ("file_name",)), ("grep", ("file_name", "pattern")), ("touch", ("file_name",)),
    ("rm", ("file_name",)), ("find", ("path", "name")), ("wc", ("file_name", "mode")),
    ("tail", ("file_name", "lines")), ("diff", ("file_name1", "file_name2")),
    ("send_message", ("receiver_id", "message", "priority")),
    ("view_messages_sent", ("receiver_id",)), ("search_messages", ("keyword", "sender")),
    ("delete_message", ("receiver_id", "message_id")), ("add_contact", ("user_name",)),
    ("post_message", ("channel", "text")),
    ("book_flight", ("travel_from", "travel_to", "travel_date", "travel_class", "traveler",
                     "card_id")),
    ("get_flight_cost", ("travel_from", "travel_to", "travel_date", "travel_class")),
    ("cancel_booking", ("booking_id",)), ("purchase_insurance", ("booking_id", "amount",
                                                                 "card_id")),
    ("retrieve_invoice", ("booking_id",)), ("get_nearest_airport_by_city", ("location",)),
    ("place_order", ("symbol", "amount", "price", "order_type")),
    ("cancel_order", ("symbol", "order_type")), ("get_stock_info", ("symbol",)),
    ("add_to_watchlist", ("stocks",)), ("get_watchlist", ()), ("fund_account", ("amount",)),
    ("get_account_info", ()),
)  # fmt: skip
_SYSTEM: Final = "You are an assistant that completes the user's requests with the tools given."

# Each turn: the user's sentences (the values in them), then the call that uses the values.
_TURNS: Final[tuple[tuple[tuple[str, ...], str, dict[str, str]], ...]] = (
    (("Send 'The budget review moved to Thursday' to Maria Chen.", "Flag it as urgent."),
     "send_message",
     {"receiver_id": "Maria Chen", "message": "The budget review moved to Thursday",
      "priority": "urgent"}),
    (("Book an economy flight from SFO to JFK on 2024-12-05 for Alex Rivera.",
      "Use card 4417."),
     "book_flight",
     {"travel_from": "SFO", "travel_to": "JFK", "travel_date": "2024-12-05",
      "travel_class": "economy", "traveler": "Alex Rivera", "card_id": "4417"}),
    (("Buy 35 shares of NVDA at a limit of 118.40 dollars.",),
     "place_order",
     {"symbol": "NVDA", "amount": "35", "price": "118.40", "order_type": "limit"}),
    (("Make a folder called quarterly_reports.", "Put budget_final.xlsx in it next."),
     "mkdir", {"dir_name": "quarterly_reports"}),
    (("Post 'Landing at 18:20' to the travel channel.",),
     "post_message", {"channel": "travel", "text": "Landing at 18:20"}),
    (("Add TSLA and AMD to my watchlist.",),
     "add_to_watchlist", {"stocks": "TSLA, AMD"}),
    (("Insure booking BK-20931 for 250 dollars.", "Pay with the same card."),
     "purchase_insurance", {"booking_id": "BK-20931", "amount": "250", "card_id": "4417"}),
    (("Find messages from Maria Chen that mention the budget.",),
     "search_messages", {"keyword": "budget", "sender": "Maria Chen"}),
    (("Cancel the NVDA limit order if it has not filled.",),
     "cancel_order", {"symbol": "NVDA", "order_type": "limit"}),
    (("What does a business seat from JFK to LHR cost on 2025-01-14?",),
     "get_flight_cost",
     {"travel_from": "JFK", "travel_to": "LHR", "travel_date": "2025-01-14",
      "travel_class": "business"}),
)  # fmt: skip


def _schemas(counter: TokenCounter) -> tuple[dict[str, Any], ...]:
    """The tools, their descriptions grown evenly until the head is `HEAD_TOKENS`."""
    system = counter.messages([{"role": "system", "content": _SYSTEM}])
    words = 4
    while True:
        tools = tuple(_schema(name, params, words, counter) for name, params in _TOOLS)
        if system + counter.tools({"tools": list(tools)}) >= HEAD_TOKENS:
            return tools
        words += 1


def _schema(
    name: str, params: tuple[str, ...], words: int, counter: TokenCounter
) -> dict[str, Any]:
    seeded = random.Random(f"{name}-{words}")  # the same text at every growth step
    properties = {
        param: {"type": "string", "description": prose(seeded, 8, counter)} for param in params
    }
    function = {
        "name": name,
        "description": prose(seeded, words, counter),
        "parameters": {"type": "object", "properties": properties, "required": list(params)},
    }
    return {"type": "function", "function": function}


def _result(call: str, rng: random.Random, counter: TokenCounter) -> str:
    """A small JSON result (30 to 60 tokens), as the trajectories' tools return."""
    tokens = rng.randint(30, 60)
    result = {"status": "success", "call": call, "note": prose(rng, tokens - 12, counter)}
    return json.dumps(result)


def schema_heavy(plan: Plan, counter: TokenCounter) -> Workload:
    """Ten short turns, each giving the values its one call needs; the plan's size does not
    matter (see the module's docstring)."""
    rng = random.Random(1_414)
    tools = _schemas(counter)
    turns, answers, calls = [], [], []
    for sentences, name, arguments in _TURNS:
        result = _result(name, rng, counter)
        turns.append(
            UserTurn(" ".join(sentences), (counter.text(result),), (result,), sentences=sentences)
        )
        answers.append(prose(rng, rng.randint(12, 24), counter))
        calls.append((name, json.dumps(arguments)))
    return Workload(
        "schema-heavy",
        _SYSTEM,
        tools,
        AgentScript(calls=tuple(calls), rounds_per_turn=1, answers=tuple(answers)),
        tuple(turns),
        (),
        running_turn=True,
    )
