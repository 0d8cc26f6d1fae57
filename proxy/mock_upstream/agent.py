"""The mock as an agent's model: it calls tools for a while each turn, then answers.

Benchmarks need conversations that grow the way agent sessions grow (a user message, a few
rounds of tool calls and results, an answer), driven by a client that runs the tools. An
`AgentScript` says which calls to make and how many rounds a turn has; `Agent` plays it.

The decision reads the request, as a model would: the rounds already made this turn are the
assistant messages with tool calls after the last user message, and the calls a compaction
block lists as already made in the running turn (`proxy.core.turn_calls`: the rounds a
window too small for the turn folded). Which call comes next is the
mock's own state (the scripted calls in order, across turns), so a proxy that compacts the
history cannot make the agent repeat itself, and the same requests give the same calls.

The agent carries on from the user's message, a tool's result, or a summary in the model's
place: a client that compacts mid-turn with the Responses API's own compaction (Codex) sends
its history ending with the compaction item, which reaches the model as an assistant message
(the proxy's block) or as nothing it reads (the provider's own item); a model resumes the
task from there. It stops at its own answer.

Played for a client that runs real tools (Claude Code: `Read`, `Bash`, `Grep`, `Glob`), a
script's arguments may name `{workspace}`: the agent fills in the directory the client's
system prompt says it works in (Claude Code's "Primary working directory: ..."), as a model
writes the absolute path `Read` requires. And its answer may report what the last tool
returned (`quote`), so a test sees that the client ran the tools and sent back their results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.messages import role, text, tool_calls
from proxy.core.summary import offered_tools
from proxy.core.turn_calls import HEADING as CALLS_HEADING
from proxy.mock_upstream.script import Reply, ToolCall

WORKSPACE: Final = "{workspace}"
"""In a script's arguments: the directory the client's agent works in, once known."""
_WORKING_DIRECTORY: Final = re.compile(r"^\s*-?\s*Primary working directory: (\S.*?)\s*$", re.M)
"""Claude Code's line in its system prompt's environment section."""


@dataclass(frozen=True, slots=True)
class AgentScript:
    """What the agent does each user turn.

    While the request offers tools and ends with the user's message or a tool result, the
    agent asks for `rounds_per_turn` rounds of tool calls, `parallel` calls per round, taken
    from `calls` in order; then it answers `answer`. With `cycle`, the calls start over when
    they run out; without it the agent answers once they are used up. Call ids are
    `call_agent_1`, `call_agent_2`, ... in the order the mock hands them out. With `answers`,
    the answers are those, in turn (starting over when they run out), instead of `answer`:
    benchmarks need replies of varied lengths.
    """

    calls: tuple[tuple[str, str], ...]
    """(tool name, arguments as a JSON string) pairs."""
    rounds_per_turn: int = 2
    parallel: int = 1
    cycle: bool = True
    answer: str = "Done. The task is complete."
    answers: tuple[str, ...] = ()
    quote: str | None = None
    """A regular expression: when the latest tool result in the request matches it, the
    answer ends with what it matched (its first group, if it has one), as a model reports
    what it found. Without a match (or a tool result), the answer is as scripted."""

    def __post_init__(self) -> None:
        if self.rounds_per_turn < 0 or self.parallel < 1:
            raise ValueError("rounds_per_turn must be >= 0 and parallel >= 1")
        for _, arguments in self.calls:
            json.loads(arguments)  # a typo in a script fails here, not in the client's tool
        if self.quote is not None:
            re.compile(self.quote)


class Agent:
    """Plays one `AgentScript`, remembering how many calls it has handed out."""

    def __init__(self, script: AgentScript) -> None:
        self.script = script
        self.calls_made = 0
        self.answers_given = 0

    def reply(self, body: Mapping[str, Any]) -> Reply:
        """The agent's next message for this request: tool calls, or its answer."""
        if self._rounds_left(body) > 0:
            calls = self._next_calls(_workspace(body))
            if calls:
                return Reply(content=None, tool_calls=calls)
        return Reply(content=self._quoting(self._next_answer(), body))

    def _rounds_left(self, body: Mapping[str, Any]) -> int:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not offered_tools(body):
            return 0
        if not self._carries_on(messages[-1]):
            return 0
        folded = -(-_listed_calls(messages) // self.script.parallel)
        return self.script.rounds_per_turn - _rounds_this_turn(messages) - folded

    def _carries_on(self, last: object) -> bool:
        """Whether the model goes on from `last`: the user's message, a tool's result, or an
        assistant message that is neither its calls nor one of its answers (a compaction's
        summary); not from its own answer."""
        if not isinstance(last, dict):
            return False
        if role(last) in ("user", "tool"):
            return True
        answers = (self.script.answer, *self.script.answers)
        return role(last) == "assistant" and not tool_calls(last) and text(last) not in answers

    def _next_answer(self) -> str:
        answers = self.script.answers
        if not answers:
            return self.script.answer
        self.answers_given += 1
        return answers[(self.answers_given - 1) % len(answers)]

    def _quoting(self, answer: str, body: Mapping[str, Any]) -> str:
        """`answer`, ending with what `quote` found in the latest tool result, if anything."""
        if self.script.quote is None:
            return answer
        found = re.search(self.script.quote, _latest_result(body))
        if found is None:
            return answer
        return f"{answer} {found.group(1) if found.re.groups else found.group(0)}"

    def _next_calls(self, workspace: str | None) -> tuple[ToolCall, ...]:
        script, calls = self.script, []
        for _ in range(script.parallel):
            if not script.calls or (not script.cycle and self.calls_made >= len(script.calls)):
                break
            name, arguments = script.calls[self.calls_made % len(script.calls)]
            self.calls_made += 1
            if workspace is not None:
                # Escaped as a JSON string's content: the arguments stay valid JSON.
                arguments = arguments.replace(WORKSPACE, json.dumps(workspace)[1:-1])
            calls.append(ToolCall(name, arguments, id=f"call_agent_{self.calls_made}"))
        return tuple(calls)


def _rounds_this_turn(messages: Sequence[object]) -> int:
    """Assistant messages with tool calls since the last user message."""
    rounds = 0
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        if role(message) == "user":
            break
        rounds += role(message) == "assistant" and bool(tool_calls(message))
    return rounds


def _listed_calls(messages: Sequence[object]) -> int:
    """The calls a block in `messages` lists as made in the running turn (the newest block
    that lists any: it carries every call folded so far). A block the turn it listed has
    since answered speaks of an earlier turn: the model's answer after it ended that turn."""
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        if not isinstance(message, dict) or CALLS_HEADING not in text(message):
            continue
        if any(_is_answer(later) for later in messages[at + 1 :]):
            return 0
        body = text(message)
        section = body[body.index(CALLS_HEADING) + len(CALLS_HEADING) :].lstrip("\n")
        return sum(line.startswith("- ") for line in section.split("\n\n", 1)[0].split("\n"))
    return 0


def _is_answer(message: object) -> bool:
    return (
        isinstance(message, dict)
        and role(message) == "assistant"
        and not tool_calls(message)
        and bool(text(message).strip())
    )


def _workspace(body: Mapping[str, Any]) -> str | None:
    """The working directory a system message names (Claude Code's), if one does."""
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and role(message) == "system":
            found = _WORKING_DIRECTORY.search(text(message))
            if found:
                return found.group(1)
    return None


def _latest_result(body: Mapping[str, Any]) -> str:
    """The text of the request's last tool result ("" when it has none)."""
    messages = body.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and role(message) == "tool":
            return text(message)
    return ""
