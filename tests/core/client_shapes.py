"""Conversations in the shapes real clients send (../shared/CLIENTS.md), for the plan's floors.

Every rule the plan keeps was once broken by a shape the bench lacked, so the floors are
checked over all of them at once, each drawn at random sizes:

- `agent`: a coding agent's turns (a user message, rounds of tool calls, parallel ones too,
  results of log-normal size, a reply), the running turn with some rounds of its own;
- `aider`: aider's request: few-shot turns, the history, then the files added to the chat as
  one large user message, "Ok, any changes I propose will be to those files.", and the ask;
- `paste`: user turns that paste a log beside one sentence, between tool rounds;
- `long_turn`: one user message and dozens of tool rounds under it (opencode, Codex);
- `observations`: smolagents' tool output sent back as `user` messages;
- `schema_heavy`: tool schemas that take most of the window, and short user turns giving the
  values the next call needs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from proxy.core.digests import digest
from proxy.core.messages import Message, text
from tests import builders
from tests.core.words import TOOLS

_ids = itertools.count()

SENTENCES = (
    "Never open port {n} on the bastion.",
    "The budget is ${n}.",
    "Use ticket OPS-{n} for this work.",
    "Deploy to region eu-west-{n}.",
    "Post the summary to channel ops-{n}.",
    "Book the flight in class {n}.",
    "Thanks, carry on.",
)


def _words(count: int, word: str = "data") -> str:
    return " ".join([word] * max(count, 1))


def lognormal(median: int) -> st.SearchStrategy[int]:
    """A log-normal size around `median` (tool outputs and pastes are)."""
    return st.floats(min_value=-2.0, max_value=2.0).map(
        lambda z: max(1, int(median * math.exp(0.8 * z)))
    )


@st.composite
def sentence(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(SENTENCES)).format(n=draw(st.integers(1, 90)))


@st.composite
def tool_round(draw: st.DrawFn, median: int) -> list[Message]:
    ids = [f"call_{next(_ids)}" for _ in range(draw(st.integers(1, 3)))]
    results = [builders.tool_result(i, _words(draw(lognormal(median)))) for i in ids]
    return [builders.assistant_calls(*ids), *draw(st.permutations(results))]


@st.composite
def agent_turn(draw: st.DrawFn, median: int, *, answered: bool = True) -> list[Message]:
    messages = [builders.user(draw(sentence()))]
    for _ in range(draw(st.integers(0, 3))):
        messages += draw(tool_round(median))
    if answered:
        messages.append(builders.assistant("Done: " + _words(draw(st.integers(1, 150)), "w")))
    return messages


@st.composite
def agent(draw: st.DrawFn) -> list[Message]:
    median = draw(st.sampled_from([50, 300, 1000]))
    turns = draw(st.lists(agent_turn(median), max_size=12))
    running = draw(agent_turn(median, answered=False))
    head = [builders.system("You are a coding agent."), builders.user("The task: fix it.")]
    return [*head, *itertools.chain.from_iterable(turns), *running]


def _fenced(size: int) -> str:
    return f"```\n{_words(size, 'code')}\n```"


def _files_message(files: Mapping[str, int]) -> str:
    listed = "\n\n".join(
        f"{path}\n```\n{_words(size, 'code')}\n```" for path, size in files.items()
    )
    return (
        f"{FILES_OPENING} so you can go ahead and edit them.\n\n"
        "*Trust this message as the true contents of these files!*\n"
        "Any other messages in the chat may contain outdated versions of the files' contents.\n\n"
        + listed
    )


@st.composite
def aider(draw: st.DrawFn) -> list[Message]:
    count = draw(st.integers(1, 8))
    files = {f"src/module_{n}.py": draw(lognormal(400)) for n in range(count)}
    history: list[Message] = []
    for n in range(draw(st.integers(0, 10))):
        history += [
            builders.user(f"Change {n}: " + draw(sentence())),
            builders.assistant(
                f"src/module_0.py\n```\n{_words(draw(lognormal(300)), 'code')}\n```"
            ),
        ]
    return [
        builders.system("Act as an expert software developer. " + _words(200, "rule")),
        builders.user("Change the greeting to be more casual"),
        builders.assistant("Ok, I will change it."),
        builders.user("I switched to a new code base. Please don't consider the above files."),
        builders.assistant("Ok."),
        *history,
        builders.user(_files_message(files)),
        builders.assistant("Ok, any changes I propose will be to those files."),
        builders.user("Now: " + draw(sentence())),
    ]


@st.composite
def paste(draw: st.DrawFn) -> list[Message]:
    messages = [builders.system("You are a coding agent."), builders.user("The task: fix it.")]
    turns = draw(st.integers(1, 12))
    for n in range(turns):
        log = "\n".join(f"{n}:{line} worker status ok" for line in range(draw(lognormal(60))))
        messages.append(builders.user(f"{draw(sentence())}\n\n```\n{log}\n```"))
        for _ in range(draw(st.integers(0, 2))):
            messages += draw(tool_round(300))
        if n < turns - 1:
            messages.append(builders.assistant("Looked at it."))
    return messages


@st.composite
def long_turn(draw: st.DrawFn) -> list[Message]:
    rounds = draw(st.lists(tool_round(draw(st.sampled_from([100, 400, 1200]))), max_size=30))
    return [
        builders.system("You are opencode. " + _words(300, "rule")),
        builders.user("Refactor the parser and keep the tests green."),
        *itertools.chain.from_iterable(rounds),
    ]


@st.composite
def observations(draw: st.DrawFn) -> list[Message]:
    messages = [builders.system("You solve tasks with code."), builders.user("New task: count.")]
    for n in range(draw(st.integers(1, 15))):
        messages.append(builders.assistant(f"Thought: step {n}. Code: run({n})"))
        messages.append(builders.user(f"Observation: {_words(draw(lognormal(500)))}"))
    return messages


def schemas(words: int) -> dict[str, Any]:
    """A request body whose tool schemas count about `words` tokens."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": _words(words // 8, "describe"),
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for n in range(8)
    ]
    return {"tools": tools}


@st.composite
def schema_heavy(draw: st.DrawFn) -> list[Message]:
    messages = [builders.system("You operate the travel tools.")]
    for n in range(draw(st.integers(1, 12))):
        messages.append(builders.user(f"Step {n}: " + draw(sentence())))
        messages += draw(tool_round(80))
        messages.append(builders.assistant("Done."))
    messages.append(builders.user("Now: " + draw(sentence())))
    return messages


@dataclass(frozen=True)
class Shape:
    name: str
    messages: Callable[[], st.SearchStrategy[list[Message]]]
    body: Callable[[int], dict[str, Any]]
    """The request's other fields (its tools), given the usable input in tokens."""
    working: Callable[[list[Message]], frozenset[bytes]] = lambda _: frozenset()
    """The digests of the messages the client re-sends on every request (its working set, as
    `proxy.core.working_set` finds it from the request before)."""


FILES_OPENING = "I have *added these files to the chat*"


def files_message(messages: list[Message]) -> frozenset[bytes]:
    """aider's working set: the files message it sends again before every ask."""
    return frozenset(digest(m) for m in messages if text(m).startswith(FILES_OPENING))


def _tools(_: int) -> dict[str, Any]:
    return dict(TOOLS)


SHAPES = (
    Shape("agent", agent, _tools),
    Shape("aider", aider, lambda _: {}, files_message),
    Shape("paste", paste, _tools),
    Shape("long_turn", long_turn, _tools),
    Shape("observations", observations, lambda _: {}),
    Shape("schema_heavy", schema_heavy, lambda usable: schemas(int(usable * 0.85))),
)
