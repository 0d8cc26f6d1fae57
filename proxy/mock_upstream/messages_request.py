"""Reading a Messages API request as the mock's provider does.

The mock reads the body on its own, without the proxy's translation (`proxy.core`): it stands
for the provider, so it must catch the proxy's mistakes rather than share them. Only what the
provider needs is read here: the messages and their content blocks, the system blocks, the
tools, whether thinking is on, and the turns the API makes of consecutive same-role messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.mock_upstream.script import JSON

TURN_ROLES: Final = ("user", "assistant")
"""The roles that take turns. Others (Claude Code's `system` entries inside `messages`, allowed
by a beta) sit between turns without being one."""
THINKING_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})


def messages(body: Mapping[str, Any]) -> list[JSON]:
    """The request's messages that are objects, in order."""
    raw = body.get("messages")
    return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []


def blocks(content: object) -> list[JSON]:
    """A message's (or a tool result's) content as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def block_type(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    return kind if isinstance(kind, str) else ""


def system_blocks(body: Mapping[str, Any]) -> list[JSON]:
    """`system` as blocks: a string is one text block."""
    return blocks(body.get("system"))


def tools(body: Mapping[str, Any]) -> list[JSON]:
    raw = body.get("tools")
    return [tool for tool in raw if isinstance(tool, dict)] if isinstance(raw, list) else []


def thinking_mode(body: Mapping[str, Any]) -> str | None:
    """ "enabled" or "adaptive" when the request lets the model think, else None."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    return kind if kind in ("enabled", "adaptive") else None


def text_of(content: object) -> str:
    """The text blocks of `content` (a string, or blocks), joined by line breaks."""
    texts = [b.get("text") for b in blocks(content) if block_type(b) == "text"]
    return "\n".join(text for text in texts if isinstance(text, str))


@dataclass(frozen=True, slots=True)
class Placed:
    """A content block with the place the API names it by: `messages.{index}.content.{at}`."""

    index: int
    at: int
    block: JSON


@dataclass(slots=True)
class Turn:
    """Consecutive messages of one role, as the API merges them into one."""

    role: str
    index: int
    """The index of the turn's first message in `messages`."""
    blocks: list[Placed] = field(default_factory=list)


def turns(listed: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """The user and assistant turns of `listed` (messages of other roles left out)."""
    merged: list[Turn] = []
    for index, message in enumerate(listed):
        role = message.get("role")
        if role not in TURN_ROLES:
            continue
        if not merged or merged[-1].role != role:
            merged.append(Turn(str(role), index))
        placed = [Placed(index, at, b) for at, b in enumerate(blocks(message.get("content")))]
        merged[-1].blocks.extend(placed)
    return merged
