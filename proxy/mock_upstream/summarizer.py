"""The mock as the proxy's summarizer: it knows the proxy's summary prompt and answers it.

Whether compaction keeps what matters depends on the summarizer, so the mock plays two:

- "good" quotes every transcript line that carries a specific (a digit, a path, or a rule
  with "never", "always" or "must") under the proxy's section headings, within the request's
  `max_tokens`. Facts survive, as with a careful model.
- "poor" writes a short summary that keeps none of them: no ids, no paths, no numbers. It
  shows what the proxy loses when the model summarizes badly, and whether the proxy's own
  ledger of identifiers puts them back.

A request is a summary request when an instruction message is the proxy's summarizer prompt
(`proxy.core.summary.summary_request`): it opens with the prompt's first words, or names every
section heading. In the prefix form (`proxy.core.summary.prefix_request`, or
`responses_prefix_request` on `/v1/responses`, read from a chat view of its items) the prompt
is the closing user message after the conversation itself: the summary is then written from the
conversation's messages (from after the first user message, when the prompt says that one
stays) and the earlier summary the prompt carries, as from a transcript of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Literal

from proxy.core.messages import Message, is_instruction, role, text
from proxy.core.summary import AFTER_TASK, FOLD_IN, SECTIONS, render

SummaryQuality = Literal["good", "poor"]

_OPENING: Final = "You condense the earlier part of a conversation"
_HEADINGS: Final = tuple(f"## {section}" for section in SECTIONS)

_GOAL, _RULES, _FACTS, _FILES = SECTIONS[0], SECTIONS[1], SECTIONS[3], SECTIONS[4]
_NEXT: Final = SECTIONS[-1]
# Checked in this order; a line goes under the first section that claims it.
_KINDS: Final = (
    (_RULES, re.compile(r"\b(?:never|always|must)\b", re.IGNORECASE)),
    (_FILES, re.compile(r"[\w.~-]*/[\w.-]+|\b[\w-]+\.(?:py|js|ts|json|ya?ml|toml|md|txt|sh)\b")),
    (_FACTS, re.compile(r"\d")),
)
_LONGEST_QUOTE: Final = 400
"""Characters of one quoted line: a careful model quotes a fact, not a whole tool output."""

_POOR: Final = {
    _GOAL: "The user wanted help with their task.",
    "Decisions": "Some approaches were discussed.",
    "Done": "Several things were looked at and some progress was made.",
    _NEXT: "Carry on with the task.",
}


def is_summary_request(body: Mapping[str, Any]) -> bool:
    """Whether `body` is the proxy asking for a summary (see the module docstring)."""
    if _closing(body) is not None:
        return True
    for message in _messages(body):
        if is_instruction(message):
            instructions = text(message)
            if instructions.startswith(_OPENING) or all(h in instructions for h in _HEADINGS):
                return True
    return False


def _messages(body: Mapping[str, Any]) -> list[Message]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _closing(body: Mapping[str, Any]) -> str | None:
    """The prompt of a summary request in the prefix form: its last message, a user message
    that opens with the summarizer prompt's first words."""
    messages = _messages(body)
    last = messages[-1] if messages else None
    if last is not None and role(last) == "user" and text(last).startswith(_OPENING):
        return text(last)
    return None


def summarize(body: Mapping[str, Any], quality: SummaryQuality, count: Callable[[str], int]) -> str:
    """The summary the mock's summarizer writes for a summary request; `count` counts tokens."""
    if quality == "poor":
        return _render({section: [_POOR[section]] for section in _POOR})
    budget = _max_tokens(body)
    sections: dict[str, list[str]] = {}
    used = 0
    for section, line in _quotes(body):
        used += count(line) + 2  # the bullet and the line break
        if budget is not None and used > budget:
            break
        sections.setdefault(section, []).append(line)
    return _render(sections)


def _quotes(body: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Each line worth keeping with its section, in transcript order: the first user line as
    the goal, and every distinct line with a specific."""
    seen: set[str] = set()
    goal = False
    for line in _lines(body):
        if line in seen:
            continue
        seen.add(line)
        if not goal and line.startswith("user: "):
            # The task as the user put it; its specifics are quoted again under their heading.
            goal = True
            yield _GOAL, line
        kind = next((section for section, pattern in _KINDS if pattern.search(line)), None)
        if kind is not None:
            yield kind, line


def _lines(body: Mapping[str, Any]) -> Iterator[str]:
    for block in _texts(body):
        for raw in block.splitlines():
            # A previous summary's bullets are quoted again, so facts survive rolling summaries.
            line = raw.strip().removeprefix("- ").strip()
            if line and not line.startswith("#"):
                yield line[:_LONGEST_QUOTE]


def _texts(body: Mapping[str, Any]) -> list[str]:
    """What the summary is written from, in order: the transcript form's user message (the
    earlier summary, then the transcript), or the same read from the prefix form."""
    closing = _closing(body)
    if closing is None:
        return [text(m) for m in _messages(body) if role(m) == "user"]
    conversation = [m for m in _messages(body)[:-1] if not is_instruction(m)]
    if AFTER_TASK in closing:
        users = [i for i, m in enumerate(conversation) if role(m) == "user"]
        conversation = conversation[users[0] + 1 :] if users else conversation
    previous = closing.partition(FOLD_IN)[2]
    return [previous, *(render(m) for m in conversation)]


def _render(sections: Mapping[str, list[str]]) -> str:
    blocks = []
    for section in SECTIONS:
        bullets = sections.get(section) or ["none"]
        blocks.append(f"## {section}\n" + "\n".join(f"- {bullet}" for bullet in bullets))
    return "\n\n".join(blocks)


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    # Chat's names, then the Responses API's (in the chat view of its items).
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if type(value) is int:
            return value
    return None
