"""What a user pasted: the bulk of a user message, which is data, not the user's words.

Users paste logs, files, stack traces and JSON beside a sentence that says what to do with
them. The sentence is the user's word and goes to the ledger when the message leaves; the
paste is data, like a tool result: once it is no longer the running turn's it is cut to
head and tail with the id that recalls it whole, and the ledger names it in one line. Copied
line by line into the ledger, one pasted log took the room of every later statement.

Bulk is found by shape, never by size alone (a long paragraph of instructions is words):

- a fenced block (```` ``` ```` or `~~~`) of `FENCE_LINES` lines or `FENCE_CHARS` characters
  (a one-line fenced command is something the user says to run, and stays words);
- a run of `RUN_LINES` lines that open alike once digits are masked ("12:00:01 worker-3 ...",
  "- worker-7 dropped 12 deliveries"): a log, a listing, a table; the opening is taken after
  a list marker and must hold a masked number, so a list of the user's own rules ("- never
  ...", "1. Deploy ...") is no bulk;
- a run of `RUN_LINES` lines of code (indented, or opening or closing a block);
- a JSON object or array at the start of a line, of `JSON_CHARS` characters;
- a line of `LONG_LINE_CHARS` characters with hardly a space (a blob, a minified file).

A paste this module cut carries its note between its head and tail, and the note says how
many lines of each it kept: the cut is found again by it (a cut paste is still bulk, and its
kept lines never become statements), and is never cut again.

Pure and linear in the text's length: every plan reads every user message's statements.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from proxy.core.recall import reference

FENCE_LINES: Final = 4
FENCE_CHARS: Final = 300
RUN_LINES: Final = 6
RUN_CHARS: Final = 200
JSON_CHARS: Final = 200
LONG_LINE_CHARS: Final = 1_000
_CODE_SHARE = 0.75
_FIRST_LINE_CHARS = 120
# When a paste is cut, the head gets this share of what is kept (as a tool result's: the
# start says what it is, the end how it finished).
_HEAD_SHARE = 0.6
NOTE_PREFIX: Final = "[... pasted text cut here: "
_NOTE = re.compile(
    r"^\[\.\.\. pasted text cut here: (?P<cut>\d+) of (?P<lines>\d+) lines \((?P<tokens>\d+)"
    r" tokens\) not shown, the first (?P<head>\d+) and last (?P<tail>\d+) kept"
    r'(?:; context_recall\(id="(?P<rid>rc_[a-z2-7]{10})"\) returns the whole message)? \.\.\.\]$',
    re.MULTILINE,
)
# The note of a message cut to head and tail (`proxy.core.tool_results.trim`, when a window
# cannot hold a message whole): the proxy's words, never the user's.
_MIDDLE_NOTE = re.compile(
    r"^\[\.\.\. \d+ tokens \(\d+ characters\) cut from the middle of this .*\]$", re.M
)
LEDGER_PREFIX: Final = "[pasted: "
"""How the ledger's line naming a message's pastes opens (`ledger_line`)."""

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_LIST_MARKER = re.compile(r"^(?:[-*+•>]|\d{1,3}[.)])$")
_DIGITS = re.compile(r"\d+")
_CODE_OPENING = re.compile(
    r"^\s*(?:def|class|import|from|return|if|elif|else|for|while|try|except|with|function|"
    r"const|let|var|public|private|package|func|fn|impl|struct|#include|@\w+)\b"
)
_LOG_TAG = re.compile(
    r"^(?:\[.*\]?|<\w+>|(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b.*)$"
)
_CODE_ENDINGS = ("{", "}", ";", "):", "},", "];", "=>")


@dataclass(frozen=True, slots=True)
class Span:
    """Characters `start` to `end` of a text are bulk: `lines` lines of it."""

    start: int
    end: int
    lines: int


def spans(body: str) -> tuple[Span, ...]:
    """The bulk of `body`, in order. Two pastes a blank line apart are two: each is cut on
    its own, so a cut never takes one block's closing fence and leaves the next one's
    opening (the rest of the message would read as code)."""
    lines = _lines(body)
    cuts = _cut_ranges(body, lines)
    found: list[tuple[int, int]] = []  # line ranges
    index = 0
    while index < len(lines):
        stop = cuts.get(index) or _bulk_from(body, lines, index)
        if stop > index:
            found.append((index, stop))
            index = stop
        else:
            index += 1
    return tuple(Span(lines[start][0], lines[stop - 1][1], stop - start) for start, stop in found)


def _cut_ranges(body: str, lines: Sequence[_Line]) -> dict[int, int]:
    """For each line of a paste this module cut (its note and the lines the note says it
    kept), where that paste ends: a cut paste is bulk however few lines it kept."""
    if NOTE_PREFIX not in body:
        return {}
    ranges: dict[int, int] = {}
    for index, (_, _, line) in enumerate(lines):
        note = _NOTE.match(line)
        if note is None:
            continue
        start = max(index - int(note["head"]), 0)
        stop = min(index + 1 + int(note["tail"]), len(lines))
        for at in range(start, stop):
            ranges.setdefault(at, stop)
    return ranges


def prose(body: str) -> str:
    """`body` without its bulk and without the note of a cut the proxy made in it: what
    the user wrote in their own words."""
    found = spans(body)
    parts, at = [], 0
    for span in found:
        parts.append(body[at : span.start])
        at = span.end
    parts.append(body[at:])
    words = "\n".join(parts)
    return _MIDDLE_NOTE.sub("", words) if " cut from the middle of this " in words else words


def ledger_line(body: str, recall: str | None) -> str | None:
    """The ledger's one line for what `body` pasted (None when it pasted nothing): how much,
    how the first paste opens, and the id that recalls the message whole."""
    found = spans(body)
    if not found:
        return None
    total = sum(_shown_lines(body, span) for span in found)
    piece = body[found[0].start : found[0].end]
    opening = next((line.strip() for line in piece.split("\n") if _is_content(line)), "")
    opening = opening[:60].replace('"', "'")
    what = f"{len(found)} pastes, " if len(found) > 1 else ""
    where = f"; {reference(recall)} returns it" if recall else ""
    return f'{LEDGER_PREFIX}{what}{total} lines starting "{opening}"{where}]'


def is_ledger_line(line: str) -> bool:
    return line.startswith(LEDGER_PREFIX)


def is_cut(body: str) -> bool:
    """Whether `body` holds a paste this module cut (cutting it again would change it)."""
    return NOTE_PREFIX in body and _NOTE.search(body) is not None


def recall_of(body: str) -> str | None:
    """The recall id a cut paste names for the whole message, if any."""
    found = _NOTE.search(body)
    return found["rid"] if found else None


def cut(body: str, max_tokens: int, count: Callable[[str], int], recall: str | None) -> str:
    """`body` with its bulk cut to head and tail so that it takes about `max_tokens`: the
    user's words stay whole, and each paste gets a share of what is left in proportion to
    its size. `body` itself when it has no bulk, holds a cut already, or is small enough."""
    return cut_texts([body], max_tokens, count, recall)[0]


def cut_texts(
    bodies: Sequence[str], max_tokens: int, count: Callable[[str], int], recall: str | None
) -> list[str]:
    """`cut` of one message whose words are in several texts (the text parts of a Messages
    or Responses user message): they take about `max_tokens` together, each paste in any of
    them given its share of what the words leave. The texts as they came when none holds
    bulk, one holds a cut already, or together they are small enough."""
    found = [spans(body) for body in bodies]
    whole = sum(count(body) for body in bodies)
    if not any(found) or any(map(is_cut, bodies)) or whole <= max_tokens:
        return list(bodies)
    pairs = zip(bodies, found, strict=True)
    sizes = [[count(body[span.start : span.end]) for span in held] for body, held in pairs]
    bulk = sum(map(sum, sizes))
    notes = sum(map(len, found)) * count(_note(999, 9999, 99999, 99, 99, recall))
    room = max(max_tokens - (whole - bulk) - notes, 0)
    total = max(bulk, 1)
    cuts = []
    for body, held, held_sizes in zip(bodies, found, sizes, strict=True):
        parts, at = [], 0
        for span, size in zip(held, held_sizes, strict=True):
            parts.append(body[at : span.start])
            share = room * size // total
            piece = body[span.start : span.end]
            parts.append(_cut_span(piece, share, count, recall) if share < size else piece)
            at = span.end
        parts.append(body[at:])
        cuts.append("".join(parts))
    return cuts


def _cut_span(piece: str, room: int, count: Callable[[str], int], recall: str | None) -> str:
    lines = piece.split("\n")
    fenced = len(lines) > 2 and _FENCE.match(lines[0]) is not None
    # A fenced block keeps its fences, so what follows it reads as words again.
    opening, closing = (lines[:1], lines[-1:]) if fenced and _FENCE.match(lines[-1]) else ([], [])
    inner = lines[len(opening) : len(lines) - len(closing)]
    # The first line always stays (its start, if it is long): it says what was pasted, and
    # the ledger's line names the paste by it.
    at = next((i for i, line in enumerate(inner) if _is_content(line)), 0)
    whole = inner[at] if inner else ""
    first = whole[:_FIRST_LINE_CHARS]
    inner = [*inner[:at], first, *inner[at + 1 :]] if inner else inner
    head = max(_taken(inner, int(room * _HEAD_SHARE), count), at + 1)
    tail = _taken(list(reversed(inner[head:])), room - _cost(inner[:head], count), count)
    shown = head + tail
    if shown >= len(inner) and first == whole:
        return piece
    kept_tokens = count("\n".join(inner[head : len(inner) - tail]))
    lines_cut = _paste_lines("\n".join(inner[head : len(inner) - tail]))
    note = _note(lines_cut, _paste_lines(piece), kept_tokens, head, tail, recall)
    kept = [*opening, *inner[:head], note, *inner[len(inner) - tail :], *closing]
    return "\n".join(kept)


def _note(cut: int, lines: int, tokens: int, head: int, tail: int, recall: str | None) -> str:
    where = f"; {reference(recall)} returns the whole message" if recall else ""
    return (
        f"{NOTE_PREFIX}{cut} of {lines} lines ({tokens} tokens) not shown, the first {head}"
        f" and last {tail} kept{where} ...]"
    )


def _taken(lines: Sequence[str], room: int, count: Callable[[str], int]) -> int:
    """How many of `lines`, from the first, fit `room` tokens."""
    used = 0
    for taken, line in enumerate(lines):
        used += count(line) + 1
        if used > room:
            return taken
    return len(lines)


def _cost(lines: Sequence[str], count: Callable[[str], int]) -> int:
    return sum(count(line) + 1 for line in lines)


def _shown_lines(body: str, span: Span) -> int:
    """How many lines `span` pasted (fences and blank lines apart): a cut one says how many
    it had."""
    notes = list(_NOTE.finditer(body, span.start, span.end))
    if notes:
        return sum(int(note["lines"]) for note in notes)
    return _paste_lines(body[span.start : span.end])


def _paste_lines(piece: str) -> int:
    return sum(1 for line in piece.split("\n") if _is_content(line))


def _is_content(line: str) -> bool:
    """Whether `line` of a paste is one of its lines (not a fence, a blank or a cut's note)."""
    return bool(line.strip()) and not _FENCE.match(line) and not line.startswith(NOTE_PREFIX)


# --- Finding bulk, line by line ---------------------------------------------------------------

_Line = tuple[int, int, str]
"""A line: where it starts, where it ends (before its line break) and its text."""


def _lines(body: str) -> list[_Line]:
    found, at = [], 0
    for line in body.split("\n"):
        found.append((at, at + len(line), line))
        at += len(line) + 1
    return found


def _bulk_from(body: str, lines: Sequence[_Line], index: int) -> int:
    """Where the bulk that starts at line `index` ends (`index` when none starts there)."""
    line = lines[index][2]
    fence = _FENCE.match(line)
    if fence is not None:
        return _fenced(lines, index, fence[1])
    stripped = line.lstrip()
    if stripped[:1] in ("{", "[") and (found := _json_end(body, lines, index)) > index:
        return found
    if len(line) >= LONG_LINE_CHARS and line.count(" ") * 20 < len(line):
        return index + 1
    alike = _run(lines, index, _opening)
    if alike > index:
        return alike
    return _code_run(lines, index)


def _fenced(lines: Sequence[_Line], index: int, fence: str) -> int:
    closing = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    stop = next((i + 1 for i in range(index + 1, len(lines)) if closing.match(lines[i][2])), None)
    stop = len(lines) if stop is None else stop
    size = lines[stop - 1][1] - lines[index][0]
    inner = stop - index - 2
    noted = any(NOTE_PREFIX in lines[i][2] for i in range(index, stop))
    return stop if inner >= FENCE_LINES or size >= FENCE_CHARS or noted else index


def _json_end(body: str, lines: Sequence[_Line], index: int) -> int:
    start = lines[index][0] + len(lines[index][2]) - len(lines[index][2].lstrip())
    try:
        _, end = json.JSONDecoder().raw_decode(body, start)
    except ValueError:
        return index
    if end - start < JSON_CHARS or body[end:].split("\n", 1)[0].strip():
        return index
    return next(i + 1 for i in range(index, len(lines)) if lines[i][1] >= end)


def _opening(line: str) -> str | None:
    """How `line` opens, digits masked, after a list marker: its first word when that holds
    a number (a timestamp, "worker-3"), with the next when it is a log level or a bracketed
    tag ("ERROR 12:00:01", "[12:00:01] api"); None otherwise (a user's "Step 1: ..." lines
    are words: the number is not in their first word)."""
    words = line.split(maxsplit=3)
    if words and _LIST_MARKER.match(words[0]):
        words = words[1:]
    if not words:
        return None
    if any(char.isdigit() for char in words[0]):
        return _DIGITS.sub("0", words[0])
    if len(words) > 1 and _LOG_TAG.match(words[0]) and any(c.isdigit() for c in words[1]):
        return _DIGITS.sub("0", " ".join(words[:2]))
    return None


def _run(lines: Sequence[_Line], index: int, shape: Callable[[str], str | None]) -> int:
    opening = shape(lines[index][2])
    if opening is None:
        return index
    stop = index + 1
    while stop < len(lines) and shape(lines[stop][2]) == opening:
        stop += 1
    size = lines[stop - 1][1] - lines[index][0]
    return stop if stop - index >= RUN_LINES and size >= RUN_CHARS else index


def _is_code(line: str) -> bool:
    return (
        line.startswith(("  ", "\t"))
        or _CODE_OPENING.match(line) is not None
        or line.rstrip().endswith(_CODE_ENDINGS)
    )


def _code_run(lines: Sequence[_Line], index: int) -> int:
    """A run of code from line `index`: blank lines inside it, code lines most of the rest."""
    if not _is_code(lines[index][2]) or not lines[index][2].strip():
        return index
    code = other = 0
    stop = last = index
    for at in range(index, len(lines)):
        line = lines[at][2]
        if _FENCE.match(line):
            break
        if not line.strip():
            continue
        if _is_code(line):
            code, last = code + 1, at
        else:
            other += 1
            if other > (code + other) * (1 - _CODE_SHARE) or other > 2:
                break
        stop = last + 1
    size = lines[stop - 1][1] - lines[index][0]
    return stop if code >= RUN_LINES and size >= RUN_CHARS else index
