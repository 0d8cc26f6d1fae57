"""The calls the running turn made: what a block lists when it folds the turn's own rounds.

An agent doing twenty tool rounds under one user message (opencode, Codex) judges its
progress from its history. When a window too small for the turn makes the plan fold the
turn's oldest rounds into the block, the block lists each call made so far in the turn, its
name and arguments and the id that recalls its result: the agent knows what it has done and
does not start over (an agent that read nothing of it ran 640 requests in 300 s, never
finishing).

The section is the block's own, like the ledger and the trail: one call a line under a
one-line heading, read back when the block is folded into a newer one while the same turn
runs, so every call of the turn stays listed; a block written once the turn is over carries
none (what was done is then history, for the summary and the trail).

Layout: after the ledger and the trail, before the summary or the marker's text (the part a
short block gives up first, from its end).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Final

from proxy.core.messages import Message, answers, role, tool_calls
from proxy.core.recall import reference

HEADING: Final = (
    "Calls already made in the running turn, oldest first; their results are not repeated here:"
)
_BULLET = "- "
MAX_ARGUMENT_CHARS: Final = 160
"""A call's arguments beyond this are cut (a file the call wrote is its result's business)."""


def call_lines(
    messages: Sequence[Message], recall_of: Callable[[Message], str | None]
) -> list[str]:
    """One line per tool call in `messages`, oldest first: `name(arguments)`, and how to
    recall its result when `recall_of` (the result message) gives an id."""
    results = {answers(m): m for m in messages if role(m) == "tool"}
    lines = []
    for message in messages:
        for call in tool_calls(message):
            function = call.get("function")
            if not isinstance(function, dict):
                continue
            line = f"{function.get('name') or 'tool'}({_arguments(function.get('arguments'))})"
            result = results.get(call.get("id"))
            rid = recall_of(result) if result is not None else None
            lines.append(f"{line}: {reference(rid)} returns its result" if rid else line)
    return lines


def _arguments(arguments: object) -> str:
    # As the call sent them (a JSON string, as a rule), on one line.
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
    shown = " ".join(shown.split())  # one line
    if len(shown) > MAX_ARGUMENT_CHARS:
        shown = shown[:MAX_ARGUMENT_CHARS] + " ..."
    return shown


def with_calls(note: str, lines: Sequence[str]) -> str:
    """`note` (a marker or a summary, its ledger and trail apart) with the section after
    its first paragraph; `note` itself when there is no call to list."""
    if not lines:
        return note
    header, _, rest = note.partition("\n\n")
    section = "\n".join([HEADING, *(_BULLET + line for line in lines)])
    return "\n\n".join(part for part in (header, section, rest) if part)


def without_calls(note: str) -> tuple[str, list[str]]:
    """`note` as it was before `with_calls`, and the calls it listed."""
    header, _, rest = note.partition("\n\n")
    if not rest.startswith(HEADING):
        return note, []
    section, _, after = rest.partition("\n\n")
    lines = [line[len(_BULLET) :] for line in section.split("\n")[1:] if line.startswith(_BULLET)]
    return "\n\n".join(part for part in (header, after) if part), lines
