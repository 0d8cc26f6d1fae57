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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.ledger import FactKind, specifics_at
from proxy.core.messages import Message, role, text
from proxy.core.recall import reference

CountText = Callable[[str], int]

CLEARED_PREFIX = "[tool result cleared to save context"
_TRIMMED_NOTES = ("tokens (", "[showing ")
# Room kept for the note a trimmed result carries, so the result stays under its cap.
NOTE_ALLOWANCE = 100
_RESULT_ROLES = frozenset({"tool", "function"})
# When cutting text, the head gets this share of what is kept: the start of a file or log
# usually says what it is, the end says how it finished.
_HEAD_SHARE = 0.6
# A cut whose note lists names gives their room up from its kept part, down to this many
# tokens: less would keep no line of the result to read.
_LEAST_KEPT = 8
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
    message: Message,
    tool_name: str | None,
    tokens: int,
    names: Sequence[str] | None = None,
    recall: str | None = None,
) -> Message:
    """The result replaced by a one-line placeholder naming the tool, the size cleared and
    the first few identifiers the result mentioned (verbatim): `names`, when the caller
    knows them already (`kept_names` of the result, found once: `proxy.core.mentions`).
    With a `recall` id, the placeholder says how to get the result back instead of asking
    for the tool to be called again (`proxy.core.recall`)."""
    name = tool_name or message.get("name") or "tool"
    if names is None:
        names = kept_names(text(message))
    ending = f"{reference(recall)} returns it" if recall else "call it again if needed"
    note = f"{CLEARED_PREFIX}: {name} returned {tokens} tokens here{_mentioned(names)}; {ending}]"
    return {**message, "content": note}


_PLACEHOLDER_END = re.compile(
    r'; (?:call it again if needed|context_recall\(id="[^"]*"\) returns it)\]$'
)


def names_kept(cleared: Message) -> str:
    """What the placeholder of a cleared result kept of it: the names it mentioned ("" if
    none). Its size and wording are no facts of the conversation."""
    _, _, names = text(cleared).partition(_MENTIONED)
    return _PLACEHOLDER_END.sub("", names)


def recall_of(cut: Message) -> str | None:
    """The recall id a result cut to head and tail names for its whole text, if any: a
    cut result cleared later keeps it (the placeholder then stands for the original, not
    for the cut)."""
    found = _CUT_RECALL.search(text(cut))
    return found[1] if found else None


_CUT_RECALL = re.compile(
    r'context_recall\(id="(rc_[a-z2-7]{10})"\) returns (?:the whole|every item)'
)


def kept_names(body: str) -> list[str]:
    """The distinct identifiers, hashes, paths, URLs and error codes of `body`, first seen
    first, within `MAX_KEPT_NAMES` and `MAX_KEPT_CHARS`."""
    kept: list[str] = []
    used = 0
    for offset, piece in _pieces(body[:NAMES_SCANNED_CHARS]):
        found = [(start, fact.text) for start, fact in specifics_at(piece, _KEPT_KINDS)]
        found += [(match.start(), match.group()) for match in _ERROR_CODE.finditer(piece)]
        found.sort(key=lambda item: item[0])
        for start, name in found:
            if name in kept or used + len(name) > MAX_KEPT_CHARS:
                continue
            if _cut(body, offset + start, name):
                continue
            kept.append(name)
            used += len(name)
            if len(kept) == MAX_KEPT_NAMES:
                return kept
    return kept


_FIRST_PIECE_CHARS = 512
# Where a piece may end: after a line break or a double quote (a JSON result is often one
# line, its strings quoted). No pattern `kept_names` uses matches either, looks behind at
# either, or counts either as a word character (`\b`).
_PIECE_END = re.compile(r'[\n"]')


def _pieces(scanned: str) -> Iterator[tuple[int, str]]:
    """`scanned` in pieces, each ending at a `_PIECE_END` (but the last) and twice the size
    of the one before, with where each starts: the names are looked for piece by piece, and
    most results name enough in their first lines, so the rest is never scanned.

    Piece by piece finds what scanning the whole text finds, in the same order: no match
    spans a piece's end, a piece starts as the text after its end character does for every
    lookbehind and word boundary, and a rule's match claims only its own span.
    """
    start, size = 0, _FIRST_PIECE_CHARS
    while start < len(scanned):
        found = _PIECE_END.search(scanned, start + size)
        end = found.end() if found else len(scanned)
        yield start, scanned[start:end]
        start, size = end, size * 2


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


def trim(
    message: Message,
    *,
    max_tokens: int,
    count: CountText,
    tool_name: str | None,
    names: Sequence[str] | None = None,
    recall: str | None = None,
) -> Message:
    """The result (or, in an emergency, any text message) cut to about `max_tokens`: a JSON
    array to its first and last items, text to its head and tail, with a note saying what was
    cut, how to ask for less and which of the result's names the cut took away (`names`, when
    the caller knows them already: `kept_names` of the result, as for `clear`). With a
    `recall` id, the note also says how to get the whole text back (`proxy.core.recall`)."""
    body = text(message)
    names = kept_names(body) if names is None else names
    room = max(max_tokens - NOTE_ALLOWANCE, 1)
    items = _json_array(body)
    if items:
        array = _Items(items, count, recall)
        if array.fitting(range(len(items)), room)[0] == len(items):
            # Only the layout was too large (an indented array): every item is here, said once.
            return {**message, "content": array.line(range(len(items)))}
        # Not even the first item fitting, the array is cut as text.
        if array.cost(0) <= _room_for(names, room, count):
            return {**message, "content": _listing(names, room, count, array.ends)}
    what = f"{tool_name} result" if tool_name else "tool result"
    what = what if is_tool_result(message) else "message"
    middle = _Middle(body, count(body), count, what, recall)
    return {**message, "content": _listing(names, room, count, middle.cut)}


@dataclass(frozen=True, slots=True)
class _Kept:
    """What a cut keeps of a result (`head` and `tail`: the note stands between them), and
    the cut text once its note lists the names it took away (`_mentioned` of them)."""

    head: str
    tail: str
    noted: Callable[[str], str]


def _listing(names: Sequence[str], room: int, count: CountText, cut: Callable[[int], _Kept]) -> str:
    """The result cut by `cut` to `room`, less the room its note takes to list the names the
    kept part does not show. Which those are is known only after the cut: it is made with
    room for them all, then again with the room of the names it shows given back (more room
    shows no fewer, so the note lists no more)."""
    kept = cut(_room_for(names, room, count))
    unseen = _unseen(names, kept.head, kept.tail)
    if len(unseen) < len(names):
        kept = cut(_room_for(unseen, room, count))
        unseen = _unseen(names, kept.head, kept.tail)
    return kept.noted(_mentioned(unseen))


def _room_for(names: Sequence[str], room: int, count: CountText) -> int:
    """What a cut's kept part gets of `room` once its note lists `names`: never below
    `_LEAST_KEPT` for them, or less would be all note and no result."""
    if not names:
        return room
    return max(room - count(_mentioned(names)), min(room, _LEAST_KEPT))


def _mentioned(names: Sequence[str]) -> str:
    return f"{_MENTIONED}{', '.join(names)}" if names else ""


def _unseen(names: Sequence[str], head: str, tail: str) -> list[str]:
    """`names` the kept `head` and `tail` do not show whole. One touching the note (the end
    of `head`, the start of `tail`) counts as unseen: `kept_names` skips it there as cut."""
    return [name for name in names if name not in head[:-1] and name not in tail[1:]]


def _json_array(body: str) -> list[Any] | None:
    if not body.lstrip().startswith("["):
        return None
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


class _Items:
    """The items of a JSON array, each encoded and counted once, only when a cut looks at it:
    a cut of a 100,000-item array looks at its first and last few."""

    def __init__(self, items: list[Any], count: CountText, recall: str | None = None) -> None:
        self.items, self.count, self.recall = items, count, recall
        self.encoded: dict[int, str] = {}

    def text(self, index: int) -> str:
        if index not in self.encoded:
            self.encoded[index] = json.dumps(self.items[index], ensure_ascii=False)
        return self.encoded[index]

    def cost(self, index: int) -> int:
        """The tokens item `index` takes in the array, its separator included."""
        return self.count(self.text(index)) + 1

    def line(self, indices: Sequence[int]) -> str:
        return "[" + ", ".join(self.text(i) for i in indices) + "]"

    def fitting(self, indices: range, room: int) -> tuple[int, int]:
        """How many of `indices`, in order, fit in `room`, and the tokens they take."""
        taken = used = 0
        for index in indices:
            cost = self.cost(index)
            if used + cost > room:
                break
            taken, used = taken + 1, used + cost
        return taken, used

    def ends(self, room: int) -> _Kept:
        """The first and last items that fit in `room` (the first one does), on one line, with
        a note saying how many of how many."""
        total = len(self.items)
        head, tail = self.split(room)
        shown = [*range(head), *range(total - tail, total)]
        line = self.line(shown)
        ends = f" (the first {head} and the last {tail})" if tail else ""
        ask = "Ask"
        if self.recall:
            ask = f"{reference(self.recall)} returns every item; or ask"

        def noted(mentioned: str) -> str:
            return (
                f"{line}\n[showing {len(shown)} of {total} items{ends}: the full result was too "
                f"large for the context window{mentioned}. {ask} for the rest with a narrower "
                "query (a filter, a page, a range) instead of assuming what the other items "
                "contain.]"
            )

        return _Kept(line, "", noted)

    def split(self, room: int) -> tuple[int, int]:
        """How many first and last items a cut keeps in `room` (the first item fits in it):
        the head gets `_HEAD_SHARE` of it, as a text's does, and the first item even past that
        share, the tail the rest, and the head whatever room the tail left (a last item too
        big to show leaves its room to the first ones)."""
        total = len(self.items)
        head, used = self.fitting(range(total), max(int(room * _HEAD_SHARE), self.cost(0)))
        tail, tail_used = self.fitting(range(total - 1, head - 1, -1), room - used)
        more, _ = self.fitting(range(head, total - tail), room - used - tail_used)
        return head + more, tail


@dataclass(frozen=True, slots=True)
class _Middle:
    """A text cut to its head and tail, the note where its middle was (`total`: its tokens,
    counted once for every cut tried)."""

    body: str
    total: int
    count: CountText
    what: str
    recall: str | None = None

    def cut(self, room: int) -> _Kept:
        body = self.body
        # Characters per token of this very text, so the cut lands near the token budget
        # without encoding and decoding.
        keep_chars = int(len(body) * room / max(self.total, 1))
        head_chars = _line_boundary(body, int(keep_chars * _HEAD_SHARE), forward=False)
        tail_start = _line_boundary(body, len(body) - (keep_chars - head_chars), forward=True)
        head, tail = body[:head_chars], body[max(tail_start, head_chars) :]
        cut_tokens = max(self.total - self.count(head) - self.count(tail), 0)
        cut_chars = len(body) - len(head) - len(tail)
        ask = "If the missing part matters, call"
        if self.recall:
            ask = f"{reference(self.recall)} returns the whole {self.what}; or call"

        def noted(mentioned: str) -> str:
            # The names only the middle held are listed inside the note: the model can still
            # refer to them, and `kept_names` of the cut text finds them again.
            opening = (
                f"{head}\n\n[... {cut_tokens} tokens ({cut_chars} characters) cut from the "
                f"middle of this {self.what}: it was too large for the context window"
                f"{mentioned}."
            )
            if self.what == "message":
                # No tool to call again for a message: only the id can give it back.
                back = f" {reference(self.recall)} returns the whole message" if self.recall else ""
                return f"{opening}{back} ...]\n\n{tail}"
            return (
                f"{opening} {ask} the tool again with a narrower query (a line range, a "
                f"filter, a smaller page) rather than guessing what it said ...]\n\n{tail}"
            )

        return _Kept(head, tail, noted)


def _line_boundary(body: str, position: int, *, forward: bool) -> int:
    """`position` moved to a nearby line start, if one is close (within 200 characters)."""
    position = min(max(position, 0), len(body))
    if forward:
        newline = body.find("\n", position, position + 200)
        return newline + 1 if newline != -1 else position
    newline = body.rfind("\n", max(position - 200, 0), position)
    return newline + 1 if newline != -1 else position
