"""Trimming an oversized tool result, clearing old ones."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.ledger import specifics_at
from proxy.core.messages import text
from proxy.core.tool_results import (
    _ERROR_CODE,
    _KEPT_KINDS,
    MAX_KEPT_CHARS,
    MAX_KEPT_NAMES,
    NAMES_SCANNED_CHARS,
    _cut,
    clear,
    is_cleared,
    is_tool_result,
    is_trimmed,
    kept_names,
    names_kept,
    trim,
)
from tests.builders import function_result, tool_result, user


def count(value: str) -> int:
    """About four characters a token, like English under tiktoken."""
    return len(value) // 4 + 1


def lines(n: int) -> str:
    return "\n".join(f"line {i:05d} of the log, with some words" for i in range(n))


def test_text_keeps_head_and_tail_and_says_what_was_cut() -> None:
    body = lines(2000)
    trimmed = trim(tool_result("c1", body), max_tokens=500, count=count, tool_name="read_file")
    content = trimmed["content"]
    assert content.startswith("line 00000")
    assert content.rstrip().endswith("line 01999 of the log, with some words")
    assert "cut from the middle of this read_file result" in content
    assert "narrower query" in content
    assert 400 < count(content) < 650
    assert trimmed["tool_call_id"] == "c1"


def test_cut_falls_on_line_starts() -> None:
    content = trim(tool_result("c1", lines(2000)), max_tokens=300, count=count, tool_name=None)[
        "content"
    ]
    head, _, tail = content.partition("\n\n[...")
    assert head.endswith(("words\n", "words"))
    assert tail.split("]\n\n", 1)[1].startswith("line ")


SHOWING = re.compile(r"showing ([\d,]+) of ([\d,]+) items")


def test_json_array_keeps_first_and_last_items_and_says_how_many() -> None:
    items = [{"id": i, "title": f"result number {i}"} for i in range(4000)]
    content = trim(
        tool_result("c1", json.dumps(items)), max_tokens=600, count=count, tool_name=None
    )["content"]
    shown, note = content.split("\n", 1)
    kept = json.loads(shown)
    head = next(i for i, item in enumerate(kept) if item != items[i])
    tail = len(kept) - head
    assert kept == items[:head] + items[-tail:]
    assert 0 < tail < head < 2 * tail  # about 60 % to the head, 40 % to the tail
    assert note == (
        f"[showing {len(kept)} of 4000 items (the first {head} and the last {tail}): the full "
        "result was too large for the context window. Ask for the rest with a narrower query "
        "(a filter, a page, a range) instead of assuming what the other items contain.]"
    )
    match = SHOWING.search(content)
    assert match is not None
    assert (match.group(1), match.group(2)) == (str(len(kept)), "4000")
    assert is_trimmed(tool_result("c1", content))
    assert 450 < count(content) <= 600


def test_json_array_with_room_for_one_item_shows_the_first_only() -> None:
    items = [{"blob": "x" * 400, "n": i} for i in range(50)]
    content = trim(
        tool_result("c1", json.dumps(items)), max_tokens=250, count=count, tool_name=None
    )["content"]
    shown, note = content.split("\n", 1)
    assert json.loads(shown) == items[:1]
    assert note.startswith("[showing 1 of 50 items: the full result was too large")


def test_json_array_whose_last_item_is_too_big_gives_its_room_to_the_first_ones() -> None:
    items: list[object] = [{"id": i} for i in range(400)]
    items.append({"blob": "x" * 5000})
    content = trim(
        tool_result("c1", json.dumps(items)), max_tokens=400, count=count, tool_name=None
    )["content"]
    shown, note = content.split("\n", 1)
    kept = json.loads(shown)
    assert kept == items[: len(kept)]
    assert len(kept) == 300 // 4  # the whole room at 4 tokens an item, not the head's share
    assert note.startswith(f"[showing {len(kept)} of 401 items: ")


def test_indented_json_array_whose_items_all_fit_loses_only_its_layout() -> None:
    items = [{"id": i, "title": f"result number {i}"} for i in range(12)]
    body = json.dumps(items, indent=24)
    assert count(body) > 300
    content = trim(tool_result("c1", body), max_tokens=300, count=count, tool_name=None)["content"]
    assert json.loads(content) == items  # every item, no "showing N of N" note
    assert count(content) < count(body)


def test_json_array_whose_first_item_is_too_big_is_cut_as_text() -> None:
    body = json.dumps([{"blob": "x" * 10_000}, 1])
    content = trim(tool_result("c1", body), max_tokens=100, count=count, tool_name=None)["content"]
    assert "cut from the middle" in content


def test_json_that_is_not_an_array_is_cut_as_text() -> None:
    for body in ("[not json" + "x" * 5000, json.dumps({"a": "x" * 5000})):
        content = trim(tool_result("c", body), max_tokens=50, count=count, tool_name=None)[
            "content"
        ]
        assert "cut from the middle" in content


def test_text_parts_are_read_as_text() -> None:
    message = {
        "role": "tool",
        "tool_call_id": "c",
        "content": [{"type": "text", "text": lines(900)}],
    }
    content = trim(message, max_tokens=100, count=count, tool_name=None)["content"]
    assert isinstance(content, str)
    assert "cut from the middle" in content


def test_clear_names_tool_and_size() -> None:
    cleared = clear(tool_result("c9", "long output"), "run_tests", 1234)
    assert cleared["content"] == (
        "[tool result cleared to save context: run_tests returned 1234 tokens here; "
        "call it again if needed]"
    )
    assert cleared["tool_call_id"] == "c9"
    assert is_cleared(cleared)
    assert not is_cleared(tool_result("c9", "long output"))


def test_clear_legacy_function_result_uses_its_name() -> None:
    assert "lookup returned 7 tokens" in clear(function_result("lookup"), None, 7)["content"]
    assert "tool returned" in clear(tool_result("x"), None, 1)["content"]


def test_tool_results_are_recognised() -> None:
    assert is_tool_result(tool_result("a"))
    assert is_tool_result(function_result())
    assert not is_tool_result(user())


json_arrays = st.lists(st.integers() | st.text(max_size=50), max_size=300).map(json.dumps)


@given(st.text(max_size=20_000) | json_arrays, st.integers(min_value=10, max_value=2000))
def test_trim_bounds_the_size_and_keeps_the_ends(body: str, budget: int) -> None:
    content = text(trim(tool_result("c", body), max_tokens=budget, count=count, tool_name=None))
    # The note itself and rounding of the character estimate, and the names the note lists
    # past a budget too small to give their room up.
    listed = MENTIONED.search(content)
    note_allowance = 130 + (count(listed.group()) if listed else 0)
    assert count(content) <= budget + note_allowance


MENTIONED = re.compile(r"; it mentioned .*?(?=\. (?:If|Ask) )")
BUILD_LOG = "\n".join(
    [
        "Build finished: build-7f3a9c21 (3 artifacts uploaded).",
        *(f"step {i:03d} passed in {i % 7} seconds" for i in range(120)),
        "pushed sha256:" + "4e5f" * 16 + " to https://registry.example.com/app",
        *(f"cleanup {i:03d} done" for i in range(40)),
    ]
)


def test_a_cut_lists_the_names_it_took_away_inside_its_note() -> None:
    message = tool_result("c1", BUILD_LOG)
    cut = trim(message, max_tokens=64, count=count, tool_name="build")
    content = text(cut)
    assert "build-7f3a9c21" not in content.partition("\n\n[")[0]  # the head kept too little
    note = content[content.index("\n\n[") : content.index("]\n\n") + 1]
    digest = "sha256:" + "4e5f" * 16
    assert (
        f"context window; it mentioned build-7f3a9c21, {digest}, "
        "https://registry.example.com/app. If the missing part" in note
    )
    assert is_trimmed(cut)
    assert trim(message, max_tokens=64, count=count, tool_name="build") == cut


def test_the_names_a_cut_lists_are_found_again_in_the_cut_text() -> None:
    # A later artifact trail reads the names from the cut message's text: it must find the
    # ones only the note still holds, wherever the cut falls (mid-line, at a name's edge).
    one_line = BUILD_LOG.replace("\n", " ")
    for body in (BUILD_LOG, one_line):
        names = kept_names(body)
        assert len(names) == 3
        for budget in range(40, 600, 7):
            content = text(
                trim(tool_result("c", body), max_tokens=budget, count=count, tool_name=None)
            )
            assert kept_names(content)[: len(names)] == names, (budget, content)


def test_a_cut_lists_only_the_names_its_kept_part_does_not_show() -> None:
    content = text(trim(tool_result("c1", BUILD_LOG), max_tokens=500, count=count, tool_name=None))
    head, note, _ = re.split(r"\n\n(\[\.\.\. .*?\])\n\n", content)
    assert "build-7f3a9c21" in head
    assert f"; it mentioned sha256:{'4e5f' * 16}, https://registry.example.com/app." in note
    whole = text(trim(tool_result("c1", BUILD_LOG), max_tokens=1400, count=count, tool_name=None))
    assert "it mentioned" not in whole  # every name is in the head or the tail


def test_a_cut_uses_the_names_its_caller_found() -> None:
    message = tool_result("c1", lines(2000))
    given_names = text(
        trim(message, max_tokens=200, count=count, tool_name=None, names=["job-20931"])
    )
    assert "context window; it mentioned job-20931. If" in given_names
    none = text(
        trim(tool_result("c1", BUILD_LOG), max_tokens=64, count=count, tool_name=None, names=[])
    )
    assert "it mentioned" not in none


def test_the_names_a_note_lists_take_their_room_from_the_kept_part() -> None:
    message = tool_result("c1", BUILD_LOG.replace("build-7f3a9c21", "build-" + "7f3a9c21" * 8))
    listing = text(trim(message, max_tokens=300, count=count, tool_name=None))
    plain = text(trim(message, max_tokens=300, count=count, tool_name=None, names=[]))
    assert "it mentioned" in listing
    assert abs(count(listing) - count(plain)) < 15  # the cut still lands near its size
    assert len(listing.partition("\n\n[")[0]) < len(plain.partition("\n\n[")[0])
    # A budget too small to give the names' room up keeps a few tokens of text all the same.
    small = text(trim(message, max_tokens=150, count=count, tool_name=None))
    assert small.startswith("Build finished")


def test_a_json_cut_lists_the_names_of_the_items_it_took_away() -> None:
    items = [{"job": f"job-{20000 + i}", "state": "done " * 30} for i in range(300)]
    content = text(
        trim(tool_result("c1", json.dumps(items)), max_tokens=230, count=count, tool_name=None)
    )
    shown, note = content.split("\n", 1)
    assert [item["job"] for item in json.loads(shown)] == ["job-20000", "job-20299"]
    listed = "job-20001, job-20002, job-20003, job-20004, job-20005"
    assert (
        "(the first 1 and the last 1): the full result was too large for the context window; "
        f"it mentioned {listed}. Ask" in note
    )
    assert kept_names(content) == ["job-20000", "job-20299", *listed.split(", ")[:4]]


def test_a_cleared_result_keeps_a_bounded_list_of_the_names_it_mentioned() -> None:
    names = [f"src/pkg/module_{i}.py" for i in range(20)]
    body = " ".join([*names, *names, "v4.19.2", "x" * 300])
    kept = kept_names(body)
    assert kept == names[:MAX_KEPT_NAMES]
    assert sum(map(len, kept)) <= MAX_KEPT_CHARS
    long = [f"/srv/{'d' * 90}/{i}.txt" for i in range(4)]
    assert kept_names(" ".join(long)) == long[:2]  # a third would pass the character bound
    placeholder = clear(tool_result("c1", body), "grep", 900)
    assert "it mentioned src/pkg/module_0.py, " in placeholder["content"]
    assert names_kept(placeholder).startswith("src/pkg/module_0.py, src/pkg/module_1.py")
    assert not names_kept(placeholder).endswith("]")
    assert names_kept(clear(tool_result("c1", "plain words"), "grep", 9)) == ""
    assert kept_names("nothing specific here") == []
    assert "it mentioned" not in clear(tool_result("c1", "plain words"), "grep", 9)["content"]


def _kept_scanning_whole(body: str) -> list[str]:
    """`kept_names` as it was written first: the whole text scanned, then the names kept."""
    scanned = body[:NAMES_SCANNED_CHARS]
    found = [(start, fact.text) for start, fact in specifics_at(scanned, _KEPT_KINDS)]
    found += [(match.start(), match.group()) for match in _ERROR_CODE.finditer(scanned)]
    found.sort(key=lambda item: item[0])
    kept: list[str] = []
    used = 0
    for start, name in found:
        if name in kept or used + len(name) > MAX_KEPT_CHARS or _cut(body, start, name):
            continue
        kept.append(name)
        used += len(name)
        if len(kept) == MAX_KEPT_NAMES:
            break
    return kept


_NAMED_LINES = st.lists(
    st.sampled_from(
        [
            "plain words here",
            "see https://x.io/a/b(c) and src/app/main.py",
            "ENOENT: no such file /etc/hosts",
            "ticket OPS-1234 reopened by bob@example.com",
            "order #4821 shipped, sha 3f2a9c1d0e",
            "v2.10.3-rc.1 on 10.0.0.12:8080 at 2025-05-01T12:00:00Z",
            "job-20001 ran C:\\temp\\x.log then exit code 3",
            "req_8f3a2b1c9d handled; TypeError raised",
            "a" * 300,
            "",
            '{"path": "src/x.py", "sha": "deadbeef12"}',
            'url "https://h.io/x" HTTP 404 "E1234"',
        ]
    ),
    max_size=60,
)


@given(_NAMED_LINES, st.sampled_from(["\n", "\r\n", " ", "\n\n", '", "', '":"', '"']))
def test_names_found_piece_by_piece_are_those_of_the_whole_text(
    lines: list[str], separator: str
) -> None:
    body = separator.join(lines)
    assert kept_names(body) == _kept_scanning_whole(body)


def test_a_long_result_is_read_only_as_far_as_its_names_need() -> None:
    # Six names in the first lines: kept without reading the rest (its name never counts).
    head = "\n".join(f"read src/pkg/module_{i}.py" for i in range(MAX_KEPT_NAMES))
    body = head + "\n" + "filler line\n" * 400 + "then src/late/other.py"
    assert kept_names(body) == [f"src/pkg/module_{i}.py" for i in range(MAX_KEPT_NAMES)]
    # Fewer names than that: every piece is read, the last name in the last one.
    sparse = "read src/a.py\n" + "filler line\n" * 2000 + "then src/late/other.py"
    assert kept_names(sparse) == ["src/a.py", "src/late/other.py"]
    assert kept_names(sparse) == _kept_scanning_whole(sparse)


def test_a_one_line_json_result_is_read_in_pieces_too() -> None:
    rows = [{"path": f"src/m_{i}.py", "sha": f"{i:08x}ab"} for i in range(400)]
    body = json.dumps(rows)
    assert "\n" not in body
    assert kept_names(body) == _kept_scanning_whole(body)
    assert kept_names(body)[:2] == ["src/m_0.py", "00000000ab"]
