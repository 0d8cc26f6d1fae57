"""Filler (prose, code, logs with no checked value) and the planning of a session's turns."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from bench.workloads.model import CALL_TOKENS, MESSAGE_TOKENS, Plan, Statement, UserTurn
from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript

_SUBJECTS: Final = (
    "the handler", "the parser", "the scheduler", "the cache layer", "the retry loop",
    "the upload worker", "the settings loader", "the request router", "the audit trail",
    "the queue consumer", "the report builder", "the session store", "the health check",
)  # fmt: skip
_VERBS: Final = (
    "validates", "rejects", "buffers", "retries", "serializes", "forwards", "caches",
    "normalizes", "batches", "logs", "streams", "measures", "rewrites",
)  # fmt: skip
_OBJECTS: Final = (
    "every incoming payload", "the pending jobs", "stale entries", "partial uploads",
    "the error responses", "duplicate events", "the nightly exports", "malformed headers",
    "the audit records", "slow queries", "the outgoing webhooks", "expired tokens",
)  # fmt: skip
_TAILS: Final = (
    "before the response is written", "while the lock is held", "after the backoff expires",
    "when the queue is drained", "without blocking the event loop", "once per request",
    "so the dashboard stays accurate", "and reports progress to the operator",
)  # fmt: skip
NAMES: Final = (
    "parse", "load", "store", "flush", "retry", "render", "fetch", "merge", "split",
    "queue", "route", "audit", "report", "cache", "check",
)  # fmt: skip
MODULES: Final = ("api", "core", "jobs", "store", "web", "auth", "billing", "reports")


def _sentence(rng: random.Random) -> str:
    parts = (rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_TAILS))
    return " ".join(parts).capitalize() + "."


def sized_lines(lines: Iterable[str], tokens: int, counter: TokenCounter, sep: str = "\n") -> str:
    """The first lines of `lines` that make about `tokens` tokens, joined by `sep`."""
    taken: list[str] = []
    total = 0
    for line in lines:
        if total >= tokens:
            break
        # Counted with its separator: a space merges into the next word's token.
        total += counter.text(sep + line if taken else line)
        taken.append(line)
    return sep.join(taken)


def endless(make: Callable[[int], str]) -> Iterable[str]:
    index = 0
    while True:
        yield make(index)
        index += 1


def prose(rng: random.Random, tokens: int, counter: TokenCounter) -> str:
    """English prose of about `tokens` tokens, with no digit and no checked value."""
    return sized_lines(endless(lambda _: _sentence(rng)), tokens, counter, sep=" ")


def code_line(rng: random.Random, n: int) -> str:
    name, other = rng.choice(NAMES), rng.choice(NAMES)
    return f"def {name}_{other}_{n}(request):\n    return {other}(request, step={n})"


def _test_line(rng: random.Random, n: int) -> str:
    status = "FAILED" if rng.random() < 0.06 else "PASSED"
    return f"tests/test_{rng.choice(MODULES)}.py::test_{rng.choice(NAMES)}_{n} {status}"


def _grep_line(rng: random.Random, n: int) -> str:
    module, name = rng.choice(MODULES), rng.choice(NAMES)
    return f"src/{module}/{name}_{n % 17}.py:{n * 7 + 3}: result = {name}(payload, retry=True)"


_TOOL_LINES: Final[dict[str, Callable[[random.Random, int], str]]] = {
    "read_file": code_line,
    "run_tests": _test_line,
    "grep": _grep_line,
    # opencode's names for the same tools (the long single turns call them).
    "read": code_line,
    "bash": _test_line,
}


def tool_output(name: str, tokens: int, seed: int, counter: TokenCounter) -> str:
    """A result of tool `name` of about `tokens` tokens: source, a test log or search hits."""
    rng = random.Random(seed)
    line = _TOOL_LINES.get(name, _grep_line)
    return sized_lines(endless(lambda n: line(rng, n)), tokens, counter)


def schema(name: str, description: str, parameter: str = "arg") -> dict[str, Any]:
    parameters = {"type": "object", "properties": {parameter: {"type": "string"}}}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOLS: Final = (
    schema("read_file", "Read a file of the repository."),
    schema("run_tests", "Run the test suite of a package and return its log."),
    schema("grep", "Search the repository for a pattern."),
)


def agent_script(rounds: int, answers: tuple[str, ...]) -> AgentScript:
    # Arguments without digits or paths: the good summarizer quotes every transcript line
    # with a specific, and a line per tool call would crowd the user's statements out.
    calls = tuple(
        (name, json.dumps({"arg": module}))
        for module in MODULES
        for name in ("read_file", "run_tests", "grep")
    )
    return AgentScript(calls=calls, rounds_per_turn=rounds, answers=answers)


# --- planning a session -----------------------------------------------------------------------


def spread(
    items: tuple[Statement, ...], turns: int, start: float, end: float
) -> dict[int, list[Statement]]:
    """`items` over the turns in [start, end) of `turns` (shares), in order, never on turn 0
    (the first user message is pinned by the proxy: a fact there proves nothing)."""
    low = min(max(1, math.floor(start * turns)), max(turns - 1, 0))
    high = max(low + 1, min(math.ceil(end * turns), turns))
    placed: dict[int, list[Statement]] = {}
    for index, item in enumerate(items):
        turn = low + index * (high - low) // len(items)
        placed.setdefault(turn, []).append(item)
    return placed


@dataclass(slots=True)
class Draft:
    """A session being planned: turns are added until the plan's history or calls run out."""

    plan: Plan
    counter: TokenCounter
    rng: random.Random
    bodies: list[str]
    tool_tokens: list[tuple[int, ...]]
    answers: list[str]
    tokens: int = 0
    calls: int = 0

    def room(self, calls: int) -> bool:
        plan = self.plan
        return self.tokens < plan.history_tokens and self.calls + calls <= plan.max_calls

    def add(self, body: str, tools: tuple[int, ...], answer: str) -> None:
        self.bodies.append(body)
        self.tool_tokens.append(tools)
        self.answers.append(answer)
        self.calls += len(tools) + 1
        framing = MESSAGE_TOKENS * (2 + 2 * len(tools)) + CALL_TOKENS * len(tools)
        text = self.counter.text(body) + self.counter.text(answer)
        self.tokens += text + sum(tools) + framing

    def sized(self, median: float, sigma: float, low: float, high: float) -> int:
        """A log-normal size around `median` (times the plan's bulk), clipped to a range."""
        value = self.rng.lognormvariate(math.log(median), sigma)
        return round(min(max(value, low), high) * self.plan.bulk)


def new_draft(plan: Plan, counter: TokenCounter, seed: int) -> Draft:
    return Draft(plan, counter, random.Random(seed), [], [], [])


def with_statements(bodies: list[str], placed: dict[int, list[Statement]]) -> list[str]:
    # Each statement on a line of its own after the request, as a user adds a remark.
    return [
        "\n".join([body, *(s.text for s in placed.get(index, []))])
        for index, body in enumerate(bodies)
    ]


def user_turns(
    draft: Draft,
    placed: dict[int, list[Statement]],
    results: dict[int, tuple[str | None, ...]] | None = None,
) -> tuple[UserTurn, ...]:
    texts = with_statements(draft.bodies, placed)
    written = results or {}
    return tuple(
        UserTurn(text, tools, written.get(index, ()))
        for index, (text, tools) in enumerate(zip(texts, draft.tool_tokens, strict=True))
    )
