"""The effectiveness matrix's workloads: scripted sessions, deterministic and seeded.

A workload is what a client says and what its tools return, planned before the session
runs: the user turns (with the statements planted in them), the size of every tool result
(or its text, where the workload writes it), and the model's answers (played by
`proxy.mock_upstream`'s `AgentScript`). Eight of them:

- `tool-heavy`: a coding agent; each user turn (about 2,600 tokens) is a user message, two
  tool calls (one per round) with results of log-normal size around 900 tokens, and a reply
  of about 200 tokens. Ten facts the user states are planted in the first half of the turns.
- `chatty`: an assistant without tools; user messages of 30-150 tokens, replies of 200-600,
  the same ten facts planted the same way.
- `typed`: a user making typed statements (safety rules, hard constraints, facts, goal
  state, preferences), some of them updated later with a new value; every user turn is
  followed by one tool round trip (a result of 300-900 tokens) and an answer.
- `labelled`: the same shape, the statements written under shared category labels as users
  and agent frameworks write them (`FACT: ...`, `GOAL STATE: ...`, `USER PREFERENCE: ...`,
  `Note: ...`, `TODO: ...`), with stale updates of one subject and near-duplicates about
  different subjects; the replaced values must be gone from the compaction block.
- `artifacts`: a tool-heavy agent whose early tool results alone carry identifiers in their
  first lines (a build id, a checksum, a version, a path), which the user asks for at the end.
- `oversized-result`: one tool result of about 72k tokens (a JSON array of 4,000 files), then
  "Which is biggest?": the result must be forwarded cut, never cleared or dropped.
- `fixed-heavy`: an agent with a Codex-sized head (about 7,500 tokens of instructions and tool
  schemas) whose user turns are about 7k tokens each: a pasted file chunk and many small
  tool rounds, so that the running turn alone outgrows the room the head leaves.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript

Kind = Literal["rule", "constraint", "fact", "goal", "preference", "note", "artifact"]
KINDS: Final[tuple[Kind, ...]] = ("rule", "constraint", "fact", "goal", "preference")
"""The kinds of the typed statements."""
LABELLED_KINDS: Final[tuple[Kind, ...]] = (
    "fact",
    "goal",
    "preference",
    "rule",
    "constraint",
    "note",
)
WorkloadKey = Literal[
    "tool-heavy",
    "chatty",
    "typed",
    "labelled",
    "artifacts",
    "oversized-result",
    "fixed-heavy",
    "recall",
]
WORKLOADS: Final[tuple[WorkloadKey, ...]] = get_args(WorkloadKey)
TITLES: Final[dict[str, str]] = {
    "tool-heavy": "tool-heavy agent",
    "chatty": "chatty assistant",
    "typed": "typed statements",
    "labelled": "labelled statements",
    "artifacts": "tool-only identifiers",
    "oversized-result": "oversized newest result",
    "fixed-heavy": "fixed-heavy agent",
    "recall": "recall of a compacted value",
}

# Framing the counter adds per message and per tool call: close enough for planning.
_MESSAGE_TOKENS: Final = 4
_CALL_TOKENS: Final = 30


@dataclass(frozen=True, slots=True)
class Statement:
    """Something said that must reach the model (the user's words, or the first line of a
    tool result): `key` is checked verbatim.

    Statements sharing a `topic` update one another: only the latest one's key is checked,
    and the earlier ones' keys are stale (see `Workload.stale`).
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
    texts: tuple[str | None, ...] = ()
    """The text of each of this turn's first tool results where the workload wrote it (None:
    one of the planned size is generated, as for every result after these)."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A value one file read returned, which the user asks for late in the session."""

    key: str
    """In capitals, as the mock's recaller reads a question (`value of KEY`)."""
    value: str
    """No id, path or number shape: no trail or ledger of the proxy's keeps it."""
    path: str
    """The file whose read returned it (the `read_file` call's `path`)."""

    @property
    def question(self) -> str:
        return f"What is the exact value of {self.key} in {self.path}?"

    @property
    def line(self) -> str:
        """The line of the file that gives it."""
        return f"{self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class Workload:
    key: WorkloadKey
    system: str
    tools: tuple[dict[str, Any], ...]
    script: AgentScript
    turns: tuple[UserTurn, ...]
    statements: tuple[Statement, ...]
    """Every statement planted, updates included, in the order the user makes them."""
    running_turn: bool = False
    """Judge every forwarded request for the running turn: its user message forwarded in
    place, and every tool round the client sent after it."""
    result_items: int = 0
    """The items of the session's first tool result, a JSON array too large to forward
    whole: judge that every later request forwards it cut, with its "showing N of M items"
    note (0: nothing to judge)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """The text of a `read_file` result by the `path` its call asks for: the workload's
    written files, whichever round of the session reads them."""
    asked: tuple[Asked, ...] = ()
    """The values the last user turns ask for, one a turn, in order (the mock plays a model
    that recalls what a compaction removed: `MockUpstream(recaller=True)`)."""

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

    @property
    def stale(self) -> tuple[Statement, ...]:
        """The statements a later one of the same topic replaced: their keys must be gone
        from the compaction block."""
        latest = {s.topic: s for s in self.statements if s.topic}
        return tuple(s for s in self.statements if s.topic and latest[s.topic] is not s)


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

# The labelled statements: shared category labels, as users and agent frameworks write them.
# Under one label, a statement about another subject is a new statement (four FACT: lines are
# four facts); near-duplicates about different things (the staging and the production
# database, two TODOs, two restart rules) must not merge. Rules never replace each other.
LABELLED: Final = (
    Statement(
        "fact",
        "FACT: The project codename is LANTERN and the launch deadline is 2026-11-15.",
        "LANTERN and the launch deadline is 2026-11-15",
    ),
    Statement(
        "fact",
        "FACT: The production database is Postgres 15 in us-west-2.",
        "Postgres 15 in us-west-2",
        "production database",
    ),
    Statement(
        "fact", "FACT: The staging database is Postgres 14.", "staging database is Postgres 14"
    ),
    Statement("fact", "FACT: The on-call engineer this week is Dana Okafor.", "Dana Okafor"),
    Statement("goal", "GOAL STATE: Steps 1-2 of 5 are done.", "Steps 1-2 of 5", "steps"),
    Statement(
        "goal",
        "GOAL STATE: The payments API is migrated to the v2 endpoints.",
        "migrated to the v2 endpoints",
    ),
    Statement(
        "goal", "GOAL STATE: The invoice exporter is blocked on ticket OPS-4471.", "OPS-4471"
    ),
    Statement(
        "goal",
        "GOAL STATE: Load tests for the checkout flow are scheduled for Thursday.",
        "scheduled for Thursday",
    ),
    Statement(
        "preference", "USER PREFERENCE: Answer in at most 5 bullet points.", "at most 5 bullet"
    ),
    Statement(
        "preference",
        "USER PREFERENCE: Give times in UTC and dates as YYYY-MM-DD.",
        "times in UTC and dates as YYYY-MM-DD",
    ),
    Statement("preference", "USER PREFERENCE: Call me Sam.", "Call me Sam"),
    Statement(
        "preference",
        "USER PREFERENCE: Show shell commands in fenced code blocks.",
        "fenced code blocks",
    ),
    Statement(
        "rule",
        "RULE: Never restart the primary database during business hours.",
        "Never restart the primary database during business hours",
    ),
    Statement(
        "rule",
        "RULE: Never restart the replica database without a fresh snapshot.",
        "Never restart the replica database without a fresh snapshot",
    ),
    Statement("constraint", "Budget: $500", "$500", "budget"),
    Statement(
        "constraint",
        "HARD CONSTRAINT: Every migration must finish within a 30-minute window.",
        "30-minute window",
    ),
    Statement(
        "note",
        "Note: the vendor API rate limit resets at midnight UTC.",
        "rate limit resets at midnight UTC",
    ),
    Statement("note", "TODO: Email Alice about the invoice exporter.", "Email Alice"),
    Statement("note", "TODO: Email Bob about the load tests.", "Email Bob"),
)
# The same subjects with new values: the earlier values are stale.
LABELLED_UPDATES: Final = (
    Statement("constraint", "Budget: $700", "$700", "budget"),
    Statement("goal", "GOAL STATE: Steps 1-3 of 5 are done.", "Steps 1-3 of 5", "steps"),
    Statement(
        "fact",
        "FACT: The production database is now MySQL 8 in us-east-1.",
        "MySQL 8 in us-east-1",
        "production database",
    ),
)

# The identifiers only tool results carry, each in the first line of one early result; the
# user and the model never repeat them.
_SHA256: Final = "4e1b9f0c7a3d2e8b6f5a1c9d0e7b3a2f8c6d4e1f0a9b8c7d6e5f4a3b2c1d0e9f"
ARTIFACTS: Final = (
    Statement(
        "artifact", "Build finished: build-7f3a9c21 (3 artifacts uploaded).", "build-7f3a9c21"
    ),
    Statement("artifact", f"sha256 of dist/app-bundle.tar.gz: {_SHA256}", _SHA256),
    Statement("artifact", "Packaged version: v4.19.2", "v4.19.2"),
    Statement(
        "artifact",
        "Release directory: /var/lib/app/releases/2026-11-03",
        "/var/lib/app/releases/2026-11-03",
    ),
)
ARTIFACTS_QUESTION: Final = (
    "Before we ship: which build id, sha256 checksum, version and release directory did the "
    "tools report at the start of this session? I need them for the release notes."
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


def _schema(name: str, description: str, parameter: str = "arg") -> dict[str, Any]:
    parameters = {"type": "object", "properties": {parameter: {"type": "string"}}}
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


def _turns(
    draft: _Draft,
    placed: dict[int, list[Statement]],
    results: dict[int, tuple[str | None, ...]] | None = None,
) -> tuple[UserTurn, ...]:
    texts = _with_statements(draft.bodies, placed)
    written = results or {}
    return tuple(
        UserTurn(text, tools, written.get(index, ()))
        for index, (text, tools) in enumerate(zip(texts, draft.tool_tokens, strict=True))
    )


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
    return _statements("typed", plan, counter, 303, (TYPED, UPDATES))


def labelled(plan: Plan, counter: TokenCounter) -> Workload:
    """The typed workload's shape with labelled statements: the first ones in the first half
    of the turns, the updates of three subjects at 55-75 %."""
    return _statements("labelled", plan, counter, 404, (LABELLED, LABELLED_UPDATES))


def _statements(
    key: WorkloadKey,
    plan: Plan,
    counter: TokenCounter,
    seed: int,
    said: tuple[tuple[Statement, ...], tuple[Statement, ...]],
) -> Workload:
    """A user making `said[0]` in the first half of the turns and `said[1]` (updates) at
    55-75 %; every turn has one tool round trip (300-900 tokens) and a short answer."""
    first, updates = said
    draft = _draft(plan, counter, seed=seed)
    while draft.room(2) or not draft.bodies:
        request = "Please look into this. " + prose(draft.rng, draft.rng.randint(15, 40), counter)
        result = round(draft.rng.uniform(300, 900) * plan.bulk)
        answer = prose(draft.rng, round(draft.rng.uniform(60, 140) * plan.bulk), counter)
        draft.add(request, (result,), answer)
    turns = len(draft.bodies)
    placed = spread(first, turns, 0.0, 0.5)
    for turn, later in spread(updates, turns, 0.55, 0.75).items():
        placed.setdefault(turn, []).extend(later)
    return Workload(
        key,
        "You are an operations agent; use the tools to answer.",
        TOOLS,
        _script(1, tuple(draft.answers)),
        _turns(draft, placed),
        (*first, *updates),
    )


def artifacts(plan: Plan, counter: TokenCounter) -> Workload:
    """A tool-heavy agent with ~600-token results: the identifiers open early results (in
    the first quarter of them, from the second turn on), the last turn asks for them."""
    draft = _draft(plan, counter, seed=505)
    while draft.room(3) or not draft.bodies:
        request = "Next step of the release. " + prose(
            draft.rng, draft.rng.randint(60, 160), counter
        )
        tools = (draft.sized(600, 0.3, 300, 1200), draft.sized(600, 0.3, 300, 1200))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, tools, answer)
    draft.bodies[-1] = ARTIFACTS_QUESTION
    return Workload(
        "artifacts",
        "You are a release agent working in the user's repository.",
        TOOLS,
        _script(2, tuple(draft.answers)),
        _turns(draft, {}, _identifier_results(draft, counter)),
        ARTIFACTS,
    )


def _identifier_results(draft: _Draft, counter: TokenCounter) -> dict[int, tuple[str | None, ...]]:
    """Each identifier as the first line of one early result, the rest of it a test log of
    the planned size: spread over the first quarter of the results after the first turn."""
    slots = [(t, r) for t in range(1, len(draft.bodies)) for r in range(len(draft.tool_tokens[t]))]
    early = slots[: max(len(ARTIFACTS), len(slots) // 4)]
    written: dict[int, list[str | None]] = {}
    for index, statement in enumerate(ARTIFACTS):
        turn, round_ = early[index * len(early) // len(ARTIFACTS)]
        texts = written.setdefault(turn, [None] * len(draft.tool_tokens[turn]))
        size = draft.tool_tokens[turn][round_]
        log = tool_output("run_tests", size - counter.text(statement.text), 900 + index, counter)
        texts[round_] = f"{statement.text}\n{log}"
    return {turn: tuple(texts) for turn, texts in written.items()}


LISTED_FILES: Final = 4_000


def file_listing(count: int = LISTED_FILES) -> str:
    """A JSON array of `count` file records (path and size), about 18 tokens each; the
    biggest file sits in the middle, where a head and a tail do not show it."""
    rng = random.Random(606)
    sizes = [rng.randint(100, 99_999) for _ in range(count)]
    sizes[count // 2] = 250_000
    return json.dumps(
        [
            {"path": f"src/{rng.choice(_MODULES)}/m{index}.py", "size": size}
            for index, size in enumerate(sizes)
        ]
    )


def oversized_result(plan: Plan, counter: TokenCounter) -> Workload:
    """One call listing 4,000 files (about 72k tokens), then "Which is biggest?"; the agent
    answers each turn after its one call (the plan's size does not matter)."""
    listing = file_listing()
    arguments = json.dumps({"path": "src"})
    return Workload(
        "oversized-result",
        "You are a coding agent working in the user's repository.",
        (_schema("list_files", "List the files under a directory with their sizes, as JSON."),),
        AgentScript(
            calls=(("list_files", arguments),),
            rounds_per_turn=1,
            cycle=False,
            answers=("Here is the listing.", "The biggest file is the one I found above."),
        ),
        (
            UserTurn(
                "List every file under src/ with its size in bytes.",
                (counter.text(listing),),
                (listing,),
            ),
            UserTurn("Which is biggest?", ()),
        ),
        (),
        result_items=LISTED_FILES,
    )


FIXED_HEAD_TOKENS: Final = 7_500
"""The fixed-heavy agent's instructions and tools (ours; the provider counts 8,250): 70 % of
a 16k window's usable input, as Codex's are."""
_FIXED_ROUNDS: Final = 14
_CODEX_TOOLS: Final = (
    "shell", "apply_patch", "read_file", "run_tests", "grep", "list_dir", "update_plan",
    "view_image", "web_search", "write_file",
)  # fmt: skip


def _codex_tools(rng: random.Random, counter: TokenCounter) -> tuple[dict[str, Any], ...]:
    """Ten tool schemas with long descriptions and described parameters, about 2k tokens."""
    tools = []
    for name in _CODEX_TOOLS:
        properties = {
            field: {"type": "string", "description": prose(rng, 25, counter)}
            for field in ("target", "mode", "reason")
        }
        function = {
            "name": name,
            "description": prose(rng, 120, counter),
            "parameters": {"type": "object", "properties": properties, "required": ["target"]},
        }
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def fixed_heavy(plan: Plan, counter: TokenCounter) -> Workload:
    """A Codex-sized head (`FIXED_HEAD_TOKENS`), then user turns of about 7k tokens: a pasted
    file chunk of ~1,000 tokens, 14 tool rounds of 250-600 tokens, a short answer."""
    draft = _draft(plan, counter, seed=707)
    tools = _codex_tools(draft.rng, counter)
    head = FIXED_HEAD_TOKENS - counter.tools({"tools": list(tools)})
    system = "You are a coding agent running in the user's terminal. " + prose(
        draft.rng, head, counter
    )
    while draft.room(_FIXED_ROUNDS + 1) or not draft.bodies:
        chunk = len(draft.bodies) + 1
        paste = tool_output("read_file", 1_000, 7_000 + chunk, counter)
        request = (
            f"File chunk {chunk} of src/billing/ledger.py follows; review it against the "
            f"repository and fix what it breaks.\n{paste}"
        )
        sizes = tuple(draft.sized(400, 0.3, 250, 600) for _ in range(_FIXED_ROUNDS))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, sizes, answer)
    return Workload(
        "fixed-heavy",
        system,
        tools,
        _script(_FIXED_ROUNDS, tuple(draft.answers)),
        _turns(draft, {}),
        (),
        running_turn=True,
    )


# The values the recall workload plants: word pairs a user would not guess, with no digit,
# path or id shape, in files no other call reads.
RECALLED: Final = (
    Asked("DEPLOY_TOKEN", "marmalade-sky", "deploy/billing/secrets.env"),
    Asked("ROLLBACK_PHRASE", "quiet-heron-window", "deploy/jobs/rollback.env"),
    Asked("CANARY_GREETING", "velvet-otter-lamp", "deploy/web/canary.env"),
    Asked("FALLBACK_MOTTO", "amber-comet-garden", "deploy/api/fallback.env"),
    Asked("MIRROR_SLOGAN", "silent-maple-harbor", "deploy/auth/mirror.env"),
)
RECALL_PLAN: Final = ((0.0, 0), (0.5, 1), (0.7, 0), (0.8, 1), (0.9, 0))
"""Where each of `RECALLED` is read: a share of the work turns (never before the second) and
the round. By the questions, which all come at the end, the early reads are condensed into a
note in every cell; the later ones, by window, condensed, cleared to a placeholder, or still
whole in the recent turns.

No question comes earlier in the session: the mock's recaller takes any user message that
asks for "the value of KEY" as the question of the turn, and the proxy's ledger quotes an
earlier question in the note it merges into a later turn's user message, so the recaller
would answer that turn instead of the agent running its tools."""


def _read_paths() -> list[str]:
    """Source files, tests and configuration, shuffled: no path is read twice in a cell."""
    paths = [
        path
        for module in _MODULES
        for name in _NAMES
        for path in (f"src/{module}/{name}.py", f"tests/{module}/test_{name}.py",
                     f"config/{module}/{name}.yaml")
    ]  # fmt: skip
    random.Random(808).shuffle(paths)
    return paths


def _env_file(asked: Asked, tokens: int, seed: int, counter: TokenCounter) -> str:
    """The file that gives `asked`'s value: a few settings, the value, then code."""
    head = f"# {asked.path}\nLOG_FORMAT=plain\n{asked.line}\nREGION_NAME=primary\n"
    return head + tool_output("read_file", tokens - counter.text(head), seed, counter)


def _planted(draft: _Draft, counter: TokenCounter) -> tuple[list[str], dict[str, str]]:
    """The paths the agent reads, in order, with the planted files among them (read where
    `RECALL_PLAN` says, or at the next read not taken in a session too short for it; later
    if compactions make the agent run more rounds first), and their texts by path."""
    paths, files, work = _read_paths(), {}, len(draft.bodies)
    sizes = [size for tools in draft.tool_tokens for size in tools]
    taken: set[int] = set()
    for index, (planted, (at, round_)) in enumerate(zip(RECALLED, RECALL_PLAN, strict=True)):
        turn = min(max(1, round(at * work)), work - 1)
        slot = sum(len(tools) for tools in draft.tool_tokens[:turn]) + round_
        while slot in taken:
            slot += 1
        taken.add(slot)
        paths[slot] = planted.path
        size = sizes[slot] if slot < len(sizes) else sizes[-1]
        files[planted.path] = _env_file(planted, size, 880 + index, counter)
    return paths, files


def recall(plan: Plan, counter: TokenCounter) -> Workload:
    """The artifacts agent's shape (~600-token reads) reading distinct files, the planted
    files among them (where `RECALL_PLAN` says); the last turns ask for their values."""
    draft = _draft(plan, counter, seed=808)
    while draft.room(3 + len(RECALLED)) or len(draft.bodies) < 2:
        request = "Next step of the deployment review. " + prose(
            draft.rng, draft.rng.randint(60, 160), counter
        )
        tools = (draft.sized(600, 0.3, 300, 1200), draft.sized(600, 0.3, 300, 1200))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, tools, answer)
    paths, files = _planted(draft, counter)
    questions = tuple(UserTurn(planted.question, ()) for planted in RECALLED)
    calls = tuple(("read_file", json.dumps({"path": path})) for path in paths)
    return Workload(
        "recall",
        "You are a deployment agent reviewing the user's repository; use the tools.",
        (_schema("read_file", "Read a file of the repository.", "path"),),
        AgentScript(calls=calls, rounds_per_turn=2, answers=tuple(draft.answers)),
        (*_turns(draft, {}), *questions),
        (),
        files=files,
        asked=RECALLED,
    )


BUILDERS: Final[dict[WorkloadKey, Callable[[Plan, TokenCounter], Workload]]] = {
    "tool-heavy": tool_heavy,
    "chatty": chatty,
    "typed": typed,
    "labelled": labelled,
    "artifacts": artifacts,
    "oversized-result": oversized_result,
    "fixed-heavy": fixed_heavy,
    "recall": recall,
}
