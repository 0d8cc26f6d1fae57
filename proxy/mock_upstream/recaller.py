"""The mock as a model that asks for compacted content back with `context_recall`.

Reversible compaction (issue 22) replaces old content with placeholders and notes that name
a recall id (`context_recall(id="rc_...")`) and offers the model a `context_recall` tool,
which the proxy answers itself with the original text. Whether that works end to end needs a
model that asks for a detail the compaction took away, notices it is gone, and recalls it.
`Recaller` plays that model, reading the request only, as a model would:

- a question turn is one whose last user message asks for "the value of KEY" (KEY in capitals:
  `DEPLOY_TOKEN`); on any other request the recaller has nothing to say, and the mock's usual
  answer applies;
- when `KEY=value` or `KEY: value` is anywhere in the request (the newest wins), it answers
  `KEY is value.`;
- else, while the request offers `context_recall` and fewer than `MAX_ROUNDS` recall rounds
  were made since the last user message, it calls the tool for up to `PER_ROUND` ids it has
  not recalled this turn, best guess first (see `_ranked`);
- else it answers `I do not have the value of KEY.`

It reads chat messages: the Responses endpoint hands it the chat view of its items, where a
run of `function_call` items is one assistant message with `tool_calls` and an output is a
`tool` message. The ids are found here with the mock's own pattern, not with
`proxy.core.recall`: the mock stands for the model, and must catch the proxy's mistakes in
the format rather than share them.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core.messages import Message, role, text, tool_calls
from proxy.core.summary import offered_tools
from proxy.mock_upstream.script import Reply, ToolCall

TOOL: Final = "context_recall"
MAX_ROUNDS: Final = 3
"""Recall rounds a turn may make before the model gives up."""
PER_ROUND: Final = 2
"""Ids recalled at most in one round (as parallel tool calls)."""

RECALL_ID: Final = re.compile(r'context_recall\(id="(rc_[a-z2-7]{10})"\)')
QUESTION: Final = re.compile(r"(?i:value of) ([A-Z][A-Z0-9_]{2,})")
VALUE_CHARS: Final = r"[^\s,;\"'\]]+"
WORD: Final = re.compile(r"[a-z]{4,}")
PATH: Final = re.compile(r"[\w~-]+(?:[./][\w~-]+)+")

# Words every question, placeholder or note carries whatever it is about: sharing one says
# nothing about which result held the value, so they never make a placeholder relevant.
QUESTION_WORDS: Final = "what which where when does that this there have with from exact value"
NOTE_WORDS: Final = (
    "tool result cleared save context returned tokens here mentioned recall returns earlier "
    "turns conversation condensed messages omitted replaced summary window word characters "
    "middle large call again"
)
BOILERPLATE: Final = frozenset(f"{QUESTION_WORDS} {NOTE_WORDS}".split())

RoundKey = tuple[str, int]


class Recaller:
    """Plays a model that uses `context_recall`, remembering the calls it handed out."""

    def __init__(self, recalled: list[str], answers: list[str]) -> None:
        self.recalled = recalled
        """Where it records the ids it asks for, one per call, in order."""
        self.answers = answers
        """Where it records its answers to question turns, in order."""
        self._numbers = itertools.count(1)
        self._rounds = itertools.count(1)
        # Which reply each call id came in: parallel calls are one round even when the
        # Responses items put each call's output right after it (the view then shows one
        # assistant message per call).
        self._round_of: dict[str, int] = {}

    def reply(self, body: Mapping[str, Any]) -> Reply | None:
        """Its move for a question turn (calls or an answer); None for any other request."""
        messages = _messages(body)
        last_user = _last_user(messages)
        if last_user is None:
            return None
        question = text(messages[last_user])
        asked = QUESTION.search(question)
        if asked is None:
            return None
        key = asked.group(1)
        value = _value(messages, key)
        if value is not None:
            return self._answer(f"{key} is {value}.")
        turn = messages[last_user + 1 :]
        if TOOL in offered_tools(body) and self._rounds_made(turn) < MAX_ROUNDS:
            ids = _ranked(messages, question, skip=_recalled(turn))[:PER_ROUND]
            if ids:
                return self._calls(ids, key)
        return self._answer(f"I do not have the value of {key}.")

    def _answer(self, content: str) -> Reply:
        self.answers.append(content)
        return Reply(content=content)

    def _calls(self, ids: Sequence[str], key: str) -> Reply:
        number = next(self._rounds)
        calls = []
        for rid in ids:
            call_id = f"call_recall_{next(self._numbers)}"
            self._round_of[call_id] = number
            self.recalled.append(rid)
            # The key it looks for as the query: a long recall comes back as the lines naming it.
            arguments = json.dumps({"id": rid, "query": key})
            calls.append(ToolCall(TOOL, arguments, id=call_id))
        return Reply(content=None, tool_calls=tuple(calls))

    def _rounds_made(self, turn: Sequence[Message]) -> int:
        """Recall rounds in `turn`: its own by the reply they came in, any other call's by
        the assistant message holding it."""
        rounds: set[RoundKey] = set()
        for index, message in enumerate(turn):
            for call in _recall_calls(message):
                number = self._round_of.get(str(call.get("id")))
                rounds.add(("mine", number) if number is not None else ("message", index))
        return len(rounds)


def _messages(body: Mapping[str, Any]) -> list[Message]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [message for message in messages if isinstance(message, dict)]


def _last_user(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if role(messages[index]) == "user":
            return index
    return None


def _value(messages: Sequence[Message], key: str) -> str | None:
    """The newest value given to `key` in any message's text (`KEY=value`, `KEY: value`)."""
    # Not inside a longer name: OLD_DEPLOY_TOKEN=... is not DEPLOY_TOKEN's value.
    given = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?:=|:[ \t]*)({VALUE_CHARS})")
    for message in reversed(messages):
        found = given.findall(text(message))
        if found:
            return str(found[-1])
    return None


def _recall_calls(message: Message) -> list[dict[str, Any]]:
    if role(message) != "assistant":
        return []
    return [call for call in tool_calls(message) if _function(call).get("name") == TOOL]


def _recalled(turn: Sequence[Message]) -> set[str]:
    """The ids the turn's recall calls asked for."""
    ids = set()
    for message in turn:
        for call in _recall_calls(message):
            try:
                arguments = json.loads(str(_function(call).get("arguments")))
            except json.JSONDecodeError:
                continue
            if isinstance(arguments, dict) and isinstance(arguments.get("id"), str):
                ids.add(arguments["id"])
    return ids


def _ranked(messages: Sequence[Message], question: str, *, skip: set[str]) -> list[str]:
    """The ids the messages name, best guess first, those in `skip` left out.

    As a model would guess: first the tool results and notes that share the most with the
    question (`_overlap`: a path it names counts most), then the other notes that replaced
    whole turns (each stands for many messages, older notes' included), then the other tool
    results; newest first within each.
    """
    asked = _terms(question)
    arguments = _arguments_by_call(messages)
    best: dict[str, tuple[int, int, int]] = {}
    for position, message in enumerate(messages):
        overlap = _overlap(message, asked, arguments)
        tier = 0 if overlap else (2 if role(message) == "tool" else 1)
        for rid in RECALL_ID.findall(text(message)):
            rank = (tier, -overlap, -position)
            if rid not in skip and rank < best.get(rid, (3, 0, 0)):
                best[rid] = rank
    # Stable: ids of one message keep the order the message names them in.
    return sorted(best, key=best.__getitem__)


def _overlap(message: Message, asked: set[str], arguments: Mapping[str, str]) -> int:
    """How much `message` (a placeholder with its call's arguments, or a note) shares with
    the question's terms: a shared path counts as three words."""
    about = RECALL_ID.sub("", text(message))
    if role(message) == "tool":
        about += " " + _argument_text(arguments.get(str(message.get("tool_call_id")), ""))
    else:
        # A note shares the words of whatever it condensed: only the paths its trail lists
        # say what it is about.
        return 3 * len({t for t in asked if PATH.fullmatch(t)} & set(PATH.findall(about.lower())))
    # The ids are random letters: one that happens to spell a word of the question is no hint.
    shared = asked & _terms(about)
    return sum(3 if PATH.fullmatch(term) else 1 for term in shared)


def _argument_text(arguments: str) -> str:
    """A call's argument values: the keys (`path`, `query`) say what every call says."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    if not isinstance(parsed, dict):
        return arguments
    return " ".join(str(value) for value in parsed.values())


def _arguments_by_call(messages: Sequence[Message]) -> dict[str, str]:
    """Each assistant tool call's arguments, by call id."""
    found = {}
    for message in messages:
        if role(message) != "assistant":
            continue
        for call in tool_calls(message):
            arguments = _function(call).get("arguments")
            if isinstance(call.get("id"), str) and isinstance(arguments, str):
                found[call["id"]] = arguments
    return found


def _terms(content: str) -> set[str]:
    """What a text is about: its lowercase words of four letters or more, and its paths."""
    lowered = content.lower()
    words = set(WORD.findall(lowered)) - BOILERPLATE
    return words | set(PATH.findall(lowered))


def _function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    function = call.get("function")
    return function if isinstance(function, dict) else {}
