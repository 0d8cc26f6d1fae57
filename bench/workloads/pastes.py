"""Issue 38's workloads whose users paste bulk into their turns: a log beside one statement.

- `paste-per-turn`: the tool-heavy agent (two results of about 1k tokens a turn) whose every
  user turn pastes about 600 tokens of a worker's log, unique to the turn, beside at most one
  planted statement (the ten facts, one a turn). The log is data: none of its lines may
  reach the ledger, and no paste may push a later statement out of it.
- `fixed-heavy-pastes`: 4k tokens of instructions and eight more tools (short schemas, about
  600 tokens together) on a 16k window, user turns pasting 2.5k tokens of log, two results
  of about 800 tokens a turn: the fidelity issue's targets (at least 3 requests per
  compaction, summaries read from the provider's cache) missed on this shape. The head
  (0.43 of the usable input) and a whole running turn fit under the trigger, so one
  compaction a turn (3 requests) is possible: at the turn's first request, landing at the
  target with the head and the ask (its paste included) left, then room for both results.

A log line carries a timestamp, a worker, a queue and numbers, so that the proxy's
extraction of specifics (identifiers, numbers) finds something in every line: the shape
that flooded the ledger. No line can produce a checked value (no region, ticket, version,
path, amount, handle or channel, and durations are written `took_ms=212`, never `212 ms`).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from bench.workloads.filler import (
    TOOLS,
    agent_script,
    endless,
    new_draft,
    prose,
    sized_lines,
    spread,
    user_turns,
)
from bench.workloads.model import Plan, Workload
from bench.workloads.said import FACTS
from proxy.core.tokens import TokenCounter

PASTE_TOKENS: Final = 600
"""A paste-per-turn user turn's log."""
_WORKERS: Final = ("ingest", "billing", "mailer", "export", "reindex", "webhook")
_QUEUES: Final = ("events", "invoices", "emails", "reports", "search", "hooks", "retries")
_EVENTS: Final = (
    ("INFO", "job done"),
    ("INFO", "lease renewed"),
    ("INFO", "batch flushed"),
    ("WARN", "retry scheduled"),
    ("WARN", "slow ack"),
    ("ERROR", "handler raised TimeoutError"),
    ("INFO", "checkpoint written"),
)
_EPOCH: Final = datetime(2026, 11, 20, tzinfo=UTC)


def _log_line(rng: random.Random, at: datetime) -> str:
    level, event = rng.choice(_EVENTS)
    worker = f"{rng.choice(_WORKERS)}-{rng.randint(1, 12)}"
    return (
        f"{at.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {worker} {level} "
        f"queue={rng.choice(_QUEUES)} job={rng.getrandbits(32):08x} "
        f"attempt={rng.randint(1, 5)} depth={rng.randint(0, 9_999)} "
        f"took_ms={rng.randint(3, 4_000)} {event}"
    )


def worker_log(tokens: int, seed: int, counter: TokenCounter) -> str:
    """About `tokens` of a worker log, unique to `seed` (its lines start an hour per seed
    after the epoch, a few milliseconds apart, with fresh job ids)."""
    rng = random.Random(seed)
    clock = [_EPOCH + timedelta(hours=seed % 10_000)]

    def line(_: int) -> str:
        clock[0] += timedelta(milliseconds=rng.randint(5, 900))
        return _log_line(rng, clock[0])

    return sized_lines(endless(line), tokens, counter)


def paste_per_turn(plan: Plan, counter: TokenCounter) -> Workload:
    """The tool-heavy agent's turns with a ~600-token log pasted into each request; the ten
    facts one a turn, spread over the whole session (at least eleven turns, the calls cap
    permitting: turn 0 is pinned, and each fact needs a turn of its own to be ordered)."""
    draft = new_draft(plan, counter, seed=909)
    pastes: list[str] = []
    while (draft.room(3) or len(draft.bodies) <= len(FACTS)) and draft.calls + 3 <= plan.max_calls:
        paste = worker_log(PASTE_TOKENS, 9_000 + len(draft.bodies), counter)
        pastes.append(paste)
        ask = "The workers stall again; here is the log of the last run. " + prose(
            draft.rng, draft.rng.randint(60, 120), counter
        )
        tools = (draft.sized(1000, 0.3, 400, 2400), draft.sized(1000, 0.3, 400, 2400))
        answer = prose(draft.rng, round(draft.rng.uniform(150, 250) * plan.bulk), counter)
        draft.add(f"{ask}\n\n{paste}", tools, answer)
    placed = spread(FACTS, len(draft.bodies), 0.0, 1.0)
    return Workload(
        "paste-per-turn",
        "You are a coding agent working in the user's repository.",
        TOOLS,
        agent_script(2, tuple(draft.answers)),
        user_turns(draft, placed),
        FACTS,
        running_turn=True,
        pastes=tuple(pastes),
    )


INSTRUCTION_TOKENS: Final = 4_000
"""The fixed-heavy agent with pastes: its instructions, besides its tools' schemas."""
HEAVY_PASTE_TOKENS: Final = 2_500
_EXTRA_TOOLS: Final = (
    "shell", "apply_patch", "read_file", "run_tests", "grep", "list_dir", "update_plan",
    "write_file",
)  # fmt: skip


def _extra_tools(rng: random.Random, counter: TokenCounter) -> tuple[dict[str, Any], ...]:
    """`_EXTRA_TOOLS` as short schemas (about 75 tokens each): a sentence or two of
    description, two described parameters."""
    tools = []
    for name in _EXTRA_TOOLS:
        properties = {
            field: {"type": "string", "description": prose(rng, 8, counter)}
            for field in ("target", "mode")
        }
        function = {
            "name": name,
            "description": prose(rng, 35, counter),
            "parameters": {"type": "object", "properties": properties, "required": ["target"]},
        }
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def fixed_heavy_pastes(plan: Plan, counter: TokenCounter) -> Workload:
    """4k tokens of instructions and eight short tool schemas, then turns of a short ask with
    a 2.5k-token log pasted, two results of about 800 tokens and a short answer."""
    draft = new_draft(plan, counter, seed=1_010)
    tools = _extra_tools(draft.rng, counter)
    system = "You are a coding agent running in the user's terminal. " + prose(
        draft.rng, INSTRUCTION_TOKENS, counter
    )
    pastes: list[str] = []
    while draft.room(3) or not draft.bodies:
        paste = worker_log(HEAVY_PASTE_TOKENS, 10_000 + len(draft.bodies), counter)
        pastes.append(paste)
        ask = "Here is the worker log since the last deploy; find what breaks the queue. " + (
            prose(draft.rng, draft.rng.randint(40, 80), counter)
        )
        sizes = (draft.sized(800, 0.2, 500, 1200), draft.sized(800, 0.2, 500, 1200))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(f"{ask}\n\n{paste}", sizes, answer)
    return Workload(
        "fixed-heavy-pastes",
        system,
        tools,
        agent_script(2, tuple(draft.answers)),
        user_turns(draft, {}),
        (),
        running_turn=True,
        pastes=tuple(pastes),
    )
