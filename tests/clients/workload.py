"""What the agents do, whatever the framework: the model's script, the tools and their log.

The mock plays the model (`AgentScript`): each user turn it asks for the same four tool
calls, then answers. The calls of one turn are all different, so a tool run twice with the
same arguments within a turn can only mean the model was shown a history in which an
earlier round of that turn was missing: a compaction that hid it.

The tools return deterministic text of 600 to 900 tokens (a source file, a test log, search
hits), the kind of result that makes an agent's context outgrow a small window in a few
rounds.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from proxy.mock_upstream import AgentScript

MODEL: Final = "mock-model"
WINDOW: Final = 8000
"""The mock's context window: a turn's four results fill about 40 % of it, so the proxy must
compact every turn or two, in the middle of a run as well as between turns."""
TURNS: Final = 5
INSTRUCTIONS: Final = "You are a coding agent. Use the tools to inspect the repository."
ANSWER: Final = "Done: the parser now validates its input and its tests pass."

CALLS: Final = (
    ("read_file", {"path": "src/parser.py"}),
    ("run_tests", {"package": "parser"}),
    ("grep", {"pattern": "def parse"}),
    ("read_file", {"path": "tests/test_parser.py"}),
)
"""The calls the model makes each turn, in order: four, all different."""


def script(*, parallel: int) -> AgentScript:
    """The model: all of `CALLS` each turn, `parallel` calls per round, then `ANSWER`."""
    return AgentScript(
        calls=tuple((name, json.dumps(arguments)) for name, arguments in CALLS),
        rounds_per_turn=len(CALLS) // parallel,
        parallel=parallel,
        answer=ANSWER,
    )


def user_message(turn: int) -> str:
    return f"Step {turn + 1}: check the parser module again and fix what fails."


def read_file(path: str, run: int) -> str:
    """A source file of about 750 tokens."""
    lines = [f"# {path}, as read by tool run {run}"]
    for n in range(28):
        lines.append(f"def parse_field_{n}(raw: str) -> int:")
        lines.append(f"    return int(raw.strip() or {n * 17}) + {n}")
    return "\n".join(lines)


def run_tests(package: str, run: int) -> str:
    """A test log of about 800 tokens."""
    lines = [f"$ pytest tests/{package} (tool run {run})"]
    lines += [
        f"tests/{package}/test_case_{n}.py::test_field_{n} PASSED [{n * 2}%]" for n in range(40)
    ]
    lines.append("tests/test_parser.py::test_empty FAILED - ValueError: empty input")
    lines.append(f"1 failed, 40 passed in {run}.42s")
    return "\n".join(lines)


def grep(pattern: str, run: int) -> str:
    """Search hits: about 700 tokens."""
    lines = [f"$ grep -rn '{pattern}' src tests (tool run {run})"]
    lines += [
        f"src/module_{n}.py:{n * 13 + 4}:    {pattern}_{n}(raw)  # caller {n}" for n in range(36)
    ]
    return "\n".join(lines)


@dataclass
class ToolLog:
    """Every tool run, by user turn: the tools write to it, the tests read it."""

    turns: list[list[tuple[str, str]]] = field(default_factory=list)

    def start_turn(self) -> None:
        self.turns.append([])

    def ran(self, name: str, argument: str) -> int:
        """Record one run of tool `name`; returns how many runs there were so far."""
        self.turns[-1].append((name, argument))
        return sum(len(turn) for turn in self.turns)

    @property
    def total(self) -> int:
        return sum(len(turn) for turn in self.turns)

    def unexpected(self) -> list[str]:
        """Turns whose runs were not exactly `CALLS`, each once: repeated, missing or extra
        calls, described for the assertion's message."""
        expected = Counter((name, next(iter(arguments.values()))) for name, arguments in CALLS)
        problems = []
        for number, runs in enumerate(self.turns, 1):
            if Counter(runs) != expected:
                problems.append(f"turn {number}: {runs}")
        return problems
