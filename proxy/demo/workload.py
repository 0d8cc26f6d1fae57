"""What the simulated agents do: their tasks, their tools, the model's script, the facts.

The shape is a coding agent's session, the kind that outgrows a window: each user turn the
model calls two tools, the client runs them and sends back results of several hundred tokens
each (a source file, a test log, search hits), then the model writes a report of about three
hundred tokens. Tool results are what clearing removes; the reports and the user's
instructions are what only a summary can shrink, so both layers of compaction show up.

A few facts (a ticket, a path, a rule) are planted in early user turns, each on a line of
its own as a user adds a remark; at the end the demo checks they are still in what the
proxy forwards, however much was compacted in between.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from proxy.mock_upstream import AgentScript

MODEL: Final = "demo-model"

TOOLS: Final[list[Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository."),
        ("run_tests", "Run the test suite of a package and return its log."),
        ("grep", "Search the repository for a pattern."),
    )
]

RESPONSES_TOOLS: Final[list[Any]] = [
    # The Responses API's function tools are flat: no nested `function`.
    {"type": "function", **tool["function"], "strict": False}
    for tool in TOOLS
]

_MODULES: Final = ("parser", "handlers", "billing", "auth", "search", "storage", "cli", "api")

# The calls the model makes, in order, for all agents together (the mock plays one model).
SCRIPT: Final = AgentScript(
    calls=tuple(
        (name, json.dumps({"arg": module}))
        for module in _MODULES
        for name in ("read_file", "run_tests", "grep")
    ),
    rounds_per_turn=2,
    answer=" ".join(
        f"Step report, part {n}: the handler was refactored, its tests were updated and the "
        "failing cases were traced to the request parser, which now validates its input first."
        for n in range(8)
    ),
)

# No digit, path or rule in it: a summarizer that quotes specifics quotes the facts, not this.
INSTRUCTIONS: Final = (
    "Continue with the next module: read its source, run its tests, search for the callers "
    "of anything you change, keep the public interface stable, explain each change in the "
    "commit message, and report what you did and what is left when you are done."
)

_TASKS: Final = (
    "migrate the billing service's HTTP handlers to the new request parser",
    "fix the flaky tests of the search indexer and get the build green again",
    "add rate limiting to the public API gateway without breaking its clients",
    "move the session storage layer from files to the database",
    "split the command line tool into subcommands with their own help",
)


@dataclass(frozen=True, slots=True)
class Fact:
    """A remark planted in a user turn, and the part of it that must survive."""

    turn: int
    sentence: str
    key: str


def task(agent: int) -> str:
    """Agent `agent`'s first message: distinct per agent, so each is a session of its own
    (the proxy recognises a conversation by its first user message)."""
    what = _TASKS[agent % len(_TASKS)]
    suffix = "" if agent < len(_TASKS) else f" (team {agent // len(_TASKS) + 1})"
    return f"Your task: {what}{suffix}. Start with the first module."


def facts(agent: int) -> tuple[Fact, ...]:
    """The facts planted in agent `agent`'s session: an id, a path, a rule."""
    return (
        Fact(2, f"Use ticket OPS-{4821 + agent} for this work.", f"OPS-{4821 + agent}"),
        Fact(3, f"The config lives at /srv/app{agent}/settings.toml.", f"/srv/app{agent}/"),
        Fact(4, "Never push directly to the main branch.", "Never push directly"),
    )


def user_message(agent: int, turn: int) -> str:
    """What the user says at `turn` (1-based): the task, then instructions and facts."""
    if turn == 1:
        return task(agent)
    planted = [fact.sentence for fact in facts(agent) if fact.turn == turn]
    return "\n".join([f"Next step. {INSTRUCTIONS}", *planted])


def tool_output(name: str, arguments: str, call: int) -> str:
    """The result of a tool call: several hundred tokens of code, log or search hits."""
    arg = str(json.loads(arguments).get("arg", ""))
    if name == "read_file":
        lines = [f"# src/{arg}.py (read at call {call})"]
        lines += [
            f"def handler_{n}(request):\n    return respond(request, code={n})" for n in range(30)
        ]
        return "\n".join(lines)
    if name == "run_tests":
        failed = [n % 17 == 0 for n in range(40)]
        lines = [
            f"tests/test_{arg}.py::test_case_{n} {'FAILED' if fail else 'PASSED'} [{n}%]"
            for n, fail in enumerate(failed)
        ]
        summary = f"== {sum(failed)} failed, {len(failed) - sum(failed)} passed =="
        return "\n".join([f"$ pytest tests/ -k {arg}", *lines, summary])
    hits = [f"src/{arg}/module_{n}.py:{n * 7}: {arg} = load({n})" for n in range(25)]
    return "\n".join(hits)
