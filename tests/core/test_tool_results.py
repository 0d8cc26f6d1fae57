"""Trimming an oversized tool result, clearing old ones."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.messages import text
from proxy.core.tool_results import (
    MAX_KEPT_CHARS,
    MAX_KEPT_NAMES,
    clear,
    is_cleared,
    is_tool_result,
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


def test_json_array_keeps_first_items_and_says_how_many() -> None:
    items = [{"id": i, "title": f"result number {i}"} for i in range(500)]
    content = trim(
        tool_result("c1", json.dumps(items)), max_tokens=200, count=count, tool_name=None
    )["content"]
    shown, note = content.split("\n", 1)
    kept = json.loads(shown)
    assert kept == items[: len(kept)]
    assert 0 < len(kept) < 500
    assert note.startswith(f"[showing {len(kept)} of 500 items")


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
    note_allowance = 130  # the note itself, and rounding of the character estimate
    assert count(content) <= budget + note_allowance


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
