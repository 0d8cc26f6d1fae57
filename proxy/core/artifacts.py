"""The artifact trail: the files, ids, versions and errors that removed turns mentioned.

Evaluations of agent compaction rate the artifact trail (which files were read or changed,
which ids, versions and errors were seen) the weakest part of every summarizer's work. Here
it is no summarizer's job: whatever a compaction removes of tool results and assistant turns
(their calls' arguments included), the names they mentioned are listed verbatim in the
compaction block's trail, however poor the summary, and with none at all (a truncation).

This module owns what a removed message adds to the trail, how trails merge and fit a
budget, and the trail's text: how it is written and read back. Rules:

- A name is a verbatim slice of the message: an id, a hash, a version, a path, a URL, an
  address or an error code (`proxy.core.tool_results.kept_names`), at most a few per
  message, the first it mentioned (the start of a result says what it is). A cleared result
  adds the names its placeholder kept, which are the ones the result itself adds: clearing a
  result before it is removed changes nothing of the trail. The user's own words are the
  ledger's (`proxy.core.statements`), not the trail's.
- Newest first: the names of the newest removed message lead, and the trail an earlier block
  carried follows what the new span adds. When the budget is short, file paths go before
  ids, hashes, versions, URLs and error codes (a source tree has many files, an id is seen
  once), and the oldest of each go first.
- Deduplicated: a name is listed once, where it was mentioned last.
- One name, one line, under a one-line heading: the trail parses back exactly, so
  compacting the proxy's own output leaves it unchanged, and merging a trail with itself
  changes nothing.
- The block's layout: its first paragraph, the ledger, the trail, then the summary or the
  marker's text, each a paragraph of its own; the ledger or the trail may be missing, and
  either may be taken out first (`without_trail`, `proxy.core.statements.without_ledger`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterable, Sequence

from proxy.core.ledger import texts_of
from proxy.core.messages import Message, role, text
from proxy.core.statements import LEDGER_HEADING
from proxy.core.tool_results import is_cleared, is_tool_result, kept_names, names_kept

# One line: `read_trail` and `without_trail` find the trail by it.
TRAIL_HEADING = (
    "Files, ids, versions and errors that the tool results and calls of those turns"
    " mentioned, verbatim, newest first:"
)
_BULLET = "- "
# What one listed name costs beyond its text: the bullet and the line break.
_ENTRY_OVERHEAD = 2
_PARAGRAPH = "\n\n"


def names_of(message: Message) -> tuple[str, ...]:
    """The names `message` adds to the trail when a compaction removes it: a tool result's,
    an assistant turn's (its calls' arguments included), a cleared result's kept names."""
    if is_tool_result(message):
        return tuple(kept_names(names_kept(message) if is_cleared(message) else text(message)))
    if role(message) == "assistant":
        # One line per text: no name spans a line break, so none is made of two texts.
        return tuple(kept_names("\n".join(texts_of(message))))
    return ()


def merged(newer: Iterable[str], older: Iterable[str]) -> list[str]:
    """`newer` then `older`, each name once, where it comes first (its newest mention)."""
    return list(dict.fromkeys([*newer, *older]))


def selected(
    trail: Sequence[str],
    budget: int,
    count: Callable[[str], int],
    leading: Collection[str] = (),
) -> list[str]:
    """The names of `trail` that fit `budget` tokens (heading included), newest first.

    Greedy in order: a name too long for what is left is skipped and shorter ones after it
    still get in. A trail that fits its budget is selected whole, so selecting again changes
    nothing.
    """
    room = budget - count(TRAIL_HEADING) - _ENTRY_OVERHEAD
    chosen: set[int] = set()

    # Ids, hashes, versions, URLs and error codes first, and the paths that name one (a
    # release directory of a date, a build's folder): a later test log or search names
    # dozens of source files, which would push out the one build id an early result gave.
    # Then the paths in `leading` (what a result was about: the first name it mentioned, or
    # one a trail already carried), then the other paths.
    def rank(index: int) -> int:
        name = trail[index]
        if not _is_path(name) or _names_a_version(name):
            return 0
        return 1 if name in leading else 2

    for index in sorted(range(len(trail)), key=rank):
        cost = count(trail[index]) + _ENTRY_OVERHEAD
        if cost <= room:
            chosen.add(index)
            room -= cost
    return [name for index, name in enumerate(trail) if index in chosen]


def identifiers(trail: Sequence[str]) -> list[str]:
    """The names of `trail` that are no paths (ids, hashes, versions, URLs, error codes), or
    paths that name a version, a date or a build: what only the trail may still carry, so a
    shortened trail keeps them to the last."""
    return [name for name in trail if not _is_path(name) or _names_a_version(name)]


# A directory or file (its extension apart) named by a date, a version or a hex id.
_VERSION_SEGMENT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T_]\d{2}[-:]?\d{2}(?:[-:]?\d{2})?)?|v?\d+(?:\.\d+)+|[0-9a-f]{7,64}"
)


@functools.lru_cache(maxsize=65_536)
def _names_a_version(path: str) -> bool:
    """Whether a directory or file of `path` (its extension apart) is named by a date, a
    version or a hex id: such a path identifies a release or a build, as an id does.
    Remembered per path: every plan ranks a conversation's whole trail again."""
    return any(
        _VERSION_SEGMENT.fullmatch(segment) or _VERSION_SEGMENT.fullmatch(segment.split(".")[0])
        for segment in re.split(r"[/\\]", path)
    )


def _is_path(name: str) -> bool:
    return "://" not in name and ("/" in name or "\\" in name)


def cost(trail: Sequence[str], count: Callable[[str], int]) -> int:
    """Tokens `trail_text(trail)` takes, as `selected` budgets them."""
    if not trail:
        return 0
    entries = sum(count(name) + _ENTRY_OVERHEAD for name in trail)
    return count(TRAIL_HEADING) + _ENTRY_OVERHEAD + entries


def trail_text(trail: Sequence[str]) -> str:
    """The trail as the compaction block carries it ("" when there is nothing to carry)."""
    if not trail:
        return ""
    return "\n".join([TRAIL_HEADING, *(_BULLET + name for name in trail)])


def read_trail(block: str) -> list[str]:
    """The names of the trail in a compaction block the proxy wrote ([] if none)."""
    start = block.find(TRAIL_HEADING)
    if start == -1:
        return []
    found = []
    for line in block[start + len(TRAIL_HEADING) :].split("\n")[1:]:
        if not line.startswith(_BULLET):
            break
        found.append(line[len(_BULLET) :])
    return found


def with_trail(note: str, trail: Sequence[str]) -> str:
    """`note` (a summary or an omission marker, with its ledger or not) with the trail after
    its first paragraph and its ledger."""
    header, ledger, rest = _sections(note)
    return _PARAGRAPH.join(part for part in (header, ledger, trail_text(trail), rest) if part)


def without_trail(note: str) -> tuple[str, list[str]]:
    """`note` as it was before `with_trail`, and the trail's names."""
    header, ledger, rest = _sections(note)
    if not rest.startswith(TRAIL_HEADING):
        return note, []
    trail = read_trail(rest)
    remainder = "\n".join(rest.split("\n")[1 + len(trail) :]).removeprefix("\n")
    return _PARAGRAPH.join(part for part in (header, ledger, remainder) if part), trail


def _sections(note: str) -> tuple[str, str, str]:
    """`note`'s first paragraph, its ledger ("" if none) and the rest."""
    header, _, rest = note.partition(_PARAGRAPH)
    if not rest.startswith(LEDGER_HEADING):
        return header, "", rest
    # A ledger is one paragraph: its statements never span a line.
    ledger, _, rest = rest.partition(_PARAGRAPH)
    return header, ledger, rest
