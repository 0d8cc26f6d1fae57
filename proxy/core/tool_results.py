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
import re
from collections.abc import Callable, Sequence
from typing import Any

from proxy.core.ledger import FactKind, specifics_at
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
_KEPT_KINDS: frozenset[FactKind] = frozenset({"identifier", "hash", "path", "url", "email"})
# Error codes say what failed and how: an exit or status code, an HTTP status, an errno name,
# a Node error code, a compiler's or linter's code, an exception's name. Kept like the other
# names (the ledger's patterns do not look for them: they are no facts a summary must state).
_ERRNOS = (
    *("ENOENT", "EACCES", "EPERM", "EEXIST", "ENOTDIR", "EISDIR", "EINVAL", "ENOSPC"),
    *("EMFILE", "EAGAIN", "EPIPE", "EBUSY", "EROFS", "ENOTEMPTY", "EBADF", "ENOMEM"),
    *("ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "EADDRINUSE", "ETIMEDOUT"),
    *("EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND"),
)
_ERROR_CODE = re.compile(
    r"\b(?:exit|status|error|return) code:? ?-?\d+\b"
    r"|\bHTTP(?:/\d(?:\.\d)?)? [1-5]\d\d\b"
    rf"|\b(?:{'|'.join(_ERRNOS)}|SIG[A-Z]{{3,6}}|ERR_[A-Z0-9_]{{2,60}})\b"
    r"|\b(?:E|W|F|TS|CS|SC)\d{3,4}\b"
    r"|\b[A-Z][A-Za-z0-9]{0,60}(?:Error|Exception)\b"
)
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


def clear(
    message: Message, tool_name: str | None, tokens: int, names: Sequence[str] | None = None
) -> Message:
    """The result replaced by a one-line placeholder naming the tool, the size cleared and
    the first few identifiers the result mentioned (verbatim): `names`, when the caller
    knows them already (`kept_names` of the result, found once: `proxy.core.mentions`)."""
    name = tool_name or message.get("name") or "tool"
    if names is None:
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
    """The distinct identifiers, hashes, paths, URLs and error codes of `body`, first seen
    first, within `MAX_KEPT_NAMES` and `MAX_KEPT_CHARS`."""
    scanned = body[:NAMES_SCANNED_CHARS]
    found = [(start, fact.text) for start, fact in specifics_at(scanned, _KEPT_KINDS)]
    found += [(match.start(), match.group()) for match in _ERROR_CODE.finditer(scanned)]
    found.sort(key=lambda item: item[0])
    kept: list[str] = []
    used = 0
    for start, name in found:
        if name in kept or used + len(name) > MAX_KEPT_CHARS or _cut(body, start, name):
            continue
        kept.append(name)
        used += len(name)
        if len(kept) == MAX_KEPT_NAMES:
            break
    return kept


def _cut(body: str, start: int, name: str) -> bool:
    """Whether `name` (found at `start`) may be part of a longer one that was cut: it ends
    where the text scanned ends, or touches the note of a result cut to head and tail
    (`trim`: the note stands in a paragraph of its own, in brackets, where the middle went).
    A part of a name is no name: listed, it would point at nothing."""
    end = start + len(name)
    return (
        end == NAMES_SCANNED_CHARS < len(body)
        or body.startswith("\n\n[", end)
        or body.endswith("]\n\n", 0, start)
    )


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
