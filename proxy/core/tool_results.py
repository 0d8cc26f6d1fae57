"""The two cheap layers, both on tool results: trim the oversized one, clear the old ones.

Tool output is the bulk of an agent's context (file dumps, search results, logs) and, once
acted on, the least needed: replacing old results with a one-line placeholder (observation
masking) performs about as well as summarizing them, at no LLM cost. A single result too big
for the window is cut to its head and tail, and the text says so, so the model asks for a
narrower slice rather than guessing at what was cut.

Both return new message dicts (copies with `content` replaced); every other field, the
`tool_call_id` above all, is kept, so tool pairs stay intact. Placeholders are deterministic:
the same input always gives the same bytes, which keeps the provider's prompt cache warm.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from proxy.core.ledger import find_specifics
from proxy.core.messages import Message, role, text

CountText = Callable[[str], int]

CLEARED_PREFIX = "[tool result cleared to save context"
_TRIMMED_NOTES = ("tokens (", "[showing ")
# Room kept for the note a trimmed result carries, so the result stays under its cap.
NOTE_ALLOWANCE = 100
_RESULT_ROLES = frozenset({"tool", "function"})
# When cutting text, the head gets this share of what is kept: the start of a file or log
# usually says what it is, the end says how it finished.
_HEAD_SHARE = 0.6
# A cleared result keeps the names it mentioned (ids, hashes, versions, paths, URLs): the
# model can still refer to them, and ask for them again by name. Bounded per placeholder.
_KEPT_KINDS = frozenset({"identifier", "hash", "path", "url", "email"})
MAX_KEPT_NAMES = 6
_MENTIONED = "; it mentioned "
MAX_KEPT_CHARS = 240
NAMES_SCANNED_CHARS = 64 * 1024
"""The names kept are looked for in the result's first this many characters: the first seen
are kept, and scanning a multi-megabyte result would hold the event loop for seconds."""


def is_tool_result(message: Message) -> bool:
    return role(message) in _RESULT_ROLES


def is_cleared(message: Message) -> bool:
    return text(message).startswith(CLEARED_PREFIX)


def is_trimmed(message: Message) -> bool:
    """Whether a result already went through `trim` (trimming again would change it)."""
    body = text(message)
    return "too large for the context window" in body and any(n in body for n in _TRIMMED_NOTES)


def clear(message: Message, tool_name: str | None, tokens: int) -> Message:
    """The result replaced by a one-line placeholder naming the tool, the size cleared and
    the first few identifiers the result mentioned (verbatim)."""
    name = tool_name or message.get("name") or "tool"
    names = kept_names(text(message))
    mentioned = f"{_MENTIONED}{', '.join(names)}" if names else ""
    note = (
        f"{CLEARED_PREFIX}: {name} returned {tokens} tokens here{mentioned}; "
        "call it again if needed]"
    )
    return {**message, "content": note}


def names_kept(cleared: Message) -> str:
    """What the placeholder of a cleared result kept of it: the names it mentioned ("" if
    none). Its size and wording are no facts of the conversation."""
    _, _, names = text(cleared).partition(_MENTIONED)
    return names.removesuffix("; call it again if needed]")


def kept_names(body: str) -> list[str]:
    """The distinct identifiers, hashes, paths and URLs of `body`, first seen first, within
    `MAX_KEPT_NAMES` and `MAX_KEPT_CHARS`."""
    kept: list[str] = []
    used = 0
    for fact in find_specifics(body[:NAMES_SCANNED_CHARS]):
        if fact.kind not in _KEPT_KINDS or fact.text in kept:
            continue
        if used + len(fact.text) > MAX_KEPT_CHARS:
            continue
        kept.append(fact.text)
        used += len(fact.text)
        if len(kept) == MAX_KEPT_NAMES:
            break
    return kept


def trim(message: Message, *, max_tokens: int, count: CountText, tool_name: str | None) -> Message:
    """The result (or, in an emergency, any text message) cut to about `max_tokens`: a JSON
    array to its first items, text to its head and tail, with a note saying what was cut and
    how to ask for less."""
    body = text(message)
    max_tokens = max(max_tokens - NOTE_ALLOWANCE, 1)
    items = _json_array(body)
    shown = _first_items(items, max_tokens=max_tokens, count=count) if items else None
    if shown is not None:
        return {**message, "content": shown}
    what = f"{tool_name} result" if tool_name else "tool result"
    what = what if is_tool_result(message) else "message"
    return {**message, "content": _head_and_tail(body, max_tokens, count, what)}


def _json_array(body: str) -> list[Any] | None:
    if not body.lstrip().startswith("["):
        return None
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


def _first_items(items: list[Any], *, max_tokens: int, count: CountText) -> str | None:
    """The first items that fit, or None when not even the first one does."""
    kept: list[str] = []
    used = 0
    for item in items:
        encoded = json.dumps(item, ensure_ascii=False)
        used += count(encoded) + 1
        if used > max_tokens:
            break
        kept.append(encoded)
    if not kept:
        return None
    if len(kept) == len(items):
        # Only the layout was too large (an indented array): every item is here, said once.
        return "[" + ", ".join(kept) + "]"
    note = (
        f"[showing {len(kept)} of {len(items)} items: the full result was too large for the "
        "context window. Ask for the rest with a narrower query (a filter, a page, a range) "
        "instead of assuming what the other items contain.]"
    )
    return "[" + ", ".join(kept) + "]\n" + note


def _head_and_tail(body: str, max_tokens: int, count: CountText, what: str) -> str:
    total = count(body)
    # Characters per token of this very text, so the cut lands near the token budget
    # without encoding and decoding.
    keep_chars = int(len(body) * max_tokens / max(total, 1))
    head_chars = _line_boundary(body, int(keep_chars * _HEAD_SHARE), forward=False)
    tail_start = _line_boundary(body, len(body) - (keep_chars - head_chars), forward=True)
    head, tail = body[:head_chars], body[max(tail_start, head_chars) :]
    cut_tokens = max(total - count(head) - count(tail), 0)
    note = (
        f"\n\n[... {cut_tokens} tokens ({len(body) - len(head) - len(tail)} characters) cut "
        f"from the middle of this {what}: it was too large for the context window. "
        "If the missing part matters, call the tool again with a narrower query (a line "
        "range, a filter, a smaller page) rather than guessing what it said ...]\n\n"
    )
    return head + note + tail


def _line_boundary(body: str, position: int, *, forward: bool) -> int:
    """`position` moved to a nearby line start, if one is close (within 200 characters)."""
    position = min(max(position, 0), len(body))
    if forward:
        newline = body.find("\n", position, position + 200)
        return newline + 1 if newline != -1 else position
    newline = body.rfind("\n", max(position - 200, 0), position)
    return newline + 1 if newline != -1 else position
