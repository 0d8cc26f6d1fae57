"""The user's own words: what a compaction carries verbatim when it removes them.

A summary paraphrases, and a poor summarizer drops exactly what evaluations check as exact
strings: a user's rule ("never open port 22"), a budget ("$500"), a timezone, a style
preference ("no em-dashes"). So whatever the user said (and any instruction after the
leading ones) that leaves the forwarded conversation is carried, byte for byte, in the
compaction block's ledger, whatever layer removed it and however poor the summary.

This module owns what a statement is, how statements rank, merge and fit a budget, and the
ledger's text: how it is written and read back. Rules:

- A statement is one sentence (or line) of a user or instruction message, a verbatim slice
  of its text: never reworded, never cut. A sentence never spans lines, so one statement is
  one line of the ledger and the ledger parses back exactly.
- Priority when the budget is short: rules and negations first, then statements carrying a
  specific (an identifier, a number, a path, a URL, a name, a preference), then the task
  as first stated, then the rest, newest first. The kept statements are listed in the order
  they were first seen, whatever their rank.
- Deduplicated: the same sentence said twice is one statement. A later statement with the
  same shape and a new value ("the budget is now $700" after "the budget is $500")
  replaces the earlier one in its place. Rules never replace each other: "never open port
  22" and "never open port 3389" are two rules.
- Idempotent: the ledger of a block the proxy wrote reads back as the same statements, so
  compacting the proxy's own output leaves the ledger unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from proxy.core.ledger import find_specifics
from proxy.core.messages import Message, is_instruction, role, text

LEDGER_HEADING = "What the user said in those turns, verbatim (later values replace earlier ones):"
_BULLET = "- "
# What one listed statement costs beyond its words: the bullet and the line break.
_ENTRY_OVERHEAD = 2

MAX_STATEMENT_CHARS = 4_000
"""Longer sentences are no statements (see `_sentences`)."""

RULE, SPECIFIC, TASK, OTHER = 0, 1, 2, 3
"""Ranks, most important first."""

# A sentence: up to `.`, `!` or `?` before a space, or the end of the line; a list marker in
# front is not part of it. Dots inside words (`main.py`, `3.11`) do not end a sentence. A run
# of marks is taken whole (possessive), never retried from each of its characters: a lazy
# `.*?` before `[.!?]+` scans a long run of dots once per dot, quadratic in its length.
_SENTENCE = re.compile(
    r"(?:(?:[-*+•>]|\d{1,3}[.)])[ \t]+)?"
    r"(?P<body>\S(?:[^.!?\n]++|[.!?]++(?!\s|$))*+(?:[.!?]++|$))",
    re.MULTILINE,
)
_APOSTROPHE = "['\u2019]"
_RULE_WORDS = (
    *("never", "always", "must", rf"mustn{_APOSTROPHE}t", r"do\s+not", rf"don{_APOSTROPHE}t"),
    *("only", "required", "requires?", r"should\s+not", rf"shouldn{_APOSTROPHE}t", "avoid"),
    *("no", "not", "cannot", rf"can{_APOSTROPHE}t", rf"won{_APOSTROPHE}t", "forbidden"),
    *("prohibited", r"make\s+sure", "ensure", "under\\s+no\\s+circumstances"),
)
_RULE = re.compile(rf"\b(?:{'|'.join(_RULE_WORDS)})\b", re.IGNORECASE)
_PREFERENCE = re.compile(
    r"\b(?:prefers?|preferred|preference|like|likes|want|wants|please|rather|instead|"
    r"favou?rite|call\s+me|style|tone|format|timezone|time\s+zone|language)\b",
    re.IGNORECASE,
)
# A name: a capitalised word that does not open the sentence ("ask Priya", "in Berlin"); a
# handle or a channel ("@mkovacs", "#pay-oncall").
_NAME = re.compile(r"(?<=[\w,;:)] )[A-Z][a-z]+|(?<![\w#@])[#@][A-Za-z][\w.-]*")
# A labelled statement ("Goal: ...", "Status: ...", "Hard constraint: ..."): the user says
# what kind of thing it is, and a later one under the same label replaces it.
_LABEL = re.compile(r"^([A-Z]\w*(?: \w+){0,2}):\s")
# An instruction about how to answer ("Use metric units.", "Reply in French."): a preference.
_STYLE_VERBS = re.compile(
    r"^(?:please\s+)?(?:use|keep|write|reply|respond|answer|format|call|address|speak|stick|"
    r"spell|sign|stay|default|include|cite|show|put)\b",
    re.IGNORECASE,
)
_ALNUM = re.compile(r"[^\W_]")

# What an update's shape ignores: values (anything with a digit, a slash, an underscore, an
# `@`, a currency sign, quoted text), and the words people use to announce a change. A value
# word is only tried where a word starts: tried at every character, a long run with no value
# in it (a base64 blob) would be scanned once per character, quadratic in its length.
_VALUE = re.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`|(?<!\S)[^\s]*[\d/_@$€£¥][^\s]*")
_CHANGE_WORDS = re.compile(
    r"\b(?:now|actually|update[ds]?|instead|changed?|correction|new|still|from\s+now\s+on)\b",
    re.IGNORECASE,
)
_PUNCTUATION = re.compile(r"[^\w#\s]+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence a user (or a late instruction) said, verbatim, and its rank."""

    text: str
    rank: int


def statements_of(messages: Iterable[Message], *, task: Message | None = None) -> list[Statement]:
    """The statements of the user and instruction messages in `messages`, in order.

    `task` is the message that first stated the task (when it is among them, its statements
    rank as the task's).
    """
    found: list[Statement] = []
    for message in messages:
        if role(message) != "user" and not is_instruction(message):
            continue
        is_task = task is not None and message is task
        found += [Statement(s, _rank(s, is_task=is_task)) for s in _sentences(text(message))]
    return found


def _sentences(source: str) -> Iterator[str]:
    for match in _SENTENCE.finditer(source):
        sentence = match["body"].rstrip()
        # A "sentence" longer than a page is pasted data (a log line, a blob), not words a
        # ledger can carry; ranking one costs seconds per megabyte of it.
        if len(sentence) <= MAX_STATEMENT_CHARS and _ALNUM.search(sentence):
            yield sentence


def _rank(sentence: str, *, is_task: bool) -> int:
    if _RULE.search(sentence):
        return RULE
    if _is_specific(sentence):
        return SPECIFIC
    return TASK if is_task else OTHER


def _is_specific(sentence: str) -> bool:
    return (
        any(char.isdigit() for char in sentence)
        or _LABEL.match(sentence) is not None
        or _STYLE_VERBS.match(sentence) is not None
        or _PREFERENCE.search(sentence) is not None
        or _NAME.search(sentence) is not None
        or bool(find_specifics(sentence))
    )


def merged(earlier: Sequence[Statement], later: Iterable[Statement]) -> list[Statement]:
    """`earlier` then `later`, deduplicated, a later update replacing what it updates."""
    kept: list[Statement] = []
    same: dict[str, int] = {}
    shapes: dict[str, int] = {}
    for statement in [*earlier, *later]:
        key = _normalized(statement.text)
        if key in same:
            continue
        shape = _shape(statement)
        index = shapes.get(shape) if shape is not None else None
        if index is not None:
            del same[_normalized(kept[index].text)]
            kept[index] = statement  # the new value, where the old one was first seen
        else:
            index = len(kept)
            kept.append(statement)
        same[key] = index
        if shape is not None:
            shapes[shape] = index
    return kept


def _normalized(sentence: str) -> str:
    return _SPACES.sub(" ", sentence).strip().rstrip(".!;: ").casefold()


def _shape(statement: Statement) -> str | None:
    """What an update of this statement looks like: its words with the values masked; None
    for a rule (rules add up, they do not update each other) or a statement with no value."""
    if statement.rank == RULE:
        return None
    label = _LABEL.match(statement.text)
    # "Update: ..." announces a change; it is no label of what is stated.
    if label is not None and _CHANGE_WORDS.fullmatch(label[1]) is None:
        return label[1].casefold() + ": #"
    masked = _VALUE.sub(" # ", statement.text)
    if "#" not in masked:
        return None
    words = _PUNCTUATION.sub(" ", _CHANGE_WORDS.sub(" ", masked))
    return _SPACES.sub(" ", words).strip().casefold()


def selected(
    statements: Sequence[Statement], budget: int, count: Callable[[str], int]
) -> list[Statement]:
    """The statements that fit `budget` tokens (heading included), by rank, in their order.

    Greedy by priority: a statement too long for what is left is skipped and shorter ones
    after it still get in, so a statement left out never fit the room left at its turn.
    """
    room = budget - count(LEDGER_HEADING) - _ENTRY_OVERHEAD
    order = sorted(range(len(statements)), key=lambda index: _priority(statements, index))
    chosen: set[int] = set()
    for index in order:
        cost = count(statements[index].text) + _ENTRY_OVERHEAD
        if cost <= room:
            chosen.add(index)
            room -= cost
    return [statement for index, statement in enumerate(statements) if index in chosen]


def _priority(statements: Sequence[Statement], index: int) -> tuple[int, int]:
    rank = statements[index].rank
    # The rest goes newest first: the latest chatter is the likeliest to matter next.
    return (rank, -index if rank == OTHER else index)


def ledger_text(statements: Sequence[Statement]) -> str:
    """The ledger as the compaction block carries it ("" when there is nothing to carry)."""
    if not statements:
        return ""
    return "\n".join([LEDGER_HEADING, *(_BULLET + s.text for s in statements)])


def cost(statements: Sequence[Statement], count: Callable[[str], int]) -> int:
    """Tokens `ledger_text(statements)` takes, as `selected` budgets them."""
    if not statements:
        return 0
    entries = sum(count(s.text) + _ENTRY_OVERHEAD for s in statements)
    return count(LEDGER_HEADING) + _ENTRY_OVERHEAD + entries


def read_ledger(block: str) -> list[Statement]:
    """The statements of the ledger in a compaction block the proxy wrote ([] if none)."""
    start = block.find(LEDGER_HEADING)
    if start == -1:
        return []
    lines = block[start + len(LEDGER_HEADING) :].split("\n")[1:]
    found = []
    for line in lines:
        if not line.startswith(_BULLET):
            break
        sentence = line[len(_BULLET) :]
        found.append(Statement(sentence, _rank(sentence, is_task=False)))
    return found


def with_ledger(note: str, statements: Sequence[Statement]) -> str:
    """`note` (a summary or an omission marker) with the ledger after its first line."""
    header, _, rest = note.partition("\n\n")
    return "\n\n".join(part for part in (header, ledger_text(statements), rest) if part)


def without_ledger(note: str) -> tuple[str, list[Statement]]:
    """`note` as it was before `with_ledger`, and the ledger's statements."""
    header, _, rest = note.partition("\n\n")
    if not rest.startswith(LEDGER_HEADING):
        return note, []
    statements = read_ledger(rest)
    remainder = "\n".join(rest.split("\n")[1 + len(statements) :]).removeprefix("\n")
    return "\n\n".join(part for part in (header, remainder) if part), statements
