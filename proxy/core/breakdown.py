"""Where a conversation's tokens go, by category: what the operator looks at first.

The categories add up to the counter's total for the request: instructions (system and
developer messages), tool schemas, the proxy's own notes (summaries and markers), tool
results, cleared-result placeholders, and every other message (which also carries the
reply priming tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from proxy.core.messages import Message, is_instruction
from proxy.core.summary import detach_note, note_of
from proxy.core.tool_results import is_cleared, is_tool_result


class _Counter(Protocol):
    def message(self, message: Message) -> int: ...

    def messages(self, messages: Sequence[Message]) -> int: ...

    def tools(self, body: Mapping[str, Any]) -> int: ...


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Tokens by category; `total` is what the whole request counts."""

    system: int = 0
    tools: int = 0
    summary: int = 0
    messages: int = 0
    tool_results: int = 0
    placeholders: int = 0

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def breakdown(messages: Sequence[Message], body: Mapping[str, Any], counter: _Counter) -> Breakdown:
    """Count `messages` (and the request's tool schemas) by category."""
    totals = dict.fromkeys(("system", "summary", "messages", "tool_results", "placeholders"), 0)
    for message in messages:
        restored, note = detach_note(message)
        if note is not None:
            # A note merged into a user message: its share is the summary's, the rest theirs.
            own = counter.message(restored)
            totals["summary"] += counter.message(message) - own
            totals[_category(restored)] += own
        else:
            totals[_category(message)] += counter.message(message)
    # Reply priming: what `messages()` adds beyond the messages themselves.
    totals["messages"] += counter.messages([])
    return Breakdown(tools=counter.tools(body), **totals)


def _category(message: Message) -> str:
    if is_instruction(message):
        return "system"
    if note_of(message) is not None:
        return "summary"
    if is_tool_result(message):
        return "placeholders" if is_cleared(message) else "tool_results"
    return "messages"
