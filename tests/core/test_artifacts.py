"""The artifact trail: what removed turns mentioned, its budget, its text, read back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.artifacts import (
    TRAIL_HEADING,
    cost,
    identifiers,
    merged,
    names_of,
    read_trail,
    selected,
    trail_text,
    with_trail,
    without_trail,
)
from proxy.core.statements import LEDGER_HEADING, Statement, with_ledger, without_ledger
from proxy.core.summary import marker, summary_text
from proxy.core.tool_results import NAMES_SCANNED_CHARS, clear
from tests.builders import assistant, assistant_calls, function_result, tool_result, user

CHECKSUM = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def words(text: str) -> int:
    return len(text.split())


def test_a_tool_result_adds_the_names_it_mentioned_first_seen_first() -> None:
    result = tool_result("c1", f"build 7f3a9c2e41 ok\nartifact {CHECKSUM}\nsee src/app/main.py")
    assert names_of(result) == ("7f3a9c2e41", CHECKSUM, "src/app/main.py")
    assert names_of(function_result("lookup", "order 88231 shipped")) == ("order 88231",)
    assert names_of(tool_result("c1", "nothing specific here")) == ()


def test_error_codes_are_names_too() -> None:
    log = "npm ERR! code ERR_MODULE_NOT_FOUND\nprocess exited: exit code 137 (SIGKILL), HTTP 503"
    assert names_of(tool_result("c1", log)) == (
        "ERR_MODULE_NOT_FOUND",
        "exit code 137",
        "SIGKILL",
        "HTTP 503",
    )
    assert names_of(tool_result("c2", "error[E0425]: TypeError at ENOENT")) == (
        "E0425",
        "TypeError",
        "ENOENT",
    )


def test_a_cleared_result_adds_what_its_placeholder_kept_which_is_what_it_would_add() -> None:
    result = tool_result("c1", f"build 7f3a9c2e41 ok\nartifact {CHECKSUM} " + "word " * 900)
    placeholder = clear(result, "run_build", 900)
    assert names_of(placeholder) == names_of(result) == ("7f3a9c2e41", CHECKSUM)


def test_a_name_cut_in_two_is_no_name() -> None:
    # Where a result was cut to head and tail, and where the scan for names stops.
    cut = "\n\n[... 40 tokens (300 characters) cut from the middle of this result ...]\n\n"
    trimmed = tool_result("c1", f"build 7f3a9c2e41 ok, checksum 9f86d08{cut}1884c7d at ABC-9")
    assert names_of(trimmed) == ("7f3a9c2e41", "ABC-9")
    long = "see PAY-7 " + "x" * (NAMES_SCANNED_CHARS - 16) + " ABC-123456"
    assert long[NAMES_SCANNED_CHARS - 5 : NAMES_SCANNED_CHARS] == "ABC-1"
    assert names_of(tool_result("c1", long)) == ("PAY-7",)


def test_an_assistant_turn_adds_the_names_in_its_text_and_its_calls_arguments() -> None:
    call = assistant_calls("c1", name="read_file", arguments={"path": "src/db/schema.sql"})
    assert names_of(call) == ("src/db/schema.sql",)
    said = {**call, "content": "Reading v4.19.2 first."}
    assert names_of(said) == ("v4.19.2", "src/db/schema.sql")
    assert names_of(assistant("Fixed https://ci.example.com/run/42.")) == (
        "https://ci.example.com/run/42",
    )


def test_the_users_words_are_the_ledgers_not_the_trails() -> None:
    assert names_of(user("Deploy v4.19.2 from src/app/main.py")) == ()


def test_merged_lists_each_name_once_where_it_was_mentioned_last() -> None:
    assert merged(["c", "a"], ["a", "b", "c"]) == ["c", "a", "b"]
    assert merged([], ["a", "b"]) == ["a", "b"]


def test_selected_keeps_the_newest_that_fit_and_skips_what_does_not() -> None:
    trail = ["new-1.py", "a b c d e f g h", "old-1.py", "old-2.py"]
    heading = words(TRAIL_HEADING) + 2
    assert selected(trail, heading + 3 * (1 + 2), words) == ["new-1.py", "old-1.py", "old-2.py"]
    assert selected(trail, heading + 3, words) == ["new-1.py"]
    assert selected(trail, heading, words) == []
    assert selected(trail, 0, words) == []


def test_cost_is_what_selected_budgets() -> None:
    trail = ["a.py", "b.py"]
    assert cost(trail, words) == words(TRAIL_HEADING) + 2 + 2 * (1 + 2)
    assert selected(trail, cost(trail, words), words) == trail
    assert cost([], words) == 0


def test_the_trail_is_one_heading_line_and_one_line_per_name() -> None:
    text = trail_text(["src/a.py", "order 88231"])
    assert text == f"{TRAIL_HEADING}\n- src/a.py\n- order 88231"
    assert "\n" not in TRAIL_HEADING
    assert read_trail(text) == ["src/a.py", "order 88231"]
    assert read_trail(text + "\n\n- not a name") == ["src/a.py", "order 88231"]
    assert trail_text([]) == ""
    assert read_trail("no trail here") == []


def test_the_trail_follows_the_notes_first_paragraph_and_reads_back_exactly() -> None:
    summary = summary_text("- none", condensed=12, tools=["grep"])
    for note in (summary, marker(3), marker(3, summary)):
        block = with_trail(note, ["src/a.py", CHECKSUM])
        assert block.split("\n\n")[1].startswith(TRAIL_HEADING)
        assert without_trail(block) == (note, ["src/a.py", CHECKSUM])
    assert with_trail(summary, []) == summary
    assert without_trail(summary) == (summary, [])


def test_the_block_reads_back_whichever_section_is_taken_out_first() -> None:
    note = summary_text("- none", condensed=12, tools=[])
    said = [Statement("Never open port 22.", 0)]
    trail = ["src/a.py", "7f3a9c2e41"]
    block = with_ledger(with_trail(note, trail), said)
    header, ledger, listed, rest = block.split("\n\n", 3)
    assert (ledger.split("\n")[0], listed.split("\n")[0]) == (LEDGER_HEADING, TRAIL_HEADING)
    # The ledger first, then the trail ...
    without, statements = without_ledger(block)
    assert statements == said
    assert without_trail(without) == (note, trail)
    # ... or the trail first, then the ledger.
    without, names = without_trail(block)
    assert names == trail
    assert without_ledger(without) == (note, said)
    # Written in either order, the layout is the same.
    assert with_trail(with_ledger(note, said), trail) == block
    assert (header, rest) == tuple(note.split("\n\n", 1))


def test_a_block_with_a_ledger_and_no_trail_has_no_trail_to_take_out() -> None:
    note = with_ledger(marker(4), [Statement("Never open port 22.", 0)])
    assert without_trail(note) == (note, [])


# Properties ----------------------------------------------------------------------------------

names = st.text(
    st.characters(codec="utf-8", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    min_size=1,
    max_size=30,
).filter(lambda name: name == name.strip())
trails = st.lists(names, max_size=12, unique=True)
notes = st.sampled_from(
    [
        marker(7),
        marker(7, summary_text("- a\n\n- b", condensed=3, tools=[])),
        summary_text("## Goal\n- ship it", condensed=9, tools=["grep"]),
        with_ledger(marker(2), [Statement("Budget: $500", 1)]),
    ]
)


@given(notes, trails)
def test_the_trail_reads_back_exactly(note: str, trail: list[str]) -> None:
    block = with_trail(note, trail)
    assert without_trail(block) == (note, trail)
    assert read_trail(block) == trail
    # Rewriting what was read back gives the same block: compacting our own output again
    # leaves the trail unchanged.
    assert with_trail(*without_trail(block)) == block


@given(trails, trails, trails)
def test_merging_is_deduplicated_newest_first_and_idempotent(
    newest: list[str], newer: list[str], older: list[str]
) -> None:
    once = merged(newest, merged(newer, older))
    assert len(once) == len(set(once))
    assert set(once) == {*newest, *newer, *older}
    assert once[: len(newest)] == newest
    assert merged(once, once) == once
    assert merged([*newest, *newer], older) == once


@given(trails, st.integers(min_value=0, max_value=200))
def test_selection_fits_its_budget_keeps_the_order_and_is_stable(
    trail: list[str], budget: int
) -> None:
    def count(text: str) -> int:
        return len(text) // 3 + 1

    chosen = selected(trail, budget, count)
    assert cost(chosen, count) <= budget or not chosen
    assert chosen == [name for name in trail if name in chosen]
    assert selected(chosen, budget, count) == chosen
    assert selected(chosen, cost(chosen, count), count) == chosen


def test_a_short_budget_keeps_ids_before_file_paths_in_trail_order() -> None:
    # Newest first: a later search named many source files, an early result one build id.
    trail = ["src/api/a.py", "tests/test_b.py", "https://ci.example.com/run/7", "build-7f3a9c21"]
    room = words(TRAIL_HEADING) + 2 + 3 * (1 + 2)  # the heading and three names
    assert selected(trail, room, words) == [
        "src/api/a.py",
        "https://ci.example.com/run/7",
        "build-7f3a9c21",
    ]
    assert selected(trail, cost(trail, words), words) == trail


def test_a_path_a_result_led_with_outranks_the_paths_it_listed_after() -> None:
    trail = ["src/api/a.py", "tests/test_b.py", "/var/lib/app/releases/2026-11-03"]
    room = words(TRAIL_HEADING) + 2 + 2 * (1 + 2)  # the heading and two names
    leading = {"src/api/a.py", "/var/lib/app/releases/2026-11-03"}
    assert selected(trail, room, words, leading) == [
        "src/api/a.py",
        "/var/lib/app/releases/2026-11-03",
    ]


def test_a_path_that_names_a_version_a_date_or_a_build_ranks_as_an_id() -> None:
    named = [
        "/var/lib/app/releases/2026-11-03",
        "dist/v4.19.2/app.tar.gz",
        "builds/7f3a9c21/log.txt",
        "logs/2026-11-03.log",
    ]
    trail = ["src/api/a.py", "tests/test_b.py", *named]
    room = words(TRAIL_HEADING) + 2 + 4 * (1 + 2)  # the heading and four names
    assert selected(trail, room, words, {"src/api/a.py"}) == named
    assert identifiers(trail) == named
    # A file name with a digit in it names no version.
    assert identifiers(["src/reports/route_3.py", "cafe/readme.md"]) == []
