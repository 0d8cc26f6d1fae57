"""The effectiveness matrix's workloads: scripted sessions, deterministic and seeded.

A workload is what a client says and what its tools return, planned before the session
runs: the user turns (with the statements planted in them), the size of every tool result,
and the model's answers (played by `proxy.mock_upstream`'s `AgentScript`). Three of them:

- `tool-heavy`: a coding agent; each user turn (about 2,600 tokens) is a user message, two
  tool calls (one per round) with results of log-normal size around 900 tokens, and a reply
  of about 200 tokens. Ten facts the user states are planted in the first half of the turns.
- `chatty`: an assistant without tools; user messages of 30-150 tokens, replies of 200-600,
  the same ten facts planted the same way.
- `typed`: a user making typed statements (safety rules, hard constraints, facts, goal
  state, preferences), some of them updated later with a new value; every user turn is
  followed by one tool round trip (a result of 300-900 tokens) and an answer.

What is checked afterwards is a set of exact substrings (a paraphrase is a loss, as in the
evaluations the proxy must pass); for an updated statement, its latest value. No generated
filler can produce a checked substring: the filler's words come from fixed vocabularies
without digits, and its digits only number lines and tests.

`bulk` multiplies the sizes of what the model and the tools produce (never the user's own
messages): the 128k cells use it so that they reach several compactions in about as many
model calls as the 32k cells.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript

Kind = Literal["rule", "constraint", "fact", "goal", "preference"]
KINDS: Final[tuple[Kind, ...]] = ("rule", "constraint", "fact", "goal", "preference")
WorkloadKey = Literal["tool-heavy", "chatty", "typed"]
WORKLOADS: Final[tuple[WorkloadKey, ...]] = ("tool-heavy", "chatty", "typed")
TITLES: Final[dict[str, str]] = {
    "tool-heavy": "tool-heavy agent",
    "chatty": "chatty assistant",
    "typed": "typed statements",
}

# Framing the counter adds per message and per tool call: close enough for planning.
_MESSAGE_TOKENS: Final = 4
_CALL_TOKENS: Final = 30


@dataclass(frozen=True, slots=True)
class Statement:
    """Something the user says that must reach the model: `key` is checked verbatim.

    Statements sharing a `topic` update one another: only the latest one's key is checked.
    """

    kind: Kind
    text: str
    key: str
    topic: str = ""


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str
    tool_tokens: tuple[int, ...]
    """The size of each tool result the client returns this turn, in tokens."""


@dataclass(frozen=True, slots=True)
class Workload:
    key: WorkloadKey
    system: str
    tools: tuple[dict[str, Any], ...]
    script: AgentScript
    turns: tuple[UserTurn, ...]
    statements: tuple[Statement, ...]
    """Every statement planted, updates included, in the order the user makes them."""

    @property
    def calls(self) -> int:
        """Model calls the session makes: each user turn's tool rounds, then its answer."""
        return sum(len(turn.tool_tokens) + 1 for turn in self.turns)

    @property
    def checks(self) -> tuple[Statement, ...]:
        """What must be in the last forwarded request: each topic's latest statement."""
        latest: dict[str, Statement] = {}
        for statement in self.statements:
            latest.pop(statement.topic or statement.key, None)  # keeps first-seen order
            latest[statement.topic or statement.key] = statement
        return tuple(latest.values())


@dataclass(frozen=True, slots=True)
class Plan:
    """How long a session to build: `history_tokens` of the client's history at the end,
    but no more than `max_calls` model calls; `bulk` scales model and tool output."""

    history_tokens: int
    max_calls: int
    bulk: float = 1.0


# --- what the user states ---------------------------------------------------------------------

# The facts of the tool-heavy agent and the chatty assistant: the kinds of things users say
# early and expect to be remembered (a region, a ticket, a port rule, a version, a path, ...).
FACTS: Final = (
    Statement("fact", "Deploy everything to the eu-west-3 region.", "eu-west-3"),
    Statement("fact", "Track this work under ticket PAY-7731.", "PAY-7731"),
    Statement("rule", "Never open port 8443 on any host.", "Never open port 8443"),
    Statement("fact", "We pin payments-sdk at version 3.14.2.", "3.14.2"),
    Statement("fact", "The service lives in /opt/payments/ledger-svc.", "/opt/payments/ledger-svc"),
    Statement("constraint", "The cloud budget for this month is $4,200.", "$4,200"),
    Statement("rule", "Always ask @mkovacs to review before merging.", "@mkovacs"),
    Statement("fact", "Page the #pay-oncall channel when something breaks.", "#pay-oncall"),
    Statement("constraint", "Keep the p95 latency under 180 ms.", "180 ms"),
    Statement("preference", "Write the release notes in British English.", "British English"),
)

_RULES: Final = (
    "Never delete the production database snapshots",
    "Never run terraform apply without a reviewed plan",
    "Never print secrets or API keys in the logs",
)

# The typed statements, as first made; `UPDATES` later give four of them a new value.
TYPED: Final = (
    *(Statement("rule", f"{rule}.", rule) for rule in _RULES),
    Statement("constraint", "The budget is $500.", "$500", "budget"),
    Statement("constraint", "Every reply must stay under 300 words.", "300 words"),
    Statement("constraint", "Scripts must run on Python 3.11.", "Python 3.11", "python"),
    Statement("fact", "The staging cluster is k8s-stg-euw1.", "k8s-stg-euw1"),
    Statement("fact", "Our release branch is release/2024.06.", "release/2024.06"),
    Statement("fact", "The commit that broke the build is 9f3c2e1b.", "9f3c2e1b"),
    Statement("fact", "The team lead is Priya Raman.", "Priya Raman"),
    Statement(
        "goal",
        "Goal: migrate the billing service to the new queue.",
        "migrate the billing service to the new queue",
    ),
    Statement(
        "goal",
        "Status: the schema migration is done and the backfill is next.",
        "the backfill is next",
        "status",
    ),
    Statement("preference", "No em-dashes in anything you write.", "No em-dashes"),
    Statement("preference", "My timezone is America/Los_Angeles.", "America/Los_Angeles", "tz"),
    Statement("preference", "Use metric units.", "metric units"),
    Statement("preference", "Keep commit subjects under 72 characters.", "72 characters"),
)
UPDATES: Final = (
    Statement("constraint", "The budget is now $700.", "$700", "budget"),
    Statement(
        "goal",
        "Status: the backfill is done and the cutover is next.",
        "the cutover is next",
        "status",
    ),
    Statement("preference", "My timezone is now Europe/Berlin.", "Europe/Berlin", "tz"),
    Statement("constraint", "Scripts must now run on Python 3.12.", "Python 3.12", "python"),
)


# --- filler: prose, code, logs ----------------------------------------------------------------

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
_NAMES: Final = (
    "parse", "load", "store", "flush", "retry", "render", "fetch", "merge", "split",
    "queue", "route", "audit", "report", "cache", "check",
)  # fmt: skip
_MODULES: Final = ("api", "core", "jobs", "store", "web", "auth", "billing", "reports")


def _sentence(rng: random.Random) -> str:
    parts = (rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_TAILS))
    return " ".join(parts).capitalize() + "."


def _sized(lines: Iterable[str], tokens: int, counter: TokenCounter, sep: str = "\n") -> str:
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


def _endless(make: Callable[[int], str]) -> Iterable[str]:
    index = 0
    while True:
        yield make(index)
        index += 1


def prose(rng: random.Random, tokens: int, counter: TokenCounter) -> str:
    """English prose of about `tokens` tokens, with no digit and no checked value."""
    return _sized(_endless(lambda _: _sentence(rng)), tokens, counter, sep=" ")


def _code_line(rng: random.Random, n: int) -> str:
    name, other = rng.choice(_NAMES), rng.choice(_NAMES)
    return f"def {name}_{other}_{n}(request):\n    return {other}(request, step={n})"


def _test_line(rng: random.Random, n: int) -> str:
    status = "FAILED" if rng.random() < 0.06 else "PASSED"
    return f"tests/test_{rng.choice(_MODULES)}.py::test_{rng.choice(_NAMES)}_{n} {status}"


def _grep_line(rng: random.Random, n: int) -> str:
    module, name = rng.choice(_MODULES), rng.choice(_NAMES)
    return f"src/{module}/{name}_{n % 17}.py:{n * 7 + 3}: result = {name}(payload, retry=True)"


_TOOL_LINES: Final[dict[str, Callable[[random.Random, int], str]]] = {
    "read_file": _code_line,
    "run_tests": _test_line,
    "grep": _grep_line,
}


def tool_output(name: str, tokens: int, seed: int, counter: TokenCounter) -> str:
    """A result of tool `name` of about `tokens` tokens: source, a test log or search hits."""
    rng = random.Random(seed)
    line = _TOOL_LINES.get(name, _grep_line)
    return _sized(_endless(lambda n: line(rng, n)), tokens, counter)


def _schema(name: str, description: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"arg": {"type": "string"}}}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOLS: Final = (
    _schema("read_file", "Read a file of the repository."),
    _schema("run_tests", "Run the test suite of a package and return its log."),
    _schema("grep", "Search the repository for a pattern."),
)


def _script(rounds: int, answers: tuple[str, ...]) -> AgentScript:
    # Arguments without digits or paths: the good summarizer quotes every transcript line
    # with a specific, and a line per tool call would crowd the user's statements out.
    calls = tuple(
        (name, json.dumps({"arg": module}))
        for module in _MODULES
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
class _Draft:
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
        framing = _MESSAGE_TOKENS * (2 + 2 * len(tools)) + _CALL_TOKENS * len(tools)
        text = self.counter.text(body) + self.counter.text(answer)
        self.tokens += text + sum(tools) + framing

    def sized(self, median: float, sigma: float, low: float, high: float) -> int:
        """A log-normal size around `median` (times the plan's bulk), clipped to a range."""
        value = self.rng.lognormvariate(math.log(median), sigma)
        return round(min(max(value, low), high) * self.plan.bulk)


def _draft(plan: Plan, counter: TokenCounter, seed: int) -> _Draft:
    return _Draft(plan, counter, random.Random(seed), [], [], [])


def _with_statements(bodies: list[str], placed: dict[int, list[Statement]]) -> list[str]:
    # Each statement on a line of its own after the request, as a user adds a remark.
    return [
        "\n".join([body, *(s.text for s in placed.get(index, []))])
        for index, body in enumerate(bodies)
    ]


def _turns(draft: _Draft, placed: dict[int, list[Statement]]) -> tuple[UserTurn, ...]:
    texts = _with_statements(draft.bodies, placed)
    return tuple(UserTurn(t, tools) for t, tools in zip(texts, draft.tool_tokens, strict=True))


def tool_heavy(plan: Plan, counter: TokenCounter) -> Workload:
    """About 2,600 tokens a user turn: a ~430-token request, two ~900-token tool results,
    a ~200-token reply; the facts in the first half of the turns."""
    draft = _draft(plan, counter, seed=101)
    while draft.room(3) or not draft.bodies:
        request = "Next step of the refactoring. " + prose(draft.rng, 430, counter)
        tools = (draft.sized(900, 0.35, 300, 2700), draft.sized(900, 0.35, 300, 2700))
        answer = prose(draft.rng, round(draft.rng.uniform(150, 250) * plan.bulk), counter)
        draft.add(request, tools, answer)
    placed = spread(FACTS, len(draft.bodies), 0.0, 0.5)
    return Workload(
        "tool-heavy",
        "You are a coding agent working in the user's repository.",
        TOOLS,
        _script(2, tuple(draft.answers)),
        _turns(draft, placed),
        FACTS,
    )


def chatty(plan: Plan, counter: TokenCounter) -> Workload:
    """No tools: questions of 30-150 tokens, answers of 200-600; the facts as above."""
    draft = _draft(plan, counter, seed=202)
    while draft.room(1) or not draft.bodies:
        question = prose(draft.rng, draft.rng.randint(30, 150), counter)
        answer = prose(draft.rng, round(draft.rng.uniform(200, 600) * plan.bulk), counter)
        draft.add(question, (), answer)
    placed = spread(FACTS, len(draft.bodies), 0.0, 0.5)
    return Workload(
        "chatty",
        "You are a helpful assistant.",
        (),
        _script(0, tuple(draft.answers)),
        _turns(draft, placed),
        FACTS,
    )


def typed(plan: Plan, counter: TokenCounter) -> Workload:
    """Typed statements in the first half of the turns, their updates at 55-75 %; every
    turn has one tool round trip (300-900 tokens) and a short answer."""
    draft = _draft(plan, counter, seed=303)
    while draft.room(2) or not draft.bodies:
        request = "Please look into this. " + prose(draft.rng, draft.rng.randint(15, 40), counter)
        result = round(draft.rng.uniform(300, 900) * plan.bulk)
        answer = prose(draft.rng, round(draft.rng.uniform(60, 140) * plan.bulk), counter)
        draft.add(request, (result,), answer)
    turns = len(draft.bodies)
    placed = spread(TYPED, turns, 0.0, 0.5)
    for turn, updates in spread(UPDATES, turns, 0.55, 0.75).items():
        placed.setdefault(turn, []).extend(updates)
    return Workload(
        "typed",
        "You are an operations agent; use the tools to answer.",
        TOOLS,
        _script(1, tuple(draft.answers)),
        _turns(draft, placed),
        (*TYPED, *UPDATES),
    )


BUILDERS: Final[dict[WorkloadKey, Callable[[Plan, TokenCounter], Workload]]] = {
    "tool-heavy": tool_heavy,
    "chatty": chatty,
    "typed": typed,
}
