"""Recall ids, the `context_recall` tool, when it is offered, and what a recall returns."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.core.messages import Message
from proxy.core.recall import (
    TOOL,
    answer,
    argument_id,
    argument_query,
    excerpts,
    ids_in,
    is_ours,
    may_offer,
    named,
    recall_id,
    reference,
    tool,
    transcript,
    with_tool,
    without_tool,
)
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER, TOOLS

ID = re.compile(r"rc_[a-z2-7]{10}")
CHAT_TOOL = TOOLS["tools"][0]
RESPONSES_TOOL = {"type": "function", "name": "search", "parameters": {}}
MESSAGES_TOOL = {"name": "read_file", "description": "Read a file.", "input_schema": {}}


def count(text: str) -> int:
    return COUNTER.text(text)


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def recall_call(rid: str = "rc_abcdefghij", call_id: str = "r1") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": TOOL, "arguments": f'{{"id": "{rid}"}}'},
    }


# --- ids -------------------------------------------------------------------------------------


def test_an_id_is_rc_and_ten_base32_characters() -> None:
    rid = recall_id("tenant/session", [user("hi")])
    assert ID.fullmatch(rid), rid


def test_an_id_is_stable_for_the_same_scope_and_messages() -> None:
    messages = [assistant_calls("c1"), tool_result("c1", "out")]
    copied = [dict(m) for m in messages]
    assert recall_id("s", messages) == recall_id("s", copied)


def test_an_id_differs_for_another_scope() -> None:
    messages = [tool_result("c1", "out")]
    assert recall_id("tenant-a/s", messages) != recall_id("tenant-b/s", messages)


def test_an_id_differs_for_other_messages() -> None:
    one = recall_id("s", [tool_result("c1", "out")])
    assert one != recall_id("s", [tool_result("c1", "other")])
    assert one != recall_id("s", [tool_result("c1", "out"), user("more")])
    # Two messages are not their contents run together.
    assert recall_id("s", [user("a"), user("b")]) != recall_id("s", [user("b"), user("a")])


def test_reference_is_the_call_the_model_makes() -> None:
    assert reference("rc_abcdefghij") == 'context_recall(id="rc_abcdefghij")'


def test_ids_in_finds_every_named_id_in_order() -> None:
    first, second = recall_id("s", [user("a")]), recall_id("s", [user("b")])
    body = f"see {reference(first)} and then {reference(second)}."
    assert ids_in(body) == [first, second]


def test_ids_in_ignores_a_bare_id_and_text_without_the_tool() -> None:
    assert ids_in("rc_abcdefghij is mentioned but not named") == []
    assert ids_in('context_recall(id="rc_short")') == []
    assert ids_in("nothing here") == []


def test_named_is_true_only_when_a_message_names_an_id() -> None:
    placeholder = tool_result("c1", f"[cleared; {reference('rc_abcdefghij')} returns it]")
    assert named([user("hi"), placeholder])
    assert not named([user("hi"), assistant("the context_recall tool exists")])
    assert not named([])


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"tools": []},
        {**TOOLS, "tool_choice": "none"},
        {**TOOLS, "tool_choice": {"type": "function", "function": {"name": "read_file"}}},
        {**TOOLS, "tool_choice": {"type": "function", "name": "read_file"}},
        {**TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
    ],
)
def test_the_tool_is_not_offered_when_the_client_rules_it_out(body: dict[str, Any]) -> None:
    assert not may_offer(body)


@pytest.mark.parametrize("choice", ["auto", "required", None])
def test_the_tool_is_offered_when_the_model_may_choose(choice: str | None) -> None:
    body = dict(TOOLS) if choice is None else {**TOOLS, "tool_choice": choice}
    assert may_offer(body)


def test_with_tool_appends_the_chat_tool_last() -> None:
    body = {"model": "m", **TOOLS}
    offered = with_tool(body, responses=False)
    assert offered["tools"][:-1] == TOOLS["tools"]
    assert offered["tools"][-1] == tool(responses=False)
    assert offered["tools"][-1]["function"]["name"] == TOOL
    assert body == {"model": "m", **TOOLS}  # the client's body is not changed


def test_with_tool_appends_the_responses_tool_last() -> None:
    body = {"model": "m", "tools": [RESPONSES_TOOL]}
    offered = with_tool(body, responses=True)
    assert offered["tools"] == [RESPONSES_TOOL, tool(responses=True)]
    assert offered["tools"][-1]["name"] == TOOL
    assert "function" not in offered["tools"][-1]


@pytest.mark.parametrize("responses", [False, True])
def test_with_tool_adds_it_once(responses: bool) -> None:
    body = {"tools": [RESPONSES_TOOL if responses else CHAT_TOOL]}
    once = with_tool(body, responses=responses)
    assert with_tool(once, responses=responses) == once
    assert len(once["tools"]) == 2


def test_with_tool_on_a_body_without_tools_offers_it_alone() -> None:
    assert with_tool({"model": "m"}, responses=False)["tools"] == [tool(responses=False)]


@pytest.mark.parametrize("responses", [False, True])
def test_without_tool_takes_out_only_the_proxys_tool(responses: bool) -> None:
    client = RESPONSES_TOOL if responses else CHAT_TOOL
    body = with_tool({"model": "m", "tools": [client]}, responses=responses)
    assert without_tool(body) == {"model": "m", "tools": [client]}


def test_without_tool_on_a_body_without_tools_gives_an_empty_list() -> None:
    assert without_tool({"model": "m"}) == {"model": "m", "tools": []}


def test_a_malformed_entry_in_the_clients_tools_is_left_for_the_upstream_to_judge() -> None:
    # Not a tool object: the proxy neither mistakes it for its own nor drops it.
    body = {"tools": ["read_file", CHAT_TOOL]}
    offered = with_tool(body, responses=False)
    assert offered["tools"] == ["read_file", CHAT_TOOL, tool(responses=False)]
    assert without_tool(offered) == body


# --- reading calls ---------------------------------------------------------------------------


def test_is_ours_reads_both_shapes() -> None:
    assert is_ours(recall_call())
    assert is_ours({"type": "function_call", "name": TOOL, "call_id": "r1", "arguments": "{}"})
    assert not is_ours(assistant_calls("c1")["tool_calls"][0])
    assert not is_ours({"type": "function_call", "name": "search"})


def test_argument_id_reads_json() -> None:
    assert argument_id('{"id": "rc_abcdefghij"}') == "rc_abcdefghij"
    assert argument_id('{"id": "  rc_abcdefghij \\n"}') == "rc_abcdefghij"


def test_argument_id_reads_an_id_out_of_malformed_json() -> None:
    assert argument_id("{id: rc_abcdefg234}") == "rc_abcdefg234"
    assert argument_id('context_recall(id="rc_abcdefg234") please') == "rc_abcdefg234"


@pytest.mark.parametrize(
    "arguments", [None, 3, "{}", '{"id": 5}', "[1, 2]", '{"id": "rc_abcd', "{not json"]
)
def test_argument_id_is_none_when_no_id_is_named(arguments: object) -> None:
    assert argument_id(arguments) is None


def test_argument_query_reads_the_optional_query() -> None:
    assert argument_query('{"id": "rc_abcdefghij", "query": " DEPLOY_TOKEN "}') == "DEPLOY_TOKEN"
    assert argument_query('{"id": "rc_abcdefghij", "query": ""}') is None
    assert argument_query('{"id": "rc_abcdefghij"}') is None
    assert argument_query("{broken") is None


@pytest.mark.parametrize("arguments", [None, '["query"]', '{"id": "rc_abcdefghij", "query": 3}'])
def test_argument_query_is_none_when_the_arguments_give_no_text(arguments: object) -> None:
    assert argument_query(arguments) is None


# --- what a recall returns -------------------------------------------------------------------


def test_transcript_of_one_message_is_its_text() -> None:
    assert transcript([tool_result("c1", "line 1\nline 2")]) == "line 1\nline 2"


def test_transcript_of_several_gives_roles_and_calls() -> None:
    messages: list[Message] = [
        user("find it"),
        assistant_calls("c1", arguments={"q": "needle"}),
        tool_result("c1", "found at 42"),
    ]
    said = transcript(messages)
    assert said == (
        '[user]\nfind it\n\n[assistant]\n-> called search({"q": "needle"})\n\n[tool]\nfound at 42'
    )


def test_transcript_of_one_call_shows_the_call() -> None:
    said = transcript([assistant_calls("c1")])
    assert said == '[assistant]\n-> called search({"q": "x"})'


def test_transcript_keeps_text_before_calls_and_an_unnamed_role() -> None:
    calling = {**assistant_calls("c1"), "content": "let me look"}
    said = transcript([calling, {"content": "loose"}])
    assert said == '[assistant]\nlet me look\n-> called search({"q": "x"})\n\n[message]\nloose'


def test_answer_without_an_id_says_how_to_call() -> None:
    said = answer(None, None, max_tokens=100, count=count)
    assert 'context_recall(id="rc_...")' in said


def test_answer_for_an_unknown_id_says_so() -> None:
    said = answer("rc_abcdefghij", None, max_tokens=100, count=count)
    assert "No content is stored under the id 'rc_abcdefghij'" in said


def test_answer_for_an_expired_id_says_so() -> None:
    said = answer("rc_abcdefghij", [], max_tokens=100, count=count)
    assert said == "The content of rc_abcdefghij has expired from the proxy's archive."


def test_answer_under_the_cap_is_the_original() -> None:
    found = [tool_result("c1", words(100, "r"))]
    assert answer("rc_abcdefghij", found, max_tokens=100, count=count) == words(100, "r")


def test_answer_over_the_cap_is_cut_to_head_and_tail_with_a_note() -> None:
    body = " ".join(f"w{i}" for i in range(1000))
    said = answer("rc_abcdefghij", [tool_result("c1", body)], max_tokens=200, count=count)
    assert said.startswith("w0 w1 w2 ")
    assert said.endswith(" w998 w999")
    assert "tokens cut from the middle of the recalled content" in said
    assert "about 800 tokens cut" in said
    assert count(said) <= 200
    assert "w500 " not in said  # the middle went


def test_answer_cuts_a_transcript_too() -> None:
    found = [user("first " + words(500)), assistant("last " + words(500))]
    said = answer("rc_abcdefghij", found, max_tokens=150, count=count)
    assert said.startswith("[user]\nfirst")
    assert said.rstrip().endswith("w")
    assert "cut from the middle" in said
    assert count(said) <= 150


def test_answer_of_several_messages_under_the_cap_is_their_transcript() -> None:
    found = [system("be brief"), user("hi")]
    said = answer("rc_abcdefghij", found, max_tokens=100, count=count)
    assert said == transcript(found)


# --- a recall with a query -------------------------------------------------------------------


def config_lines(n: int, **values: str) -> str:
    """`n` lines of a config file, with `values` at the lines their keys name (`at_3="x"`)."""
    lines = [f"option_{i} = default" for i in range(n)]
    for key, value in values.items():
        lines[int(key.removeprefix("at_"))] = value
    return "\n".join(lines)


def test_a_query_returns_the_lines_that_mention_it_with_two_either_side() -> None:
    found = [tool_result("c1", config_lines(20, at_8="PORT=8080"))]
    said = answer("rc_abcdefghij", found, max_tokens=500, count=count, query="port")
    assert said == (
        "[The parts of the recalled content (1 messages) that mention 'port':]\n\n"
        "[tool]\n...\noption_6 = default\noption_7 = default\nPORT=8080\n"
        "option_9 = default\noption_10 = default\n..."
    )


def test_a_query_marks_the_lines_left_out_between_two_mentions() -> None:
    found = [tool_result("c1", config_lines(30, at_2="PORT=8080", at_20="ADMIN_PORT=9090"))]
    said = answer("rc_abcdefghij", found, max_tokens=500, count=count, query="PORT")
    shown = said.split("\n\n", 1)[1].splitlines()
    assert shown == [
        "[tool]",
        *(f"option_{i} = default" for i in (0, 1)),
        "PORT=8080",
        *(f"option_{i} = default" for i in (3, 4)),
        "...",
        *(f"option_{i} = default" for i in (18, 19)),
        "ADMIN_PORT=9090",
        *(f"option_{i} = default" for i in (21, 22)),
        "...",  # and the lines after them
    ]


def test_a_query_matches_any_of_its_words_ignoring_case() -> None:
    found = [user("the token is TOKEN_A"), assistant("the region is eu-west")]
    said = answer("rc_abcdefghij", found, max_tokens=500, count=count, query="Region token")
    assert "[user]\nthe token is TOKEN_A" in said
    assert "[assistant]\nthe region is eu-west" in said


def test_a_query_keeps_the_newest_mentions_when_they_do_not_all_fit() -> None:
    # A later value replaces an earlier one: the newest are the ones worth the room.
    found = [
        tool_result("c1", "TOKEN=first " + words(60)),
        tool_result("c2", "TOKEN=second " + words(60)),
        tool_result("c3", "TOKEN=third " + words(60)),
    ]
    said = answer("rc_abcdefghij", found, max_tokens=150, count=count, query="token")
    assert said.startswith(
        "[The parts of the recalled content (3 messages) that mention 'token'; the newest 2 of 3:]"
    )
    assert "TOKEN=first" not in said
    assert said.index("TOKEN=second") < said.index("TOKEN=third")


def test_a_query_nothing_mentions_returns_the_whole_content_saying_so() -> None:
    found = [tool_result("c1", "PORT=8080")]
    said = answer("rc_abcdefghij", found, max_tokens=500, count=count, query="password")
    assert said == "[Nothing in it mentions 'password'; here it is whole.]\n\nPORT=8080"


def test_a_whole_content_returned_for_a_query_is_cut_without_suggesting_a_query() -> None:
    body = " ".join(f"w{i}" for i in range(1000))
    said = answer(
        "rc_abcdefghij", [tool_result("c1", body)], max_tokens=200, count=count, query="x"
    )
    assert said.startswith("[Nothing in it mentions 'x'")
    assert "cut from the middle" in said
    assert "Call it again with a query" not in said
    assert count(said) <= 200


def test_a_query_of_blanks_names_nothing_to_look_for() -> None:
    assert excerpts([user("hello")], "  \t ", max_tokens=100, count=count) is None


def test_a_query_matching_every_line_of_a_long_log_is_cut_to_the_cap() -> None:
    """The newest matching block is kept even alone over the cap; the answer is then cut to
    head and tail, or the round's request would not fit the window."""
    log = "\n".join(f"error {i}: the build failed at step {i}" for i in range(2000))
    said = answer(
        "rc_abcdefghij", [tool_result("c1", log)], max_tokens=300, count=count, query="error"
    )
    assert count(said) <= 330
    assert "cut from the middle" in said


def test_a_query_naming_a_role_matches_no_message_by_its_header() -> None:
    found = [user("hello"), tool_result("c1", "the tool said so")]
    said = answer("rc_abcdefghij", found, max_tokens=500, count=count, query="tool")
    assert "the tool said so" in said
    assert "hello" not in said


@pytest.mark.parametrize(
    ("choice", "offered"),
    [
        ({"type": "auto"}, True),
        ({"type": "any", "disable_parallel_tool_use": True}, True),
        ({"type": "tool", "name": "read_file"}, False),
        ({"type": "none"}, False),
    ],
)
def test_the_messages_apis_tool_choice_is_read_as_its_own(
    choice: dict[str, Any], offered: bool
) -> None:
    assert may_offer({"tools": [MESSAGES_TOOL], "tool_choice": choice}) is offered


def test_with_tool_appends_the_messages_tool_last_in_anthropics_format() -> None:
    body = {"model": "claude-sonnet-4-6", "tools": [MESSAGES_TOOL]}
    offered = with_tool(body, responses=False, anthropic=True)
    assert offered["tools"][0] is MESSAGES_TOOL  # the client's tool, its bytes unchanged
    assert offered["tools"][1] == tool(False, anthropic=True)
    assert set(offered["tools"][1]) == {"name", "description", "input_schema"}
    assert offered["tools"][1]["name"] == TOOL
    assert offered["tools"][1]["input_schema"]["required"] == ["id"]
    assert with_tool(offered, responses=False, anthropic=True) == offered
    assert without_tool(offered) == body
