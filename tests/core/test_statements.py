"""The verbatim ledger of the user's words: statements, ranks, updates, budget, its text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.statements import (
    LEDGER_HEADING,
    OTHER,
    RULE,
    SPECIFIC,
    TASK,
    Statement,
    cost,
    ledger_text,
    merged,
    read_ledger,
    selected,
    statements_of,
    with_ledger,
    without_ledger,
)
from tests.builders import assistant, developer, image_user, system, tool_result, user


def words(text: str) -> int:
    return len(text.split())


def texts(statements: list[Statement]) -> list[str]:
    return [s.text for s in statements]


def test_statements_are_verbatim_sentences_of_user_and_instruction_messages() -> None:
    messages = [
        user("Deploy to eu-west-1.  Never open port 22!\n- Budget: $500\nthanks"),
        assistant("I will never do that."),
        tool_result("c1", "You must not read this."),
        developer("Answer in French."),
        image_user("What is in https://x.io/a.png?"),
    ]
    found = statements_of(messages)
    assert texts(found) == [
        "Deploy to eu-west-1.",
        "Never open port 22!",
        "Budget: $500",
        "thanks",
        "Answer in French.",
        "What is in https://x.io/a.png?",
    ]
    sources = "\n".join(str(m.get("content")) for m in messages)
    assert all(s.text in sources for s in found)


def test_ranks_rules_then_specifics_then_the_task_then_the_rest() -> None:
    task = user("Build the parser. Make it small.")
    found = statements_of(
        [task, user("Do not use regex. I prefer tabs. Ask Priya first. Fine. ok then")],
        task=task,
    )
    ranks = {s.text: s.rank for s in found}
    assert ranks == {
        "Build the parser.": TASK,
        "Make it small.": TASK,
        "Do not use regex.": RULE,
        "I prefer tabs.": SPECIFIC,
        "Ask Priya first.": SPECIFIC,
        "Fine.": OTHER,
        "ok then": OTHER,
    }


def test_punctuation_alone_is_no_statement() -> None:
    assert statements_of([user("---\n```\n...")]) == []


def test_the_same_sentence_twice_is_one_statement() -> None:
    said = statements_of([user("Next step."), user("next step"), user("Next step.")])
    assert texts(merged([], said)) == ["Next step."]


def test_a_later_value_replaces_the_earlier_in_its_place() -> None:
    said = statements_of(
        [
            user("The budget is $500."),
            user("My timezone is America/Los_Angeles."),
            user("Update: the budget is now $700."),
            user("My timezone is Europe/Berlin."),
        ]
    )
    assert texts(merged([], said)) == [
        "Update: the budget is now $700.",
        "My timezone is Europe/Berlin.",
    ]


def test_rules_add_up_instead_of_replacing_each_other() -> None:
    said = statements_of([user("Never open port 22."), user("Never open port 3389.")])
    assert texts(merged([], said)) == ["Never open port 22.", "Never open port 3389."]


def test_earlier_statements_come_first() -> None:
    earlier = [Statement("The region is eu-west-1.", SPECIFIC)]
    later = statements_of([user("Go on."), user("The region is us-east-2.")])
    assert texts(merged(earlier, later)) == ["The region is us-east-2.", "Go on."]


def test_selection_keeps_priority_within_budget_and_first_seen_order() -> None:
    found = [
        Statement("chatter one two three", OTHER),
        Statement("Never push to main.", RULE),
        Statement("the newest chatter here", OTHER),
        Statement("Use ticket ABC-1.", SPECIFIC),
    ]
    budget = words(LEDGER_HEADING) + 2 + (4 + 2) + (4 + 2) + (3 + 2)
    kept = selected(found, budget, words)
    # The rule and the specific first, then the newest chatter; listed in first-seen order.
    assert texts(kept) == ["Never push to main.", "the newest chatter here", "Use ticket ABC-1."]
    assert cost(kept, words) <= budget
    assert selected(found, 3, words) == []


def test_a_long_statement_that_does_not_fit_leaves_room_for_shorter_ones() -> None:
    found = [Statement("Never " + "x " * 50, RULE), Statement("Never y.", RULE)]
    kept = selected(found, words(LEDGER_HEADING) + 2 + 4, words)
    assert texts(kept) == ["Never y."]


def test_the_ledger_text_reads_back_exactly() -> None:
    kept = [Statement("- starts with a dash", OTHER), Statement("Never open port 22.", RULE)]
    text = ledger_text(kept)
    assert text.startswith(LEDGER_HEADING)
    assert read_ledger(text) == kept
    assert ledger_text([]) == ""
    assert cost([], words) == 0
    assert read_ledger("no ledger here") == []


def test_a_note_with_its_ledger_comes_apart_again() -> None:
    kept = [Statement("Never open port 22.", RULE)]
    for note in ("[3 earlier messages omitted]", "[head]\n\nsummary\n\nTools: a."):
        block = with_ledger(note, kept)
        assert block.split("\n\n")[1].startswith(LEDGER_HEADING)
        assert without_ledger(block) == (note, kept)
    assert without_ledger("[3 earlier messages omitted]") == ("[3 earlier messages omitted]", [])
    assert with_ledger("[x]\n\nrest", []) == "[x]\n\nrest"


@given(st.lists(st.text(min_size=1, max_size=40), max_size=8))
def test_ledger_of_any_user_text_round_trips(lines: list[str]) -> None:
    said = merged([], statements_of([user("\n".join(lines))]))
    block = with_ledger("[1 earlier messages omitted]", said)
    note, back = without_ledger(block)
    assert note == "[1 earlier messages omitted]"
    assert texts(back) == texts(said)
    assert all(s.text in "\n".join(lines) for s in said)  # verbatim slices


def test_system_messages_after_the_head_count_as_instructions() -> None:
    assert texts(statements_of([system("Stay in plan mode.")])) == ["Stay in plan mode."]


def test_labels_handles_and_style_instructions_are_specifics() -> None:
    found = statements_of(
        [
            user("Goal: migrate the billing service."),
            user("Page the #pay-oncall channel when something breaks."),
            user("Use metric units."),
            user("Continue with the next module: read its source."),
        ]
    )
    assert [s.rank for s in found] == [SPECIFIC, SPECIFIC, SPECIFIC, OTHER]


def test_names_code_and_markets_use_are_specifics() -> None:
    # A tool-schema-heavy client's turns give the values the next call needs in such names:
    # ranked as chatter, they were the first the ledger gave up where schemas leave it
    # little room (6k, Responses: "Make a folder called quarterly_reports." went).
    found = statements_of(
        [
            user("Make a folder called quarterly_reports."),
            user("Rename getUser to fetchUser."),
            user("Add TSLA and AMD to my watchlist."),
            user("Flag it as urgent."),
            user("A first part of the work went well."),
        ]
    )
    assert [s.rank for s in found] == [SPECIFIC, SPECIFIC, SPECIFIC, OTHER, OTHER]


def test_a_later_status_replaces_the_earlier_whatever_its_words() -> None:
    # A label that names one state: there is one status at a time.
    said = statements_of(
        [
            user("Status: the schema migration is done and the backfill is next."),
            user("Never skip the backfill."),
            user("Status: the backfill is done and the cutover is next."),
        ]
    )
    assert texts(merged([], said)) == [
        "Status: the backfill is done and the cutover is next.",
        "Never skip the backfill.",
    ]
