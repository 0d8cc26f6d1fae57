"""The fact ledger: the exact details a summary of condensed turns must not lose.

An LLM summary paraphrases, and paraphrase drops what an agent needs later: ticket ids, file
paths, URLs, hashes, figures, and the user's own rules in the user's own words. So before a
summary replaces a span of conversation, the span's ledger is extracted here by fixed
patterns, checked against the summary, and whatever the summary lost is appended verbatim.
The condensed history is then never less exact than the ledger.

This module owns the patterns, the presence check and the appendix text. It is pure: it never
calls the summarizer and never decides when to summarize (the compaction planner does).

Three rules keep it honest:

- Every fact is a verbatim slice of one text the conversation holds (a message's text, or a
  string inside a tool call's decoded arguments); nothing is reworded.
- The presence check is the only judge, and `with_missing_facts` appends exactly what it
  reports missing, so a summary with its appendix always passes the check (and appending
  twice changes nothing).
- The ledger is bounded: a huge span yields at most `max_facts` facts and `max_chars`
  characters, the user's constraints kept first and tool output's facts dropped first.
"""

from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from proxy.core.messages import INSTRUCTION_ROLES, Message, role, text, tool_calls

FactKind = Literal["constraint", "identifier", "hash", "url", "email", "path", "date", "quantity"]
"""What a fact is; the appendix groups facts by kind, in this order."""

LEDGER_HEADING = "Details kept verbatim from the condensed turns:"


@dataclass(frozen=True, slots=True)
class Fact:
    """One exact detail of the conversation: its kind and its text, verbatim."""

    kind: FactKind
    text: str


Ranked = tuple[int, Fact]
"""A fact with its rank (lower ranks are kept first when a ledger is bounded): the user's
constraints, then what the user said, then what the assistant said, then tool output."""


# --- What counts as a fact -------------------------------------------------------------------

_HEX = "[0-9a-fA-F]"
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_UNIX_CHAR = r"[\w.@+~%=-]"
# Everything Windows allows in a name, spaces aside: a path with spaces cannot be told from prose.
_WINDOWS_SEGMENT = r'[^\\/:*?"<>|\s]+'
# JSON-escaped text doubles a backslash; such a path is still a path, kept as written.
_WINDOWS_SEPARATOR = r"(?:\\\\?|/)"
# A relative path needs a file extension: `and/or`, `client/server` and `TCP/IP` are prose.
_EXTENSION = r"\.[A-Za-z]\w{0,9}"

# A bare number means nothing out of context; with a unit it is a figure worth keeping.
# Count nouns ("3 retries", "128k tokens") are units too: they say what was counted.
_UNITS = (
    *("ns", "µs", "μs", "us", "ms", "s", "sec", "secs", "second", "seconds"),
    *("min", "mins", "minute", "minutes", "h", "hr", "hrs", "hour", "hours"),
    *("day", "days", "week", "weeks", "month", "months", "year", "years"),
    *("B", "kB", "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB"),
    *("byte", "bytes", "bit", "bits", "MB/s", "GB/s", "Kbps", "Mbps", "Gbps"),
    *("Hz", "kHz", "MHz", "GHz", "rps", "qps", "rpm", "req/s", "tok/s", "fps"),
    *("token", "tokens", "request", "requests", "retry", "retries", "attempt", "attempts"),
    *("error", "errors", "user", "users", "row", "rows", "record", "records", "item", "items"),
    *("file", "files", "line", "lines", "test", "tests", "core", "cores", "CPU", "CPUs"),
    *("vCPU", "vCPUs", "GPU", "GPUs", "thread", "threads", "worker", "workers"),
    *("replica", "replicas", "node", "nodes", "pod", "pods", "instance", "instances"),
    *("connection", "connections", "px", "pt", "em", "rem", "dpi", "mg", "g", "kg", "lb", "lbs"),
    *("mm", "cm", "m", "km", "ft", "mi", "°C", "°F", "V", "W", "kW", "kWh", "mAh"),
    *("USD", "EUR", "GBP", "JPY", "dollars", "euros", "cents", "%", "percent"),
)
_UNIT = "|".join(re.escape(unit) for unit in sorted(_UNITS, key=len, reverse=True))

# Prefixes that say the next token is an id ("order 88231", "ticket #7", "PR #42").
_ID_PREFIXES = (
    *("order", "ticket", "issue", "case", "invoice", "incident", "bug", "PR", "pull request"),
    *("transaction", "booking", "reservation", "confirmation", "account", "customer"),
)
_ID_PREFIX = "|".join(_ID_PREFIXES)
# Standards that look like tickets but name encodings and algorithms, not work items.
_NOT_TICKETS = "|".join(("UTF", "UCS", "SHA", "MD", "AES", "RSA"))
_LABEL_WORDS = ("line", "port", "pid", "exit code", "status code", "status", "http")
_LABELS = "|".join(_LABEL_WORDS)
# The last label of a host name worth keeping: public suffixes agents meet most, and the
# private ones of internal networks. Any dotted word would also catch `self.value`.
_HOST_SUFFIXES = "|".join(
    (
        *("com", "net", "org", "io", "dev", "ai", "app", "cloud", "co", "us", "uk", "de"),
        *("fr", "eu", "nl", "jp", "cn", "in", "info", "biz", "me", "sh", "tech", "site"),
        *("internal", "local", "localdomain", "lan", "corp", "intra", "intranet", "home"),
        *("svc", "test", "example", "invalid", "localhost", "arpa"),
    )
)
_CURRENCY = "$€£¥"


@dataclass(frozen=True, slots=True)
class _Rule:
    """A named pattern and the kind of fact its matches are."""

    name: str
    kind: FactKind
    pattern: re.Pattern[str]
    needs: Callable[[str], object]
    """Truthy for a text holding a shape every match of `pattern` holds: a text without it is
    not scanned (most tool output lacks most of them: code has no `@`, `://` or dates, a log
    no `\\` or UUIDs), which finds the same facts at a fraction of the cost. A pattern led
    by a lookbehind or `\\b` makes the regex engine try it at every position of the text; a
    shape led by a literal lets it skip to that character, so checking the shape costs far
    less than the scan it saves. A rule led by a word needs it standing alone (`_Words`)."""


_SCHEME = re.compile("://")
_AT = re.compile("@")
_BACKSLASH = re.compile(r"\\")
_DIGIT = re.compile(r"\d")  # any digit `\d` matches, as the patterns' own `\d` do
_CURRENCY_SIGN = re.compile(f"[{_CURRENCY}]")
_DOTTED_QUAD = re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")  # an IP address's last three parts
# A host's last dot and label, the label ending there (a port's `:` may follow).
_DOT_SUFFIX = re.compile(rf"\.(?i:{_HOST_SUFFIXES})(?![\w-])")
_DRIVE_SEPARATOR = re.compile(r":[\\/]")  # `C:\` or `C:/`
_SLASH_NAME = re.compile(rf"/{_UNIX_CHAR}")
_SLASH_EXTENSION = re.compile(rf"/{_UNIX_CHAR}*?\.[A-Za-z]")  # a relative path's last part
_UUID_MIDDLE = re.compile(rf"-{_HEX}{{4}}-{_HEX}{{4}}-")
_HYPHEN_DIGIT_PART = re.compile(r"-[a-z0-9]*\d")  # a slug id's last part
_HEX_RUN = re.compile(rf"{_HEX}{{7}}")
_MONTH = re.compile(r"-[01]\d-")  # an ISO date's month
_DOT_DIGIT = re.compile(r"\.\d")  # a version's first dot
_HYPHEN_DIGIT = re.compile(r"-\d")  # a ticket's number
_UNDERSCORE_DIGIT_PART = re.compile(r"_[A-Za-z0-9]*\d")  # an API id's part after its prefix
_ASCII_WORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")


@dataclass(frozen=True, slots=True)
class _Words:
    """What a rule led by one of `words` (case-insensitive, between word boundaries) and
    holding a digit needs: a digit, and in an ASCII text one of the words standing alone.
    `str.find` skips to a word far faster than the regex engine tries a `\\b`-led pattern
    at every position, and most texts name no order, ticket or port."""

    words: tuple[str, ...]

    def __call__(self, source: str) -> bool:
        if _DIGIT.search(source) is None:
            return False
        if not source.isascii():
            return True  # beyond ASCII, `(?i:k)` matches the Kelvin sign too: the rule decides
        folded = source.lower()
        return any(_stands_alone(folded, word) for word in self.words)


def _stands_alone(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` (ASCII) with no word character either side."""
    start = text.find(word)
    while start != -1:
        end = start + len(word)
        if (start == 0 or text[start - 1] not in _ASCII_WORD_CHARS) and (
            end == len(text) or text[end] not in _ASCII_WORD_CHARS
        ):
            return True
        start = text.find(word, start + 1)
    return False


# Order matters: a span of text is claimed by the first rule that matches it, so the wide
# shapes go first (a URL holds paths and ids, a path holds hashes, a date holds numbers).
_RULES = (
    _Rule(
        "url",
        "url",
        re.compile(r"(?<![\w.])(?:https?|ftps?|wss?|file)://[^\s<>\"'`{}|\\^\[\]]+"),
        _SCHEME.search,
    ),
    _Rule(
        "email",
        "email",
        re.compile(r"(?<![\w.%+-])[\w.%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?![\w-])"),
        _AT.search,
    ),
    _Rule(
        "ip address",
        "identifier",
        re.compile(
            r"(?<![\w.:-])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)"
            r"(?::\d{1,5})?(?![\w-]|\.\d)"
        ),
        _DOTTED_QUAD.search,
    ),
    _Rule(
        "host",
        "identifier",
        re.compile(
            r"(?<![\w.@/\\-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
            rf"(?i:{_HOST_SUFFIXES})(?::\d{{1,5}})?(?![\w-]|\.\w)"
        ),
        _DOT_SUFFIX.search,
    ),
    _Rule(
        "windows path",
        "path",
        re.compile(
            rf"(?<![\w\\/.])[A-Za-z]:{_WINDOWS_SEPARATOR}"
            rf"(?:{_WINDOWS_SEGMENT}{_WINDOWS_SEPARATOR})*(?:{_WINDOWS_SEGMENT})?"
        ),
        _DRIVE_SEPARATOR.search,
    ),
    _Rule(
        "windows relative path",
        "path",
        re.compile(
            rf"(?<![\w\\/.:-])(?:[\w.-]+\\\\?)+[\w.-]*{_EXTENSION}(?![\w\\])",
        ),
        _BACKSLASH.search,
    ),
    _Rule(
        "unix path",
        "path",
        # Not after a word (`km/h`, `and/or`, `N/A`), `<` (`</div>`) or `$` (`$HOME/x`).
        re.compile(rf"(?<![\w/\\.:~$<@-])(?:~|\.{{1,2}})?(?:/{_UNIX_CHAR}+)+/?"),
        _SLASH_NAME.search,
    ),
    _Rule(
        "relative path",
        "path",
        re.compile(rf"(?<![\w/\\.:~$<@-])(?:{_UNIX_CHAR}+/)+{_UNIX_CHAR}*{_EXTENSION}(?![\w/])"),
        _SLASH_EXTENSION.search,
    ),
    _Rule(
        "uuid",
        "hash",
        re.compile(rf"\b{_HEX}{{8}}-(?:{_HEX}{{4}}-){{3}}{_HEX}{{12}}\b"),
        _UUID_MIDDLE.search,
    ),
    _Rule(
        "slug id",
        "identifier",
        # Lower-case ids a system mints: `build-7f3a9c21`, `job-20931`, `k8s-stg-euw1`. The
        # last part holds a digit and four characters or more, so `covid-19` and `us-west-2`
        # stay prose; without this rule a hash inside one (`7f3a9c21`) would be kept alone.
        re.compile(
            r"(?<![\w.-])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?=[a-z0-9]*\d)[a-z0-9]{4,}(?![\w-])"
        ),
        _HYPHEN_DIGIT_PART.search,
    ),
    _Rule(
        "hex digest",
        "hash",
        # A git SHA (7 to 40 hex), a sha256 or sha512 digest. It must mix digits and letters:
        # `facade` is a word and `1234567` a number; `1e10000` is a float, not a hash.
        re.compile(
            rf"\b(?:sha(?:1|256|512):)?(?={_HEX}*[a-fA-F])(?={_HEX}*\d)(?!\d+[eE]\d+\b)"
            rf"(?:{_HEX}{{128}}|{_HEX}{{64}}|{_HEX}{{7,40}})\b"
        ),
        _HEX_RUN.search,
    ),
    _Rule(
        "date",
        "date",
        # Full ISO dates only: a bare year is not a fact.
        re.compile(
            r"(?<![\w.-])\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
            r"(?:[T ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
            r"(?![\w-])"
        ),
        _MONTH.search,
    ),
    _Rule(
        "version",
        "identifier",
        # `v4.19.2`, `v2.1`, `1.2.3-rc.1`: a `v` and dots, or three numbers (two are a
        # decimal, `Python 3.11` included; four are an IP address, claimed above).
        re.compile(
            r"(?<![\w.-])(?:v\d+(?:\.\d+){1,3}|\d+\.\d+\.\d+)(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
            r"(?![\w-]|\.\d)"
        ),
        _DOT_DIGIT.search,
    ),
    _Rule(
        "ticket",
        "identifier",
        # LETTERS-DIGITS, upper case (ABC-123, JIRA-42, CVE-2024-3094): lower-case
        # hyphenated words (`covid-19`, `gpt-4o-mini` aside) are ordinary prose.
        re.compile(rf"(?<![\w-])(?!(?:{_NOT_TICKETS})-)[A-Z][A-Z0-9]{{1,9}}(?:-\d+)+(?!\w)"),
        _HYPHEN_DIGIT.search,
    ),
    _Rule(
        "api id",
        "identifier",
        # Stripe- and OpenAI-style ids: a short lower-case prefix, `_`, digits among letters.
        re.compile(r"\b[a-z]{2,8}_(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{6,}\b"),
        _UNDERSCORE_DIGIT_PART.search,
    ),
    _Rule(
        "prefixed id",
        "identifier",
        re.compile(
            rf"\b(?i:{_ID_PREFIX})\b(?:[ \t]+(?i:id|no\.|number))?[ \t]*"
            r"(?:#[ \t]*\d+|:?[ \t]*(?=[\w-]*\d)[A-Za-z0-9][\w-]{3,})(?![\w-])"
        ),
        _Words(tuple(prefix.lower() for prefix in _ID_PREFIXES)),
    ),
    _Rule(
        "money",
        "quantity",
        re.compile(
            rf"(?<![\w{_CURRENCY}])[{_CURRENCY}] ?{_NUMBER}"
            r"(?: ?(?:[kKMB]|bn|million|billion|thousand))?(?!\w)"
        ),
        _CURRENCY_SIGN.search,
    ),
    _Rule(
        "measure",
        "quantity",
        # `1990s` is a decade, not ninety-nine thousand seconds.
        re.compile(rf"(?<![\w.,])(?!(?:1[5-9]|20)\d0s(?!\w)){_NUMBER}[kKM]? ?(?:{_UNIT})(?!\w)"),
        _DIGIT.search,
    ),
    _Rule(
        "labelled number",
        "quantity",
        # A sentence may end right after the number; `port 3.5` is no port.
        re.compile(rf"\b(?i:{_LABELS})\b[ \t]*:?[ \t]*\d+(?!\w|\.\d)"),
        _Words(_LABEL_WORDS),
    ),
)

# Sentence punctuation and closers a greedy pattern swallows at the end of a URL or path.
_SWALLOWED = ".,;:!?*'\""
_ALNUM = re.compile(r"[^\W_]")

# A sentence: up to `.`, `!` or `?` before a space, or the end of the line. A list marker in
# front is not part of it. Dots inside words (`main.py`, `3.11`) do not end a sentence.
_SENTENCE = re.compile(
    r"(?:(?:[-*+•>]|\d{1,3}[.)])[ \t]+)?(?P<body>\S.*?(?:[.!?]+(?=\s|$)|$))", re.MULTILINE
)
# Either apostrophe: models and phones type the typographic one.
_APOSTROPHE = "['\u2019]"
_CONSTRAINT_WORDS = (
    *("never", "always", "must", rf"mustn{_APOSTROPHE}t", r"do\s+not", rf"don{_APOSTROPHE}t"),
    *("only", "required", r"should\s+not", rf"shouldn{_APOSTROPHE}t", "avoid", "prefer"),
)
_CONSTRAINT = re.compile(rf"\b(?:{'|'.join(_CONSTRAINT_WORDS)})\b", re.IGNORECASE)
# Longer "sentences" are pasted material (a log line, a paragraph of docs), not a stated rule.
_MAX_CONSTRAINT_CHARS = 400

# Who said it decides what survives trimming: the user's rules, then what the user said,
# then what the assistant said or passed to tools, then tool output (the bulk of any span).
_CONSTRAINT_RANK = 0
_RANKS: Mapping[str, int] = {
    "user": 1,
    **dict.fromkeys(INSTRUCTION_ROLES, 1),
    "assistant": 2,
}
_TOOL_RANK = 3
# Only the user's side states constraints: tool output (docs, logs, code) is full of "must"
# and "only" that nobody asked for, and the assistant's "I must check" is not a rule.
_USER_SIDE = INSTRUCTION_ROLES | {"user"}


# --- How a fact is compared ------------------------------------------------------------------


def _as_written(value: str) -> str:
    return value


# `42ms` and `42 ms`, `$ 5` and `$5` state the same figure.
_UNIT_GAP = re.compile(rf"(?<=\d) ?(?=[^\W\d_]|[%°])|(?<=[{_CURRENCY}]) ?(?=\d)")


def _units_loosely(value: str) -> str:
    return " ?".join(re.escape(part) for part in _UNIT_GAP.split(value))


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one kind is titled in the appendix and compared against a summary."""

    heading: str
    fold: Callable[[str], str]
    spell: Callable[[str], str]


# Case is ignored where it carries no meaning (ids, emails, hex, a sentence's capital), kept
# where it does: URL paths and Unix paths are case-sensitive.
_KINDS: Mapping[FactKind, _Kind] = {
    "constraint": _Kind("The user's constraints and preferences:", str.casefold, re.escape),
    "identifier": _Kind("Identifiers:", str.casefold, re.escape),
    "hash": _Kind("Hashes and UUIDs:", str.casefold, re.escape),
    "url": _Kind("URLs:", _as_written, re.escape),
    "email": _Kind("Email addresses:", str.casefold, re.escape),
    "path": _Kind("Files and paths:", _as_written, re.escape),
    "date": _Kind("Dates:", str.casefold, re.escape),
    "quantity": _Kind("Numbers:", str.casefold, _units_loosely),
}

_SPACES = re.compile(r"\s+")
# Dropped from a fact's end before comparing: "Never push." and "never push" are one rule,
# and a URL at the end of a sentence is the same URL.
_TRAILING = ".,;:!? "
# A fact must stand alone in the summary: `ABC-12` is not in `ABC-123`, `/etc/hosts` is not in
# `/private/etc/hosts`, and `https://x.io/a` is not in `https://x.io/a.html`, but a sentence
# may end right after it.
_BEFORE = r"(?<![\w@/\\.-])"
_AFTER = r"(?![\w@/\\-]|[.:?#]\w)"


# --- The API ---------------------------------------------------------------------------------


def extract_facts(
    messages: Sequence[Message], *, max_facts: int = 200, max_chars: int = 6000
) -> tuple[Fact, ...]:
    """The ledger of `messages`: deduplicated facts in first-seen order, within both bounds.

    `max_chars` bounds the facts' text, not counting the appendix's headings and bullets.
    Raises ValueError when a bound is negative.
    """
    return ledger_of([ranked_facts(m) for m in messages], max_facts=max_facts, max_chars=max_chars)


def ranked_facts(message: Message) -> tuple[Ranked, ...]:
    """The facts of one message, each once, in first-seen order, with their rank: what
    `ledger_of` makes a ledger of. Depends on the message alone, so a caller may find it
    once per message and keep it (`proxy.core.mentions`)."""
    return tuple(_first_seen(_found([message])))


def ledger_of(
    ranked: Iterable[Iterable[Ranked]], *, max_facts: int = 200, max_chars: int = 6000
) -> tuple[Fact, ...]:
    """`extract_facts` of messages whose `ranked_facts` are `ranked` (in their order).

    Raises ValueError when a bound is negative.
    """
    if max_facts < 0 or max_chars < 0:
        raise ValueError(f"ledger bounds must not be negative: {max_facts=}, {max_chars=}")
    # Deduplicating each message's facts first, then all of them, keeps what deduplicating
    # all at once keeps: each fact where it first appeared, at its best rank.
    return _bounded(_first_seen(itertools.chain.from_iterable(ranked)), max_facts, max_chars)


def find_specifics(source: str) -> list[Fact]:
    """The facts the fixed patterns find in one text (no constraints), in order, repeats kept."""
    return [fact for _, fact in specifics_at(source)]


def specifics_at(source: str, kinds: Collection[FactKind] | None = None) -> list[tuple[int, Fact]]:
    """`find_specifics` with where each fact starts in `source`, only `kinds` if given."""
    if kinds is None:
        return sorted(_pattern_facts(source, _RULES), key=lambda found: found[0])
    # A rule takes spans only from the rules after it: those after the last rule of a wanted
    # kind cannot change what is found, and are not tried.
    last = max((i + 1 for i, rule in enumerate(_RULES) if rule.kind in kinds), default=0)
    found = [item for item in _pattern_facts(source, _RULES[:last]) if item[1].kind in kinds]
    return sorted(found, key=lambda item: item[0])


def missing_facts(facts: Iterable[Fact], summary: str) -> tuple[Fact, ...]:
    """The facts `summary` does not state, in their given order."""
    spaced = _SPACES.sub(" ", summary)
    views = {kind: rule.fold(spaced) for kind, rule in _KINDS.items()}
    return tuple(fact for fact in facts if not _states(views[fact.kind], fact))


def _states(view: str, fact: Fact) -> bool:
    """Whether `view` (a summary folded for the fact's kind) states `fact`, standing alone."""
    normalized = _normalized(fact)
    # The needle is the fact's literal parts, between spacing the kind allows: a view that
    # lacks one of the parts cannot match, and a plain substring test says so without
    # compiling a regex per fact (most of a span's facts are absent from any summary).
    parts = _UNIT_GAP.split(normalized) if fact.kind == "quantity" else (normalized,)
    if not all(part in view for part in parts):
        return False
    # The regex: the fact standing alone, spelled as its kind allows.
    needle = _BEFORE + _KINDS[fact.kind].spell(normalized) + _AFTER
    return re.search(needle, view) is not None


def appendix(facts: Iterable[Fact]) -> str:
    """The facts under the ledger heading, grouped by kind, one verbatim line each ("" if none)."""
    listed = tuple(facts)
    if not listed:
        return ""
    lines = [LEDGER_HEADING]
    for kind, rule in _KINDS.items():
        group = [f"- {fact.text}" for fact in listed if fact.kind == kind]
        if group:
            lines += [rule.heading, *group]
    return "\n".join(lines)


def with_missing_facts(summary: str, facts: Iterable[Fact]) -> str:
    """`summary` with the facts it lost appended verbatim; unchanged when it lost none."""
    missing = missing_facts(facts, summary)
    if not missing:
        return summary
    body = summary.rstrip()
    return f"{body}\n\n{appendix(missing)}" if body else appendix(missing)


# --- Extraction ------------------------------------------------------------------------------


def _found(messages: Sequence[Message]) -> Iterator[tuple[int, Fact]]:
    """(rank, fact) for every fact of every message, in conversation order."""
    for message in messages:
        speaker = role(message)
        rank = _RANKS.get(speaker, _TOOL_RANK)
        for source in texts_of(message):
            yield from _found_in(source, rank, user_side=speaker in _USER_SIDE)


def texts_of(message: Message) -> Iterator[str]:
    """What a message says: its text, then the strings inside its calls' arguments."""
    yield text(message)
    functions = [call.get("function") for call in tool_calls(message)]
    functions.append(message.get("function_call"))
    for function in functions:
        if isinstance(function, dict):
            yield from _strings(_decoded(function.get("arguments")))


def _decoded(arguments: object) -> object:
    """Call arguments as JSON values, so `C:\\\\x` reads as `C:\\x` and `\\u00e9` as `é`."""
    if not isinstance(arguments, str):
        return arguments  # a few clients send an object rather than the JSON text
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments  # models do emit broken JSON; it is still text worth reading


def _strings(value: object) -> Iterator[str]:
    """The strings in a JSON value (keys included), in document order."""
    # Iterative: a deeply nested value must not exhaust the stack.
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            pending.extend(reversed([part for pair in item.items() for part in pair]))
        elif isinstance(item, list):
            pending.extend(reversed(item))


def _found_in(source: str, rank: int, *, user_side: bool) -> list[tuple[int, Fact]]:
    """(rank, fact) for every fact in one text, ordered by where it starts."""
    found = [(start, rank, fact) for start, fact in _pattern_facts(source)]
    if user_side:
        found += [(start, _CONSTRAINT_RANK, fact) for start, fact in _constraints(source)]
    found.sort(key=lambda item: item[:2])  # a constraint precedes the facts inside it
    return [(fact_rank, fact) for _, fact_rank, fact in found]


def _constraints(source: str) -> Iterator[tuple[int, Fact]]:
    """(start, fact) for each sentence of `source` that states a rule."""
    for match in _SENTENCE.finditer(source):
        sentence = match["body"].rstrip()
        if _is_constraint(sentence):
            yield match.start("body"), Fact("constraint", sentence)


def _is_constraint(sentence: str) -> bool:
    # A question ("should I always use X?") asks about a rule rather than stating one.
    return (
        len(sentence) <= _MAX_CONSTRAINT_CHARS
        and not sentence.endswith("?")
        and _CONSTRAINT.search(sentence) is not None
    )


_RECALL_ID = re.compile(r"rc_[a-z2-7]{10}")


def _pattern_facts(source: str, rules: Sequence[_Rule] = _RULES) -> Iterator[tuple[int, Fact]]:
    """(start, fact) for each span a rule matches, each span claimed by the first rule."""
    claimed = bytearray(len(source))
    for rule in rules:
        if not rule.needs(source):
            continue
        for match in rule.pattern.finditer(source):
            found = _trim_end(match.group())
            start, end = match.start(), match.start() + len(found)
            if found.startswith("rc_") and _RECALL_ID.fullmatch(found):
                continue  # the proxy's own recall id (`proxy.core.recall`): no fact of theirs
            if _ALNUM.search(found) and claimed.find(1, start, end) == -1:
                claimed[start:end] = b"\x01" * (end - start)
                yield start, Fact(rule.kind, found)


def _trim_end(found: str) -> str:
    """`found` without the punctuation, or the unbalanced `)`, a greedy match ate at its end."""
    # `(see https://x.io/a)` and `[docs](https://x.io/a).`: that `)` closes the prose, while
    # the one in `https://en.wikipedia.org/wiki/Rust_(language)` closes the URL's own `(`.
    body = found.rstrip(_SWALLOWED + ")")
    depth = body.count("(") - body.count(")")
    tail = found[len(body) :]
    kept = 0
    for index, char in enumerate(tail):
        if char == ")":
            if depth <= 0:
                break
            depth -= 1
            kept = index + 1
    return body + tail[:kept]


def _first_seen(found: Iterable[tuple[int, Fact]]) -> list[tuple[int, Fact]]:
    """One (rank, fact) per distinct fact: where it first appeared, at its best rank."""
    best: dict[tuple[FactKind, str], tuple[int, Fact]] = {}
    for rank, fact in found:
        key = (fact.kind, _normalized(fact))
        seen = best.setdefault(key, (rank, fact))
        if rank < seen[0]:
            best[key] = (rank, seen[1])  # replacing a value keeps its place in the dict
    return list(best.values())


def _bounded(
    candidates: list[tuple[int, Fact]], max_facts: int, max_chars: int
) -> tuple[Fact, ...]:
    """The best-ranked facts that fit both bounds, back in first-seen order."""
    # Stable sort: within a rank, the earlier fact wins.
    by_rank = sorted(range(len(candidates)), key=lambda index: candidates[index][0])
    kept: set[int] = set()
    budget = max_chars
    for index in by_rank:
        if len(kept) == max_facts:
            break
        size = len(candidates[index][1].text)
        if size <= budget:  # a long fact that does not fit leaves room for shorter ones
            kept.add(index)
            budget -= size
    return tuple(fact for index, (_, fact) in enumerate(candidates) if index in kept)


# --- Comparison ------------------------------------------------------------------------------


def _normalized(fact: Fact) -> str:
    """The fact as compared: spacing collapsed, trailing punctuation dropped, case folded."""
    spaced = _SPACES.sub(" ", fact.text).strip().rstrip(_TRAILING)
    return _KINDS[fact.kind].fold(spaced)
