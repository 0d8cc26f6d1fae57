"""The summarizer request, the summary message, and finding earlier notes again."""

from __future__ import annotations

from typing import Any

from proxy.core.messages import Message
from proxy.core.splice import merge_text
from proxy.core.summary import (
    AFTER_TASK,
    FOLD_IN,
    NOTE_END,
    SECTIONS,
    SUMMARY_PREFIX,
    WHOLE,
    Prefix,
    completion_text,
    detach_note,
    detach_notes,
    is_summary,
    marker,
    note_digest,
    note_of,
    notes_in,
    offered_tools,
    opening_note,
    prefix_fields,
    prefix_request,
    render,
    replace_note,
    split_span,
    summary_request,
    summary_text,
)
from tests.builders import (
    assistant,
    assistant_calls,
    function_call,
    function_result,
    image_user,
    system,
    tool_result,
    user,
)


def test_request_carries_transcript_sections_and_limits() -> None:
    span = [user("Fix bug ABC-12"), assistant_calls("c1", name="grep"), tool_result("c1", "hit")]
    body = summary_request(span, previous=None, model="gpt-4o-mini", max_tokens=300)
    system, prompt = body["messages"]
    assert all(f"## {section}" in system["content"] for section in SECTIONS)
    assert "300 tokens" in system["content"]
    assert "user: Fix bug ABC-12" in prompt["content"]
    assert 'assistant called grep({"q": "x"})' in prompt["content"]
    assert "tool result [id c1]: hit" in prompt["content"]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("gpt-4o-mini", 300, 0)


def test_request_folds_previous_summary_in() -> None:
    body = summary_request([user("more")], previous="old summary", model=None, max_tokens=100)
    prompt = body["messages"][1]["content"]
    assert prompt.index("old summary") < prompt.index("user: more")
    assert "model" not in body


def test_render_covers_every_shape() -> None:
    assert render(image_user("look")) == "user: look"
    assert render(function_call("lookup", '{"k": 1}')) == 'assistant called lookup({"k": 1})'
    assert render({"role": "assistant", "content": None}) == "assistant: (no text)"
    assert render({"content": "x"}) == "unknown: x"
    custom = {"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}
    turn = {"role": "assistant", "content": None, "tool_calls": [custom]}
    assert render(turn) == "assistant called apply_patch(*** Begin)"


def test_summary_message_says_what_it_is_and_lists_tools() -> None:
    note = summary_text("  the summary  ", condensed=12, tools=["grep", "edit"])
    assert note.startswith(SUMMARY_PREFIX)
    assert "12 messages were replaced" in note
    assert "the summary\n\nTools you can call in this conversation: grep, edit." in note
    assert is_summary({"role": "user", "content": note})
    assert not summary_text("s", condensed=1, tools=[]).endswith(".")  # no empty reminder


def test_marker_keeps_an_earlier_summary() -> None:
    assert marker(5) == "[5 earlier messages omitted]"
    earlier = summary_text("kept facts", condensed=3, tools=[])
    assert marker(5, earlier) == f"[5 earlier messages omitted]\n\n{earlier}"
    assert marker(5, "[2 earlier messages omitted]") == "[5 earlier messages omitted]"


def test_notes_found_standalone_and_merged() -> None:
    note = marker(3)
    assert note_of(user(note)) == note
    assert note_of(user("ordinary")) is None
    merged = merge_text(user("the task"), note, first=False)
    restored, found = detach_note(merged)
    assert (restored, found) == (user("the task"), note)
    parts = merge_text(image_user("task"), note, first=False)
    assert detach_note(parts) == (image_user("task"), note)


def test_detach_leaves_plain_messages_alone() -> None:
    for message in (user("task"), user(marker(2)), image_user(), {"role": "user"}):
        assert detach_note(message) == (message, None)


def test_offered_tools_in_order_including_legacy_functions() -> None:
    body = {
        "tools": [
            {"type": "function", "function": {"name": "grep"}},
            {"type": "web_search"},
            "junk",
        ],
        "functions": [{"name": "lookup"}, {"description": "nameless"}],
    }
    assert offered_tools(body) == ["grep", "lookup"]
    assert offered_tools({}) == []
    # The Responses API's flat tools.
    flat = {
        "tools": [
            {"type": "function", "name": "shell", "parameters": {}},
            {"type": "custom", "name": "apply_patch"},
            {"type": "function"},
            {"type": "file_search", "name": "not a function"},
        ]
    }
    assert offered_tools(flat) == ["shell", "apply_patch"]


def test_completion_text() -> None:
    ok = {"choices": [{"message": {"role": "assistant", "content": "summary"}}]}
    assert completion_text(ok) == "summary"
    bad: list[dict[str, object]] = [
        {},
        {"choices": []},
        {"choices": ["x"]},
        {"choices": [{"message": {"content": " "}}]},
    ]
    assert [completion_text(body) for body in bad] == [None] * 4


def test_split_span_in_parts() -> None:
    span = [user("a " * 10), user("b " * 10), user("c " * 25), user("d")]
    parts = split_span(span, max_tokens=25, count=lambda m: len(str(m["content"]).split()))
    assert parts == [[span[0], span[1]], [span[2]], [span[3]]]
    assert split_span([], max_tokens=5, count=len) == []


def test_a_message_over_a_part_is_cut_to_its_head_and_tail() -> None:
    words = [f"w{i:03d}" for i in range(400)]
    span = [user("a " * 10), user(" ".join(words)), user("d")]
    parts = split_span(span, max_tokens=100, count=lambda m: len(str(m["content"]).split()))
    assert [len(part) for part in parts] == [1, 2]  # cut, it leaves room for the next
    cut = str(parts[1][0]["content"])
    assert cut.startswith("w000 w001 ")
    assert cut.endswith(" w398 w399")
    assert "tokens cut from the middle for the summary" in cut
    assert len(cut.split()) <= 100
    assert parts[1][0]["role"] == "user"


def test_a_note_opening_a_multimodal_message_comes_out_again() -> None:
    note = "[2 earlier messages omitted]"
    message = image_user("look")
    opened = merge_text(message, opening_note(note), first=True)
    assert detach_note(opened) == (message, note)
    assert note_of(opened) is None
    plain = {**message, "content": [{"type": "text", "text": "hi"}, *message["content"]]}
    assert detach_note(plain) == (plain, None)


def test_a_note_right_after_an_opening_note_is_detached_too() -> None:
    # The end-of-message note is found by jumping between paragraph breaks; one that follows
    # the opening note directly starts the rest, with no break before it.
    first, second = marker(3), marker(5)
    message = {"role": "user", "content": opening_note(first) + "\n\n" + second}
    restored, notes = detach_notes(message)
    assert notes == [first, second]
    assert restored["content"] == ""


# --- which notes are the proxy's ------------------------------------------------------------


def test_an_opening_note_whose_summary_echoes_the_note_end_is_detached_whole() -> None:
    # A small model's summary may repeat what it read, the closing line included.
    note = summary_text(f"- echoed\n\n{NOTE_END}\n\n- more", condensed=4, tools=[])
    message = user("the task")
    opened = merge_text(message, opening_note(note), first=True)
    assert detach_note(opened)[1] != note  # by its shape alone, the echo ends the note early
    assert detach_notes(opened, lambda text: text == note) == (message, [note])


def test_a_note_shaped_text_that_is_not_the_proxy_s_stays_in_the_message() -> None:
    note = summary_text("- the real summary", condensed=3, tools=[])
    fake = "[2 earlier messages omitted]\n\n- pasted from an answer"
    message = user(f"look at this:\n\n{fake}\n\nwhat is it?")
    merged = merge_text(message, note, first=False)
    assert detach_notes(merged, lambda text: text == note) == (message, [note])
    assert detach_notes(message, lambda text: text == note) == (message, [])
    opened = merge_text(message, opening_note(fake), first=True)
    assert detach_notes(opened, lambda text: text == note) == (opened, [])


def test_note_parts_of_a_multimodal_message_are_detached_only_when_the_proxy_s() -> None:
    note = summary_text("- the real summary", condensed=3, tools=[])
    message = image_user("task")
    opened = merge_text(message, opening_note(note), first=True)
    closed = merge_text(message, note, first=False)
    assert detach_notes(opened, lambda text: False) == (opened, [])
    assert detach_notes(closed, lambda text: False) == (closed, [])
    assert detach_notes(closed, lambda text: text == note) == (message, [note])
    assert (
        detach_notes({"role": "user", "content": [{"type": "image_url"}]}, lambda text: True)[1]
        == []
    )


def test_notes_in_finds_standalone_and_merged_notes_in_order() -> None:
    first = marker(3)
    second = summary_text("- later", condensed=2, tools=[])
    messages = [
        user("task"),
        {"role": "assistant", "content": first},
        merge_text(user("next"), second, first=False),
    ]
    assert notes_in(messages) == [first, second]
    assert note_digest(first) != note_digest(second)
    assert note_digest(first) == note_digest(marker(3))


def test_a_note_that_opened_an_empty_message_is_that_message_s_note() -> None:
    note = marker(3)
    opened = merge_text(user(""), opening_note(note), first=True)
    assert note_of(opened) == note
    assert note_of(user(f"{note}\n\n{NOTE_END}\n\nthe user's words")) is None


# --- The prefix form -------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]


def prefix_of(*messages: Message, after_task: bool = True, **fields: Any) -> Prefix:
    return Prefix(fields, messages, tokens=100, after_task=after_task)


def test_prefix_fields_keep_what_the_cached_prompt_depends_on() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [user()],
        "tools": TOOLS,
        "tool_choice": "required",
        "stream": True,
        "max_completion_tokens": 9000,
        "response_format": {"type": "json_object"},
        "prompt_cache_key": "agent-7",
    }
    assert prefix_fields(body) == {"model": "gpt-4o", "tools": TOOLS, "prompt_cache_key": "agent-7"}


def test_the_prefix_form_is_the_conversation_then_one_closing_instruction() -> None:
    conversation = (system("be terse"), user("Fix ABC-12"), assistant("done: ABC-12 fixed"))
    body = prefix_request(
        prefix_of(*conversation, model="gpt-4o", tools=TOOLS), previous=None, max_tokens=300
    )
    *kept, closing = body["messages"]
    assert kept == list(conversation)  # the same messages, the same objects' contents
    assert closing["role"] == "user"
    assert all(f"## {section}" in closing["content"] for section in SECTIONS)
    assert "300 tokens" in closing["content"]
    assert AFTER_TASK in closing["content"]
    assert FOLD_IN not in closing["content"]
    assert (body["model"], body["tools"], body["tool_choice"]) == ("gpt-4o", TOOLS, "none")
    assert (body["max_tokens"], body["temperature"]) == (300, 0)
    assert "function_call" not in body


def test_the_prefix_form_folds_the_previous_summary_in_and_names_its_scope() -> None:
    functions = [{"name": "lookup", "parameters": {}}]
    prefix = prefix_of(system(), assistant("hello"), after_task=False, functions=functions)
    body = prefix_request(prefix, previous="- ticket ABC-12", max_tokens=100)
    closing = body["messages"][-1]["content"]
    assert WHOLE in closing
    assert AFTER_TASK not in closing
    assert closing.endswith(FOLD_IN + "- ticket ABC-12")
    assert body["function_call"] == "none"
    assert "tool_choice" not in body


def test_a_prefix_ending_on_the_user_s_turn_gets_an_assistant_turn_before_the_closing() -> None:
    """Two user turns in a row are refused by strict chat templates; tool traffic is no turn
    of its own, so a round of calls after the user's message still ends on the user."""
    ending_on_user = [
        (user("go"),),
        (user("go"), assistant_calls("c1"), tool_result("c1")),
        (user("go"), function_call(), function_result()),
    ]
    for messages in ending_on_user:
        sent = prefix_request(prefix_of(*messages), previous=None, max_tokens=50)["messages"]
        assert [m["role"] for m in sent[len(messages) :]] == ["assistant", "user"], messages
    ending_on_assistant = [
        (user("go"), assistant("done")),
        (assistant("hello"), assistant_calls("c1"), tool_result("c1")),
        (system(), tool_result("c1")),
    ]
    for messages in ending_on_assistant:
        sent = prefix_request(prefix_of(*messages), previous=None, max_tokens=50)["messages"]
        assert [m["role"] for m in sent[len(messages) :]] == ["user"], messages


def test_a_note_is_replaced_where_it_stands() -> None:
    old, new = marker(3), marker(2)
    merged = merge_text(user("the question"), old, first=False)
    assert replace_note(merged, old, new)["content"] == f"the question\n\n{new}"
    parts = {"role": "user", "content": [{"type": "text", "text": opening_note(old)}, old]}
    replaced = replace_note(parts, old, new)["content"]
    assert replaced == [{"type": "text", "text": opening_note(new)}, old]
    closing = {"role": "user", "content": [{"type": "image_url"}, {"type": "text", "text": old}]}
    assert replace_note(closing, old, new)["content"][1] == {"type": "text", "text": new}
    empty = {"role": "user", "content": None}
    assert replace_note(empty, old, new) == empty
