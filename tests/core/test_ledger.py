"""The fact ledger: extraction, the presence check, the appendix and their bounds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import ledger as ledger_module
from proxy.core.ledger import (
    LEDGER_HEADING,
    Fact,
    FactKind,
    appendix,
    extract_facts,
    find_specifics,
    missing_facts,
    specifics_at,
    with_missing_facts,
)
from proxy.core.messages import Message
from tests.builders import (
    assistant,
    assistant_calls,
    developer,
    function_call,
    function_result,
    image_user,
    system,
    tool_result,
    user,
)

SHA1 = "9fceb02d0ae598e95dc970b74767f19372d61af8"
SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
UUID = "123e4567-e89b-12d3-a456-426614174000"


def raw_call(arguments: Any) -> Message:
    """An assistant tool call whose `arguments` are sent exactly as given (not JSON-encoded)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        ],
    }


def in_tool_output(content: str) -> tuple[Fact, ...]:
    return extract_facts([tool_result("c1", content)])


def constraints(*messages: Message) -> list[str]:
    return [fact.text for fact in extract_facts(messages) if fact.kind == "constraint"]


# --- Extraction, kind by kind ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "kind", "expected"),
    [
        # identifiers
        ("Fix ABC-123 today", "identifier", "ABC-123"),
        ("see JIRA-42.", "identifier", "JIRA-42"),
        ("CVE-2024-3094 was patched", "identifier", "CVE-2024-3094"),
        ("Build finished: build-7f3a9c21 (3 artifacts)", "identifier", "build-7f3a9c21"),
        ("scheduled on k8s-stg-euw1", "identifier", "k8s-stg-euw1"),
        ("refund order #88231 now", "identifier", "order #88231"),
        ("Ticket 7781 is open", "identifier", "Ticket 7781"),
        ("merge PR #42", "identifier", "PR #42"),
        ("customer id: C99812 complained", "identifier", "customer id: C99812"),
        ("charge ch_3NvK2aL9 failed", "identifier", "ch_3NvK2aL9"),
        ("the release is tagged v4.19.2.", "identifier", "v4.19.2"),
        ("pin v2.1 for now", "identifier", "v2.1"),
        ("upgrade to 1.2.3-rc.1 first", "identifier", "1.2.3-rc.1"),
        ("the database is db-staging-07.internal now", "identifier", "db-staging-07.internal"),
        ("call api.example.com:443.", "identifier", "api.example.com:443"),
        ("the pod at redis.cache.svc answers", "identifier", "redis.cache.svc"),
        ("connect to 10.0.0.12:5432 first", "identifier", "10.0.0.12:5432"),
        ("ping 192.168.1.1.", "identifier", "192.168.1.1"),
        # hashes
        ("reverted a1b2c3d", "hash", "a1b2c3d"),
        (f"at commit {SHA1}", "hash", SHA1),
        (f"image sha256:{SHA256} pulled", "hash", f"sha256:{SHA256}"),
        (f"checksum {SHA256.upper()}", "hash", SHA256.upper()),
        (f"request {UUID} failed", "hash", UUID),
        # URLs: trailing punctuation and the prose's closing bracket are not part of them
        ("docs at https://example.com/a/b?x=1.", "url", "https://example.com/a/b?x=1"),
        ("(see https://example.com/a)", "url", "https://example.com/a"),
        ("[docs](https://example.com/a).", "url", "https://example.com/a"),
        (
            "read https://en.wikipedia.org/wiki/Rust_(language), then",
            "url",
            "https://en.wikipedia.org/wiki/Rust_(language)",
        ),
        ("connect to ws://localhost:8000/stream", "url", "ws://localhost:8000/stream"),
        # emails
        ("mail Bob.Smith+x@mail.example.co.uk today", "email", "Bob.Smith+x@mail.example.co.uk"),
        # paths
        ("edit src/app/main.py", "path", "src/app/main.py"),
        ("read /etc/hosts.", "path", "/etc/hosts"),
        ("run ./scripts/deploy.sh", "path", "./scripts/deploy.sh"),
        ("open ~/notes/todo.md", "path", "~/notes/todo.md"),
        ("see .github/workflows/ci.yml", "path", ".github/workflows/ci.yml"),
        ("log in C:\\Users\\me\\app.log", "path", "C:\\Users\\me\\app.log"),
        ("tools in C:/tools/bin/", "path", "C:/tools/bin/"),
        ("see src\\app\\main.py", "path", "src\\app\\main.py"),
        ('{"p": "C:\\\\Users\\\\me"}', "path", "C:\\\\Users\\\\me"),
        # dates
        ("due 2024-06-01.", "date", "2024-06-01"),
        ("at 2024-06-01T10:30:00Z", "date", "2024-06-01T10:30:00Z"),
        # numbers with units
        ("p99 is 42 ms", "quantity", "42 ms"),
        ("the disk has 3.5 GB left", "quantity", "3.5 GB"),
        ("budget $1,200 total", "quantity", "$1,200"),
        ("raise of €30", "quantity", "€30"),
        ("a $5M round", "quantity", "$5M"),
        ("error rate 15%", "quantity", "15%"),
        ("ship in 2 weeks", "quantity", "2 weeks"),
        ("the window is 128k tokens", "quantity", "128k tokens"),
        ("we have 1,500 users", "quantity", "1,500 users"),
        ("a 30s timeout", "quantity", "30s"),
        ("it is 21°C outside", "quantity", "21°C"),
        ("listening on port 8080", "quantity", "port 8080"),
        ("it listens on port 6432.", "quantity", "port 6432"),
        ("died with exit code 137", "quantity", "exit code 137"),
    ],
)
def test_extracts_fact(content: str, kind: FactKind, expected: str) -> None:
    assert in_tool_output(content) == (Fact(kind, expected),)


@pytest.mark.parametrize(
    "content",
    [
        "Python 3.11 is out",  # a version is not a number with a unit
        "in 2024 we shipped",  # a bare year
        "I have 3 apples and 12 pears",  # bare integers
        "call 1234567 now",  # digits only: a number, not a hash
        "a decade of facade and deadbeef",  # hex letters only: words
        "overflowed to 1e10000",  # a float in exponent notation
        "a well-known long-term plan",  # hyphenated words
        "gpt-4o-mini and covid-19",  # lower-case LETTERS-DIGITS
        "in us-west-2 and eu-central-1",  # a short last part: a region, not a minted id
        "encoded as UTF-8, hashed with SHA-256",  # standards, not tickets
        "and/or, client/server, TCP/IP, km/h, N/A",  # slashes in prose
        "closing </div> tags",  # markup
        "12/25/2024",  # a date written with slashes
        "the 1990s",  # a decade
        "self.value, obj.method() and e.g. this",  # dotted code and abbreviations
        "version 3.11 and 2.7",  # two numbers are a decimal, not a version
        "port 3.5",  # no port
        "999.1.1.1 and 1.2.3.4.5",  # not IP addresses
        "3 x 4 grid",  # a product, not a multiplier
        "an issue with login, in order of 1000",  # prefixes without an id
        "my_var and test_helpers",  # snake case without digits
        "// a comment; see /. and /--",  # slashes without a name
    ],
)
def test_ignores_lookalike(content: str) -> None:
    assert in_tool_output(content) == ()


def test_wide_shapes_claim_their_span() -> None:
    # The URL holds a path, a ticket and a hash: it is one fact, not four.
    url = f"https://jira.example.com/browse/ABC-123/src/a.py?rev={SHA1}"
    assert in_tool_output(f"see {url}") == (Fact("url", url),)


# --- Constraints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Never push to main.", ["Never push to main."]),
        ("Fix it. Do not touch   the schema! Thanks", ["Do not touch   the schema!"]),
        ("- Always use tabs\n- Be nice", ["Always use tabs"]),
        ("1. You must keep src/main.py small. 2. ok", ["You must keep src/main.py small."]),
        ("don't use sudo", ["don't use sudo"]),
        ("Don\u2019t use sudo", ["Don\u2019t use sudo"]),
        ("I only want JSON output\r\nthanks", ["I only want JSON output"]),
        (
            "Please avoid emojis; I prefer terse replies.",
            ["Please avoid emojis; I prefer terse replies."],
        ),
        ("Should I always use X?", []),  # a question asks about a rule
        ("The mustard is fine. Nevertheless, ok.", []),  # whole words only
        ("must " + "x" * 500, []),  # pasted material, not a stated rule
    ],
)
def test_extracts_user_constraint(content: str, expected: list[str]) -> None:
    assert constraints(user(content)) == expected


def test_instructions_state_constraints() -> None:
    assert constraints(system("Replies are required to be short."), developer("Never guess.")) == [
        "Replies are required to be short.",
        "Never guess.",
    ]


def test_only_the_user_side_states_constraints() -> None:
    said = "You must run make first."
    assert (
        constraints(assistant(said), tool_result("c1", said), function_result(content=said)) == []
    )


def test_constraint_precedes_the_facts_inside_it() -> None:
    assert extract_facts([user("Never edit src/app/main.py by hand.")]) == (
        Fact("constraint", "Never edit src/app/main.py by hand."),
        Fact("path", "src/app/main.py"),
    )


# --- Where facts are read from ---------------------------------------------------------------


def test_reads_decoded_call_arguments() -> None:
    # JSON escapes are undone: the path is the one the model meant, not its JSON spelling.
    call = assistant_calls("c1", name="read", arguments={"path": "C:\\x\\y.txt", "n": 3})
    assert extract_facts([call]) == (Fact("path", "C:\\x\\y.txt"),)


def test_reads_argument_keys_and_nested_values_in_order() -> None:
    arguments = {"src/a.py": [1, {"b": "src/b.py"}, "ABC-1"], "done": True}
    assert extract_facts([assistant_calls("c1", arguments=arguments)]) == (
        Fact("path", "src/a.py"),
        Fact("path", "src/b.py"),
        Fact("identifier", "ABC-1"),
    )


@pytest.mark.parametrize(
    "arguments",
    [
        '{"path": "src/a.py"',  # broken JSON is read as text
        {"path": "src/a.py"},  # some clients send an object
        '"src/a.py"',  # a JSON string
    ],
)
def test_reads_arguments_in_any_shape(arguments: Any) -> None:
    assert extract_facts([raw_call(arguments)]) == (Fact("path", "src/a.py"),)


def test_survives_deeply_nested_arguments() -> None:
    assert extract_facts([raw_call("[" * 100_000 + "]" * 100_000)]) == ()


def test_reads_legacy_function_calls_and_results() -> None:
    messages = [
        function_call(arguments='{"url": "https://x.io/a"}'),
        function_result(content="ABC-1"),
    ]
    assert extract_facts(messages) == (Fact("url", "https://x.io/a"), Fact("identifier", "ABC-1"))


def test_reads_text_parts() -> None:
    assert extract_facts([image_user("what is in ABC-9?")]) == (Fact("identifier", "ABC-9"),)


def test_tolerates_malformed_messages() -> None:
    messages: list[Message] = [
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": "bad"}, "junk"]},
        {"content": 3},
        {"role": 7, "content": "ABC-1"},
    ]
    assert extract_facts(messages) == (Fact("identifier", "ABC-1"),)


# --- Order, duplicates and bounds ------------------------------------------------------------


def test_keeps_first_seen_order_across_messages() -> None:
    messages = [user("ABC-2 then src/a.py"), tool_result("c1", "ABC-1, ABC-2")]
    assert extract_facts(messages) == (
        Fact("identifier", "ABC-2"),
        Fact("path", "src/a.py"),
        Fact("identifier", "ABC-1"),
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Bob@Example.com", "bob@example.com"),  # emails compare without case
        ("Never push  to main.", "never push to main"),  # constraints without spacing or case
    ],
)
def test_duplicates_keep_first_spelling(first: str, second: str) -> None:
    facts = extract_facts([user(first), user(second)])
    assert [fact.text for fact in facts] == [first]


def test_user_constraints_survive_trimming_first() -> None:
    messages = [
        tool_result("c1", "ABC-1 ABC-2 ABC-3"),
        assistant("DEF-1"),
        user("Check GHI-1. Never deploy on Fridays."),
    ]
    assert extract_facts(messages, max_facts=2) == (
        Fact("identifier", "GHI-1"),
        Fact("constraint", "Never deploy on Fridays."),
    )
    assert extract_facts(messages, max_facts=3)[0] == Fact("identifier", "DEF-1")


def test_a_user_mention_promotes_a_tool_fact_in_place() -> None:
    messages = [tool_result("c1", "ABC-1 DEF-2 GHI-3"), user("GHI-3 and ABC-1")]
    assert extract_facts(messages, max_facts=2) == (
        Fact("identifier", "ABC-1"),
        Fact("identifier", "GHI-3"),
    )


def test_char_bound_skips_long_facts_for_shorter_ones() -> None:
    facts = in_tool_output("ABC-1 https://example.com/a/long/path DEF-2")
    assert [fact.text for fact in facts] == ["ABC-1", "https://example.com/a/long/path", "DEF-2"]
    trimmed = extract_facts(
        [tool_result("c1", "ABC-1 https://example.com/a/long/path DEF-2")], max_chars=10
    )
    assert trimmed == (Fact("identifier", "ABC-1"), Fact("identifier", "DEF-2"))


def test_huge_span_yields_a_bounded_ledger() -> None:
    huge = " ".join(f"ABC-{number}" for number in range(10_000))
    facts = extract_facts([tool_result("c1", huge)], max_facts=50, max_chars=10_000)
    assert len(facts) == 50
    assert facts[0] == Fact("identifier", "ABC-0")


def test_zero_bound_means_no_ledger() -> None:
    assert extract_facts([user("Never push. ABC-1")], max_facts=0) == ()
    assert extract_facts([user("Never push. ABC-1")], max_chars=0) == ()


@pytest.mark.parametrize("bounds", [{"max_facts": -1}, {"max_chars": -1}])
def test_negative_bound_is_refused(bounds: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        extract_facts([], **bounds)


# --- Checking a summary ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fact", "summary", "present"),
    [
        (Fact("identifier", "ABC-123"), "Fixed abc-123.", True),
        (Fact("identifier", "ABC-12"), "Fixed ABC-123.", False),
        (Fact("identifier", "ABC-123"), "Fixed XABC-123.", False),
        (Fact("email", "Bob@Example.com"), "mailed bob@example.com", True),
        (Fact("email", "bob@example.com"), "mailed jim.bob@example.com", False),
        (Fact("email", "bob@example.com"), "mailed bob@example.com.au", False),
        (Fact("hash", "A1B2C3D"), "commit a1b2c3d.", True),
        (Fact("path", "src/app/main.py"), "Edited src/app/main.py.", True),
        (Fact("path", "src/app/main.py"), "Edited `src/app/main.py`", True),
        (Fact("path", "src/app/main.py"), "Edited src/app/main.pyc", False),
        (Fact("path", "/etc/hosts"), "Edited /private/etc/hosts", False),
        (Fact("path", "src/App.py"), "Edited src/app.py", False),  # paths keep case
        (Fact("url", "https://x.io/a"), "See https://x.io/a.", True),
        (Fact("url", "https://x.io/a"), "See (https://x.io/a)", True),
        (Fact("url", "https://x.io/a"), "See https://x.io/a.html", False),
        (Fact("url", "https://x.io/a"), "See https://x.io/a/b", False),
        (Fact("url", "https://x.io/a"), "See https://x.io/a#top", False),
        (Fact("constraint", "Never push to main."), "Rules: never push   to\nmain", True),
        (Fact("constraint", "Never push to main."), "Never push to mainline.", False),
        (Fact("quantity", "42 ms"), "latency 42ms", True),
        (Fact("quantity", "42ms"), "latency 42 ms", True),
        (Fact("quantity", "42 ms"), "latency 142 ms", False),
        (Fact("quantity", "42 ms"), "latency 1.42 ms", False),
        (Fact("quantity", "3.5 GB"), "3.5 gb free", True),
        (Fact("quantity", "$1,200"), "costs $ 1,200", True),
        (Fact("quantity", "$1,200"), "costs $1,2000", False),
        (Fact("date", "2024-06-01T10:30Z"), "on 2024-06-01t10:30z", True),
    ],
)
def test_presence(fact: Fact, summary: str, present: bool) -> None:
    assert missing_facts([fact], summary) == (() if present else (fact,))


def test_missing_keeps_given_order() -> None:
    facts = [Fact("path", "b.txt"), Fact("identifier", "ABC-1"), Fact("path", "a.txt")]
    assert missing_facts(facts, "nothing here about ABC-1") == (facts[0], facts[2])


# --- The appendix ----------------------------------------------------------------------------

FACTS = (
    Fact("path", "src/a.py"),
    Fact("constraint", "Never push."),
    Fact("identifier", "ABC-1"),
    Fact("path", "src/b.py"),
)


def test_appendix_groups_by_kind_in_fixed_order() -> None:
    assert appendix(FACTS) == "\n".join(
        [
            LEDGER_HEADING,
            "The user's constraints and preferences:",
            "- Never push.",
            "Identifiers:",
            "- ABC-1",
            "Files and paths:",
            "- src/a.py",
            "- src/b.py",
        ]
    )


def test_appendix_of_nothing_is_empty() -> None:
    assert appendix([]) == ""


def test_appends_only_what_is_missing() -> None:
    summary = "Worked on src/a.py and ABC-1.\n\n"
    assert with_missing_facts(summary, FACTS) == (
        "Worked on src/a.py and ABC-1.\n\n"
        + appendix([Fact("constraint", "Never push."), Fact("path", "src/b.py")])
    )


def test_complete_summary_is_returned_unchanged() -> None:
    summary = "never push. ABC-1 in src/a.py and src/b.py  \n"
    assert with_missing_facts(summary, FACTS) is summary


def test_empty_summary_becomes_the_appendix() -> None:
    assert with_missing_facts(" \n", FACTS) == appendix(FACTS)


@pytest.mark.parametrize("kind", get_args(FactKind))
def test_every_kind_has_a_heading(kind: FactKind) -> None:
    heading, title, line = appendix([Fact(kind, "ABC-1")]).splitlines()
    assert (heading, title.endswith(":"), line) == (LEDGER_HEADING, True, "- ABC-1")


# --- Properties ------------------------------------------------------------------------------

# Fragments that look like facts, so random texts exercise the patterns and their edges.
FRAGMENTS = [
    "ABC-123",
    "order #88231",
    "a1b2c3d",
    UUID,
    "https://x.io/a_(b))",
    "bob@example.com",
    "src/app/main.py",
    "C:\\Users\\me",
    "/etc/hosts",
    "2024-06-01",
    "42 ms",
    "$1,200",
    "15%",
    "Never push to main.",
    "- Always run tests",
    "Do not\u00a0panic!",
    "İstanbul MUST",
    "ß-1",
    "(",
    ")",
    ".",
    "?",
    "\\",
    "/",
]
fragmented = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=12).flatmap(
    lambda parts: st.sampled_from(["", " ", "\n", ". "]).map(lambda sep: sep.join(parts))
)
roles = st.sampled_from(["user", "assistant", "tool", "system", "function", "other"])
conversations = st.lists(
    st.builds(lambda speaker, content: {"role": speaker, "content": content}, roles, fragmented),
    max_size=4,
)
facts = st.lists(st.builds(Fact, st.sampled_from(get_args(FactKind)), fragmented), max_size=6)


@given(st.text(), st.text())
def test_extraction_never_raises(content: str, arguments: str) -> None:
    extract_facts([user(content), raw_call(arguments), tool_result("c1", content)])


@given(fragmented, roles)
def test_every_fact_is_verbatim(content: str, speaker: str) -> None:
    for fact in extract_facts([{"role": speaker, "content": content}]):
        assert fact.text in content


@given(conversations)
def test_extracted_facts_are_distinct(messages: list[Message]) -> None:
    extracted = extract_facts(messages)
    assert missing_facts(extracted, appendix(extracted)) == ()
    assert len(set(extracted)) == len(extracted)


@given(conversations, fragmented)
def test_appendix_makes_any_summary_complete(messages: list[Message], summary: str) -> None:
    ledger = extract_facts(messages)
    completed = with_missing_facts(summary, ledger)
    assert missing_facts(ledger, completed) == ()
    assert with_missing_facts(completed, ledger) == completed


@given(facts, fragmented)
def test_appendix_completes_even_arbitrary_facts(ledger: list[Fact], summary: str) -> None:
    completed = with_missing_facts(summary, ledger)
    assert missing_facts(ledger, completed) == ()
    assert with_missing_facts(completed, ledger) == completed


@given(conversations, st.integers(0, 5), st.integers(0, 80))
def test_bounds_hold(messages: list[Message], max_facts: int, max_chars: int) -> None:
    ledger = extract_facts(messages, max_facts=max_facts, max_chars=max_chars)
    assert len(ledger) <= max_facts
    assert sum(len(fact.text) for fact in ledger) <= max_chars
    unbounded = extract_facts(messages, max_facts=10_000, max_chars=10**9)
    assert [fact for fact in unbounded if fact in ledger] == list(ledger)  # first-seen order


# --- What each rule needs, and the kinds asked for, change no result ----------------------------

MORE_FRAGMENTS = [
    *FRAGMENTS,
    "10.0.0.1:8080",
    "api.example.internal",
    "C:/x/y.txt",
    "dir\\\\file.txt",
    "../rel/x.cfg",
    "v4.19.2",
    "1.2.3-rc.1",
    "sk_live12345abc",
    "ticket: XY-9",
    "port 5432",
    "\u0663\u0664\u0665",  # Arabic-Indic digits: `\d` matches them too
    "sha256:" + SHA256,
    # Parts of the shapes each rule needs, to be joined into near misses.
    "192.168.1",
    "1.2.3.4",
    ".CO",
    "x.io:",
    "D:",
    "-0a1b-",
    "-07-",
    "2024-11-30",
    "AB-1",
    "docs/my-notes.md",
    "build-7f3a9c21",
    "commit 0a1b2c3.",
    "~/.ssh",
    "_a1",
    "-x9",
    "1e10",
]
texts_with_facts = st.lists(
    st.sampled_from(MORE_FRAGMENTS) | st.text(max_size=12), max_size=16
).flatmap(lambda parts: st.sampled_from(["", " ", "\n", ", ", "/"]).map(lambda s: s.join(parts)))


@given(texts_with_facts)
def test_skipping_the_rules_a_text_cannot_match_finds_the_same_facts(source: str) -> None:
    every_rule = [replace(rule, needs=lambda _: True) for rule in ledger_module._RULES]
    assert list(ledger_module._pattern_facts(source)) == list(
        ledger_module._pattern_facts(source, every_rule)
    )


RULES = {rule.name: rule for rule in ledger_module._RULES}


@pytest.mark.parametrize(
    ("rule", "source", "scanned"),
    [
        ("prefixed id", "Order 7", True),
        ("prefixed id", "see PR #4", True),
        ("prefixed id", "pr#4", True),
        ("prefixed id", "prepare 5 PRs, then pr", True),
        ("prefixed id", "prepare 5 PRs", False),
        ("prefixed id", "ticket_9 and tickets 9", False),
        ("prefixed id", "an order without a number", False),
        ("prefixed id", "boo\u212aing 12", True),  # `(?i:k)` matches the Kelvin sign
        ("labelled number", "Line 9", True),
        ("labelled number", "HTTP:80", True),
        ("labelled number", "exit code 3", True),
        ("labelled number", "line9 and pipeline 9", False),
    ],
)
def test_a_word_led_rule_skips_only_texts_without_its_word(
    rule: str, source: str, scanned: bool
) -> None:
    every_rule = [replace(each, needs=lambda _: True) for each in ledger_module._RULES]
    assert bool(RULES[rule].needs(source)) == scanned
    assert list(ledger_module._pattern_facts(source)) == list(
        ledger_module._pattern_facts(source, every_rule)
    )


@given(texts_with_facts, st.sets(st.sampled_from(get_args(FactKind))))
def test_the_specifics_of_some_kinds_are_those_of_all_kinds_of_them(
    source: str, kinds: set[FactKind]
) -> None:
    every = specifics_at(source)
    assert specifics_at(source, kinds) == [item for item in every if item[1].kind in kinds]
    assert [fact for _, fact in every] == find_specifics(source)


def test_the_specifics_of_some_kinds_skip_the_rules_after_them() -> None:
    source = "see src/a.py, 42 ms, $5 and ABC-1 on 2024-06-01"
    assert specifics_at(source, {"path", "identifier"}) == [
        (4, Fact("path", "src/a.py")),
        (28, Fact("identifier", "ABC-1")),
    ]
    assert specifics_at(source, set()) == []
