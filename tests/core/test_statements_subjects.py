"""Supersession by subject: which later statement replaces which earlier one in the ledger."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.messages import Message
from proxy.core.statements import (
    LEDGER_HEADING,
    RULE,
    Statement,
    ledger_text,
    merged,
    read_ledger,
    statements_of,
)
from tests.builders import assistant, assistant_calls, tool_result, user


def texts(statements: list[Statement]) -> list[str]:
    return [s.text for s in statements]


def said(*sentences: str) -> list[Statement]:
    """What the user said, one message per sentence, each followed by a tool round trip."""
    messages: list[Message] = []
    for index, sentence in enumerate(sentences):
        call = f"c{index}"
        messages += [user(sentence), assistant_calls(call), tool_result(call), assistant()]
    return statements_of(messages)


def kept(*sentences: str) -> list[str]:
    return texts(merged([], said(*sentences)))


# --- shared category labels ------------------------------------------------------------------

FACTS = (
    "FACT: The project codename is LANTERN and the launch deadline is 2026-11-15.",
    "FACT: The production database is Postgres 15 in us-west-2.",
    "FACT: The on-call engineer this week is Dana Whitfield (@dwhit).",
    "FACT: Customer exports are stored under s3://acme-exports/2026/.",
)
GOALS = (
    "GOAL STATE: All 212 integration tests pass on the release branch.",
    "GOAL STATE: The p99 latency of /api/orders stays below 250 ms.",
    "GOAL STATE: The migration script can run twice without changing anything.",
    "GOAL STATE: Zero open P1 bugs on the 2026-11-15 milestone.",
)
PREFERENCES = (
    "USER PREFERENCE: Answers in bullet points, at most 5 bullets.",
    "USER PREFERENCE: British spelling in every document.",
    "USER PREFERENCE: Show diffs rather than whole files.",
    "USER PREFERENCE: Times in UTC, 24-hour clock.",
)
RULES = (
    "Never force-push to main.",
    "Do not touch the billing schema.",
    "Every pull request must include tests.",
    "CONSTRAINT: The cloud budget must stay under $2,000 a month.",
)
SIXTEEN = tuple(
    statement for group in zip(FACTS, GOALS, PREFERENCES, RULES, strict=True) for statement in group
)


def test_sixteen_statements_under_shared_labels_are_all_kept_in_order() -> None:
    assert kept(*SIXTEEN) == list(SIXTEEN)


def test_stale_values_under_shared_labels_are_gone_and_the_rest_stays() -> None:
    updates = (
        "FACT: The production database is now MySQL 8 in us-east-1.",
        "USER PREFERENCE: Answers in bullet points, at most 7 bullets.",
        "GOAL STATE: All 230 integration tests pass on the release branch.",
    )
    ledger = merged([], said(*SIXTEEN, *updates))
    expected = [
        {FACTS[1]: updates[0], PREFERENCES[0]: updates[1], GOALS[0]: updates[2]}.get(s, s)
        for s in SIXTEEN
    ]
    assert texts(ledger) == expected  # each update where its subject was first said
    block = ledger_text(ledger)
    for stale in ("Postgres 15", "us-west-2", "at most 5 bullets", "All 212"):
        assert stale not in block
    assert texts(read_ledger(block)) == expected


# --- what replaces what ----------------------------------------------------------------------

UPDATES = [
    pytest.param("Budget: $500", "Budget: $700", id="label-and-value"),
    pytest.param("Steps 1-2 of 5 are done.", "Steps 1-3 of 5 are done.", id="progress"),
    pytest.param("the budget is $500", "the budget is now $700", id="is-now"),
    pytest.param("The budget is $500.", "The budget changed to $700.", id="changed-to"),
    pytest.param("The budget is $500.", "The budget has changed to $700.", id="has-changed-to"),
    pytest.param("The budget is $500.", "The budget will be $700.", id="will-be"),
    pytest.param(
        "The production database is Postgres 15 in us-west-2.",
        "The production database is now MySQL 8 in us-east-1.",
        id="names-after-is",
    ),
    pytest.param(
        "FACT: The production database is Postgres 15 in us-west-2.",
        "FACT: The production database is MySQL 8 in us-east-1.",
        id="label-and-same-subject",
    ),
    pytest.param("The team lead is Priya Raman.", "The team lead is Sam Ortiz.", id="person"),
    pytest.param("The p95 latency is 180 ms.", "The p95 latency is 150 ms.", id="same-identifier"),
    pytest.param(
        "Timezone: America/Los_Angeles", "Timezone: Europe/Berlin", id="label-and-identifier"
    ),
    pytest.param(
        "USER PREFERENCE: Answers in bullet points, at most 5 bullets.",
        "USER PREFERENCE: Answers in bullet points, at most 7 bullets.",
        id="label-and-quantities",
    ),
    pytest.param(
        "Status: the schema migration is done and the backfill is next.",
        "Status: the backfill is done and the cutover is next.",
        id="state-label",
    ),
    pytest.param("Deploy to eu-west-1.", "Actually, deploy to us-east-2.", id="actually"),
    pytest.param("Use Python 3.11.", "Use Python 3.12 instead.", id="instead"),
    pytest.param("Use Python 3.11.", "From now on, use Python 3.12.", id="from-now-on"),
    pytest.param("The budget is $500.", "Update: the budget is $700.", id="update-label"),
    pytest.param(
        "TODO: Email alice@x.com about the invoice.",
        "TODO: Actually, email bob@x.com about the invoice.",
        id="announced-task",
    ),
]


@pytest.mark.parametrize(("earlier", "later"), UPDATES)
def test_a_new_value_of_the_same_subject_replaces_the_old(earlier: str, later: str) -> None:
    assert kept(earlier, later) == [later]


NOT_UPDATES = [
    pytest.param(
        "FACT: The project codename is LANTERN and the launch deadline is 2026-11-15.",
        "FACT: The production database is Postgres 15 in us-west-2.",
        id="other-subject-same-label",
    ),
    pytest.param(
        "The staging database is Postgres 14.",
        "The production database is Postgres 15.",
        id="near-duplicate",
    ),
    pytest.param(
        "TODO: Email Alice about the invoice.", "TODO: Email Bob about the invoice.", id="names"
    ),
    pytest.param(
        "TODO: Email alice@x.com about the invoice.",
        "TODO: Email bob@x.com about the invoice.",
        id="identifiers-in-a-task",
    ),
    pytest.param(
        "GOAL STATE: Zero open P1 bugs before the release.",
        "GOAL STATE: Zero open P2 bugs before the release.",
        id="identifiers-in-a-goal",
    ),
    pytest.param("Ticket PAY-1 is closed.", "Ticket PAY-2 is closed.", id="identifier-before-is"),
    pytest.param("The p95 latency is 180 ms.", "The p99 latency is 150 ms.", id="p95-and-p99"),
    pytest.param("Read src/a.py.", "Now read src/b.py.", id="next-step"),
    pytest.param("Use Python 3.11.", "Use Celsius instead.", id="other-announcement"),
    pytest.param("Here is chunk 2 of the file.", "Here is chunk 3 of the file.", id="here-is"),
    pytest.param("It is 5 pm.", "It is 6 pm.", id="it-is"),
    pytest.param(
        "Restart the host that is at 10.0.0.1.",
        "Restart the host that is at 10.0.0.2.",
        id="relative-clause",
    ),
    pytest.param("Is the budget $500?", "Is the budget $700?", id="questions"),
    pytest.param("The budget is $500.", "Budget: $700", id="other-label"),
    pytest.param("Never open port 22.", "Never open port 3389.", id="rules"),
    pytest.param("Keep 3 replicas.", "Keep 5 replicas.", id="unannounced-instruction"),
]


@pytest.mark.parametrize(("earlier", "later"), NOT_UPDATES)
def test_a_statement_about_something_else_is_kept_beside(earlier: str, later: str) -> None:
    assert kept(earlier, later) == [earlier, later]


def test_a_value_masked_before_is_is_a_quantity_only() -> None:
    # Before "is", a number is the value that moves ("Steps 1-2 of 5"); a name or an id says
    # which thing it is.
    assert kept("The 3 replicas are healthy.", "The 4 replicas are healthy.") == [
        "The 4 replicas are healthy."
    ]
    assert kept(
        "The Berlin office is closed on 2026-12-24.", "The Paris office is closed on 2026-12-24."
    ) == [
        "The Berlin office is closed on 2026-12-24.",
        "The Paris office is closed on 2026-12-24.",
    ]


def test_statements_with_no_value_only_deduplicate() -> None:
    assert kept("The API is stable.", "The API is deprecated.", "Use metric units.") == [
        "The API is stable.",
        "The API is deprecated.",
        "Use metric units.",
    ]


def test_a_copula_with_nothing_after_it_is_no_shift() -> None:
    # "changed" at the end, or not followed by "to", is no "X changed to V".
    assert kept("Plan 2 changed.", "Plan 3 changed.", "Build 7 changed today.") == [
        "Plan 2 changed.",
        "Plan 3 changed.",
        "Build 7 changed today.",
    ]


def test_a_copula_with_punctuation_after_it_still_splits() -> None:
    assert kept("The budget is: $500", "The budget is: $700") == ["The budget is: $700"]


def test_an_update_takes_the_place_where_its_subject_was_first_seen() -> None:
    ledger = kept(
        "The budget is $500.",
        "The region is eu-west-1.",
        "The budget is now $700.",
        "The region is us-east-2.",
        "The budget is now $900.",
    )
    assert ledger == ["The budget is now $900.", "The region is us-east-2."]


def test_saying_an_old_value_again_makes_it_the_latest() -> None:
    assert kept("Budget: $500", "Budget: $700", "Budget: $500") == ["Budget: $500"]


def test_an_announced_update_goes_to_the_first_statement_of_its_subject() -> None:
    # Two tasks of one shape stand side by side; an announced change replaces the first, so
    # the ledger it leaves merges again into itself.
    ledger = merged(
        [],
        said(
            "TODO: Email alice@x.com about the invoice.",
            "TODO: Email bob@x.com about the invoice.",
            "TODO: Actually, email carol@x.com about the invoice.",
        ),
    )
    assert texts(ledger) == [
        "TODO: Actually, email carol@x.com about the invoice.",
        "TODO: Email bob@x.com about the invoice.",
    ]
    assert merged(ledger, ledger) == ledger


def test_a_ledger_merged_with_itself_or_read_back_is_unchanged() -> None:
    ledger = merged([], said(*SIXTEEN, "Budget: $500", "Budget: $700", "Keep 3 replicas."))
    assert merged(ledger, ledger) == ledger
    assert merged([], ledger) == ledger
    back = read_ledger(ledger_text(ledger))
    assert texts(back) == texts(ledger)
    assert merged(back, []) == back


def test_rules_never_replace_or_get_replaced() -> None:
    ledger = merged(
        [], said("Scripts must run on Python 3.11.", "Scripts must now run on Python 3.12.")
    )
    assert [s.rank for s in ledger] == [RULE, RULE]
    assert len(ledger) == 2


# --- one truth in the block ------------------------------------------------------------------


def test_the_heading_says_the_ledger_is_the_later_truth_in_first_said_order() -> None:
    assert "\n" not in LEDGER_HEADING
    assert "verbatim" in LEDGER_HEADING
    assert "in the order first said" in LEDGER_HEADING
    assert "where a summary disagrees" in LEDGER_HEADING
    assert "later truth" in LEDGER_HEADING


def test_a_block_under_an_older_heading_is_no_ledger() -> None:
    old = "What the user said in those turns, verbatim (later values replace earlier ones):\n- x"
    assert read_ledger(old) == []


# --- properties ------------------------------------------------------------------------------

NOUNS = ("budget", "region", "deadline", "owner", "quota", "branch", "timeout", "host")
LABELS = ("", "FACT: ", "GOAL STATE: ", "USER PREFERENCE: ", "Note: ")


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[str, str]]:
    """A session as (key, sentence), a key being what the sentence is about: new values of a
    few subjects, each under a label of its own, and rules and tasks, which all differ."""
    subjects = draw(st.lists(st.sampled_from(NOUNS), min_size=1, max_size=6, unique=True))
    labels = {noun: draw(st.sampled_from(LABELS)) for noun in subjects}
    events = st.one_of(
        st.tuples(st.sampled_from(subjects), st.integers(0, 999)),
        st.tuples(st.sampled_from(("rule", "task")), st.integers(1, 65535)),
    )
    session = []
    for subject, value in draw(st.lists(events, max_size=24)):
        if subject == "rule":
            session.append((f"rule {value}", f"Never open port {value}."))
        elif subject == "task":
            session.append((f"task {value}", f"TODO: Email ops-{value}@x.com about the invoice."))
        else:
            session.append((subject, f"{labels[subject]}The {subject} is now {value}."))
    return session


@given(sessions())
def test_each_subject_keeps_its_latest_statement_where_it_was_first_said(
    session: list[tuple[str, str]],
) -> None:
    latest: dict[str, str] = {}
    for key, sentence in session:
        latest[key] = sentence  # a dict keeps the order keys were first set
    ledger = merged([], said(*(sentence for _, sentence in session)))
    assert texts(ledger) == list(latest.values())
    assert merged(ledger, ledger) == ledger


VOCABULARY = (
    *("FACT:", "TODO:", "Status:", "Update:", "Budget:"),
    *("The", "budget", "database", "host", "is", "are", "was", "changed", "to", "has", "been"),
    *("now", "instead", "actually", "here", "that", "never", "email", "about", "of", "in"),
    *("$500", "$700", "PAY-1", "PAY-2", "Postgres", "MySQL", "Alice", "Bob", "src/a.py"),
    *("15", "1-2", "5", '"quoted words"', "it's", "'x'", "?", "."),
)


SENTENCES = st.lists(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8), max_size=20)


@given(SENTENCES, st.integers(min_value=0))
def test_merging_any_ledger_again_changes_nothing(sentences: list[list[str]], cut: int) -> None:
    everything = statements_of([user("\n".join(" ".join(s) for s in sentences))])
    ledger = merged([], everything)
    assert merged(ledger, ledger) == ledger
    assert merged([], ledger) == ledger
    assert texts(read_ledger(ledger_text(ledger))) == texts(ledger)
    # A ledger carried from one compaction to the next: merging in two steps is merging once.
    cut %= len(everything) + 1
    assert merged(merged([], everything[:cut]), everything[cut:]) == ledger
