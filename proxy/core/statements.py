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
  they were first seen, whatever their rank, and the ledger's heading says so.
- Deduplicated: the same sentence said twice is one statement.
- Superseded by subject only. A later statement replaces an earlier one only when both are
  about the same subject (the same label, if any, and the same words, differing only in
  their values) and the later one plainly gives a new value:
  - it says what something is: "the budget is $500" then "the budget is now $700" (or
    "changed to $700"); "Steps 1-2 of 5 are done" then "Steps 1-3 of 5 are done";
  - it is a label and its value ("Budget: $500" then "Budget: $700"), a label that names a
    single state ("Status: ..."), or a labelled statement whose values are all quantities
    ("USER PREFERENCE: at most 5 bullets" then "... at most 7 bullets");
  - it announces the change: "actually", "instead", "from now on", "Update: ...".
  A value is a quantity (digits, money, a date, a version), an identifier (a path, an id,
  an address, quoted text) or, after "is", a name ("is Postgres 15", "is LANTERN"). Before
  "is", an identifier or a name says which thing it is ("Ticket PAY-1 is closed" and
  "Ticket PAY-2 is closed" are two statements); in a statement that says what to do, a name
  is part of the task ("TODO: Email Alice ..." and "TODO: Email Bob ..." are two tasks) and
  a new identifier replaces only when announced ("Actually, deploy to us-east-2.").
  Anything else is a new statement, kept beside the earlier one: another subject under the
  same label ("FACT: The project codename is LANTERN." and "FACT: The production database
  is Postgres 15."), a near-duplicate about another thing ("The staging database is
  Postgres 14." and "The production database is Postgres 15."), a question. When unsure,
  both are kept: a stale value beside the new one misleads, but a lost statement is lost.
  An update takes the place where its subject was first seen, and the value it replaces is
  gone. Rules never replace each other: "never open port 22" and "never open port 3389"
  are two rules.
- One truth in the block: the heading tells the model that these verbatim lines are the
  later truth where a summary says otherwise (a summary may paraphrase "$504" as "$501").
- Idempotent: the ledger of a block the proxy wrote reads back as the same statements, so
  compacting the proxy's own output leaves the ledger unchanged; merging a ledger with
  itself changes nothing, and merging in two steps (a carried ledger, then what was said
  since) gives what merging everything at once gives.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from proxy.core import pastes
from proxy.core.ledger import find_specifics
from proxy.core.messages import Message, is_instruction, role, text

# One line: `read_ledger` and `without_ledger` find the ledger by it. A block an earlier
# version wrote under an older heading is read as plain summary text: its lines go on as the
# summary does, no longer as statements (only a conversation that spans an upgrade has one).
LEDGER_HEADING = (
    "What the user said in those turns, verbatim, in the order first said; where a summary"
    " disagrees, these lines are the later truth:"
)
_BULLET = "- "
# What one listed statement costs beyond its words: the bullet and the line break.
_ENTRY_OVERHEAD = 2

MAX_STATEMENT_CHARS = 4_000
"""Longer sentences are no statements (see `_sentences`)."""

RULE, SPECIFIC, TASK, OTHER, PASTE = 0, 1, 2, 3, 4
"""Ranks, most important first. `PASTE` is the ledger's line naming what a message pasted
(`proxy.core.pastes.ledger_line`): the data itself is a recall away, so it is the first
line a short ledger gives up, and no paste can push a statement of the user's out."""

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
# A labelled statement ("Goal: ...", "FACT: ...", "Hard constraint: ..."): the user says what
# kind of thing it is. Most labels name a kind of which there are many (see `_subject`).
_LABEL = re.compile(r"^([A-Z]\w*(?: \w+){0,2}):\s")
# An instruction about how to answer ("Use metric units.", "Reply in French."): a preference.
_STYLE_VERBS = re.compile(
    r"^(?:please\s+)?(?:use|keep|write|reply|respond|answer|format|call|address|speak|stick|"
    r"spell|sign|stay|default|include|cite|show|put)\b",
    re.IGNORECASE,
)
_ALNUM = re.compile(r"[^\W_]")
# A name code, a file system or a market uses: snake_case ("quarterly_reports",
# "MAX_RETRIES"), camelCase ("getUser"), a code in capitals ("TSLA", "SFO"). "Make a folder
# called quarterly_reports." gives a value the next call needs, as a number or a path would;
# ranked as chatter, it was the first the ledger gave up where tool schemas leave it little
# room.
_CODE_NAME = re.compile(
    r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*[A-Za-z0-9]\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z]{2,}\b"
)

# --- Subjects: when a later statement replaces an earlier one (see the module's rules) ---

# Values, found in one pass over a statement: a quoted span (one value, however many words
# it holds), or a word with a digit, a slash, an underscore, an `@` or a currency sign; a
# quantity when it has no letter ("$500", "1-2", "2026-11-15", "3.14.2"), else an identifier
# ("us-west-2", "PAY-7731", "src/a.py", "alice@x.com", quoted text). A quote runs
# (possessively) only to the next quote of its kind, and a value word is only tried where a
# word starts: tried at every character, a long run with no value in it (a base64 blob)
# would be scanned once per character, quadratic in its length. The work is done by the
# regex engine, not word by word in Python: `merged` reads every statement of a
# conversation on each compaction.
_QUOTED = r"\"[^\"\n]*+\"|`[^`\n]*+`|(?<!\w)'[^'\n]*+'(?!\w)"
_QUOTES = "\"'`"
_VALUE = re.compile(rf"{_QUOTED}|(?<!\S)\S*[\d/_@$€£¥]\S*")
# After "is" a name is a value too ("is Postgres 15", "is LANTERN", "is Priya Raman").
_GIVEN = re.compile(rf"{_QUOTED}|(?<!\S)\S*[\d/_@$€£¥]\S*|(?<!\S)[(\[{{*]*[A-ZÀ-ÖØ-Þ]\S*")
# The first copula outside quotes: "X is V" (or "X changed to V", which says the same).
_COPULA = re.compile(
    rf"{_QUOTED}|(?<!\S)(?P<copula>(?:is|are|was|were|am|be|=)[,:;]?"
    r"|(?:changed|moved|switched|set) to)(?!\S)",
    re.IGNORECASE,
)
# Dropped where the subject meets the copula ("has changed to", "will be", "is now set to"),
# so every way of saying "X is V" reads as that.
_AUXILIARIES = frozenset({"has", "have", "had", "been", "will"})
_LINKING = frozenset({"now", "still", "actually", "been", "changed", "set", "updated", "to"})
# Words that name no subject: a copula right after one of them, or after these alone, says
# no "X is V" ("Here is chunk 2", "It is 5 pm", "Restart the host that is at 10.0.0.1"), and
# the statement is read as one that says what to do or shows something.
_NO_SUBJECT = frozenset(
    {"here", "there", "this", "that", "these", "those", "it", "what", "which", "who", "whom"}
    | {"whose", "where", "when", "why", "how"}
)
# Words people add when they restate a value; the subject is the same without them.
_IGNORED = frozenset({"now", "actually", "instead", "still", "correction", "updated"})
# Words that announce a change, so even a statement that says what to do replaces the one
# it corrects ("Deploy to us-east-2 instead."). "now" is not one: "Now read src/b.py." is the
# next step, not a correction of "Read src/a.py.".
_ANNOUNCED = re.compile(r"\b(?:actually|instead|correction|from now on)\b", re.IGNORECASE)
_FROM_NOW_ON = re.compile(r"\bfrom now on\b,?", re.IGNORECASE)
# "Update: ..." announces a change; it is no label of what is stated.
_CHANGE_LABELS = frozenset({"update", "updated", "correction", "change", "changed", "actually"})
# A label that names one state, of which there is one at a time: a later one replaces the
# earlier whatever its words ("Status: the backfill is done and the cutover is next.").
_STATE_LABELS = frozenset(
    {"status", "current status", "progress", "current step", "next step", "current task"}
    | {"current focus", "phase", "current phase", "stage", "current stage", "eta"}
)
_PUNCTUATION = re.compile(r"[^\w#\s]+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence a user (or a late instruction) said, verbatim, and its rank."""

    text: str
    rank: int


def message_statements(message: Message, is_task: bool) -> tuple[Statement, ...]:
    """The statements of one message: none unless a user or an instruction said it.
    `is_task`: the message first stated the task (its statements rank as the task's)."""
    if role(message) != "user" and not is_instruction(message):
        return ()
    # A paste is data, not the user's words: its lines are no statements (one pasted log
    # took the room of every later statement), and the ledger names it in one line instead.
    body = text(message)
    said = [Statement(s, _rank(s, is_task=is_task)) for s in _sentences(pastes.prose(body))]
    pasted = pastes.ledger_line(body, None)
    return tuple(said if pasted is None else [*said, Statement(pasted, PASTE)])


StatementsOf = Callable[[Message, bool], Sequence[Statement]]
"""`message_statements`, or a cache of it (`proxy.core.mentions.Mentions.statements`)."""


def statements_of(
    messages: Iterable[Message],
    *,
    task: Message | None = None,
    each: StatementsOf = message_statements,
) -> list[Statement]:
    """The statements of the user and instruction messages in `messages`, in order.

    `task` is the message that first stated the task (when it is among them, its statements
    rank as the task's). `each` finds one message's statements.
    """
    found: list[Statement] = []
    for message in messages:
        found += each(message, task is not None and message is task)
    return found


def _sentences(source: str) -> Iterator[str]:
    for match in _SENTENCE.finditer(source):
        sentence = match["body"].rstrip()
        # A "sentence" longer than a page is pasted data (a log line, a blob), not words a
        # ledger can carry; ranking one costs seconds per megabyte of it.
        if len(sentence) <= MAX_STATEMENT_CHARS and _ALNUM.search(sentence):
            yield sentence


def _rank(sentence: str, *, is_task: bool) -> int:
    if pastes.is_ledger_line(sentence):
        return PASTE
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
        or _CODE_NAME.search(sentence) is not None
        or bool(find_specifics(sentence))
    )


def merged(earlier: Sequence[Statement], later: Iterable[Statement]) -> list[Statement]:
    """`earlier` then `later`, deduplicated, a later update replacing what it updates.

    Linear in the number of statements. An update takes the place where its subject was
    first seen. Merging the result with more statements gives what merging all of them at
    once gives, so merging a ledger with itself changes nothing.
    """
    kept: list[Statement] = []
    same: dict[str, int] = {}
    subjects: dict[str, int] = {}
    for statement in [*earlier, *later]:
        key = _normalized(statement.text)
        if key in same:
            continue
        subject = _subject(statement)
        index = subjects.get(subject[0]) if subject is not None and subject[1] else None
        if index is None:
            index = len(kept)
            kept.append(statement)
        else:
            del same[_normalized(kept[index].text)]
            kept[index] = statement  # the new value, where the subject was first seen
        same[key] = index
        if subject is not None:
            # A subject stays with the first place it was seen, even when a later statement
            # about it could not replace it and stands on its own ("Email bob@x.com" beside
            # "Email alice@x.com"): every update goes to that one place, so the places an
            # update did not choose never hold a statement it would replace, and merging the
            # result again (in its order, not the order things were said) finds nothing to do.
            subjects.setdefault(subject[0], index)
    return kept


# Both remembered per statement: every plan merges the whole conversation's statements again
# (a long system prompt's among them), and both read each statement's whole text.
@functools.lru_cache(maxsize=16_384)
def _normalized(sentence: str) -> str:
    return _SPACES.sub(" ", sentence).strip().rstrip(".!;: ").casefold()


@functools.lru_cache(maxsize=16_384)
def _subject(statement: Statement) -> tuple[str, bool] | None:
    """What `statement` is about (its label and words, values masked as "#") and whether it
    may replace an earlier statement about the same; None when it states no value that a
    later one could update: a rule (rules add up), a question, a statement with no value."""
    text = _SPACES.sub(" ", statement.text).strip()
    if statement.rank in (RULE, PASTE) or text.endswith("?"):
        return None
    label, body, announced = _labelled(text)
    if label in _STATE_LABELS:
        return f"{label}: #", True
    plain = _FROM_NOW_ON.sub(" ", body)
    words = _says_what_is(plain)
    # "X is V" plainly gives X a new value. A statement that says what to do or how things
    # are in other words gives one only when it announces the change, or when a label stands
    # for its subject: the label with a value alone ("Budget: $700"), or a labelled statement
    # whose values are all quantities ("at most 5 bullets" -> "at most 7 bullets"). An
    # identifier in it names what it is about, a second task rather than a new value ("TODO:
    # Email alice@x.com ..." and "TODO: Email bob@x.com ..."), so it takes an announcement.
    replaces = words is not None
    if words is None:
        words = _words(_VALUE.sub(" # ", plain))
        replaces = (
            announced
            or _ANNOUNCED.search(body) is not None
            or (label != "" and (words == ["#"] or not _names_a_thing(plain)))
        )
    if "#" not in words:
        return None
    return f"{label}: {' '.join(words)}", replaces


def _labelled(text: str) -> tuple[str, str, bool]:
    """`text`'s label (casefolded, "" if none), what follows it, and whether the label is an
    announcement of a change ("Update: ...") rather than a label."""
    match = _LABEL.match(text)
    if match is None:
        return "", text, False
    label, body = match[1].casefold(), text[match.end() :]
    if label in _CHANGE_LABELS:
        return "", body, True
    return label, body, False


def _says_what_is(body: str) -> list[str] | None:
    """The words of "X is V" with V's values (names too: "is Postgres 15") and X's quantities
    masked ("Steps 1-2 of 5 are done"), or None when `body` says no such thing.

    X's identifiers and names stay: they say which thing it is ("Ticket PAY-1 is closed").
    """
    copula = next((found for found in _COPULA.finditer(body) if found["copula"]), None)
    if copula is None:
        return None
    subject = _words(_VALUE.sub(_quantity_masked, body[: copula.start()]))
    while subject and subject[-1] in _AUXILIARIES:
        subject.pop()
    named = any(word != "#" and word not in _NO_SUBJECT for word in subject)
    if not named or subject[-1] in _NO_SUBJECT:
        return None
    value = _words(_GIVEN.sub(" # ", body[copula.end() :]))
    return [*subject, "is", *itertools.dropwhile(_LINKING.__contains__, value)]


def _quantity_masked(value: re.Match[str]) -> str:
    return value[0] if _is_identifier(value[0]) else " # "


def _names_a_thing(text: str) -> bool:
    return any(_is_identifier(value[0]) for value in _VALUE.finditer(text))


def _is_identifier(value: str) -> bool:
    return value[0] in _QUOTES or any(char.isalpha() for char in value)


def _words(masked: str) -> list[str]:
    """The words of `masked` ("#" for a masked value), casefolded, without the words people
    add when they restate a value, and a run of values as one "#"."""
    words = [w for w in _PUNCTUATION.sub(" ", masked).casefold().split() if w not in _IGNORED]
    return [w for i, w in enumerate(words) if w != "#" or i == 0 or words[i - 1] != "#"]


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


def above_chatter(statements: Sequence[Statement]) -> list[Statement]:
    """The statements ranked above chatter (rules, specifics, the task): a shortened ledger
    keeps them to the last."""
    return [statement for statement in statements if statement.rank < OTHER]


def rules(statements: Sequence[Statement]) -> list[Statement]:
    """The statements that are the user's rules: the last a ledger gives up."""
    return [statement for statement in statements if statement.rank == RULE]


def _priority(statements: Sequence[Statement], index: int) -> tuple[int, int]:
    rank = statements[index].rank
    # The rest goes newest first: the latest chatter is the likeliest to matter next.
    return (rank, -index if rank >= OTHER else index)


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
