"""The proxy's summary requests as Messages bodies: the prefix form reads the conversation
from the provider's cache (one breakpoint, on the closing message), the transcript form puts
the summarizer's instructions in `system`."""

from __future__ import annotations

from typing import Any

from proxy.core.anthropic import chat_view
from proxy.core.anthropic_cache import breakpoints
from proxy.core.anthropic_summary import messages_prefix_request, messages_transcript_request
from proxy.core.summary import Prefix, summary_request

EPHEMERAL = {"type": "ephemeral"}
TOOL = {"name": "read_file", "description": "Read.", "input_schema": {"type": "object"}}
THINKING = {"type": "thinking", "thinking": "Read the file first.", "signature": "c2lnbmVk"}


def conversation(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "Be careful.", "cache_control": EPHEMERAL}],
        "messages": [
            {"role": "user", "content": "Fix the checkout."},
            {
                "role": "assistant",
                "content": [
                    THINKING,
                    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def total()"},
                    {"type": "text", "text": "Go on.", "cache_control": EPHEMERAL},
                ],
            },
        ],
        **fields,
    }


def prefix_of(body: dict[str, Any]) -> Prefix:
    view = chat_view(body)
    fields: dict[str, Any] = {k: view[k] for k in ("model", "tools") if k in view}
    return Prefix(fields, tuple(view["messages"]), 500, after_task=True)


def test_the_prefix_form_sends_the_conversation_back_then_the_closing_with_the_breakpoint() -> None:
    body = messages_prefix_request(
        prefix_of(conversation(tools=[TOOL])), previous=None, max_tokens=400
    )
    assert body["system"] == [{"type": "text", "text": "Be careful."}]
    assert body["tools"] == [TOOL]
    assert body["tool_choice"] == {"type": "none"}
    assert body["max_tokens"] == 400
    assert "thinking" not in body
    assert "temperature" not in body
    roles = [message["role"] for message in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]  # paused, alternating
    assert body["messages"][1]["content"][0] == THINKING  # byte for byte
    closing = body["messages"][-1]["content"]
    assert closing[-1]["cache_control"] == EPHEMERAL
    assert "Summarize" in closing[-1]["text"]
    assert breakpoints(body) == [("messages", 4, "content", 0)]


def test_without_tools_no_tool_choice_and_never_more_than_four_breakpoints() -> None:
    marked = [{**TOOL, "name": f"t{n}", "cache_control": EPHEMERAL} for n in range(4)]
    prefix = prefix_of(conversation())
    assert "tool_choice" not in messages_prefix_request(prefix, previous=None, max_tokens=9)
    crowded = messages_prefix_request(
        prefix_of(conversation(tools=marked)), previous="- INC-9", max_tokens=9
    )
    found = breakpoints(crowded)
    assert len(found) == 4
    assert found[-1][0] == "messages"  # the closing's stays; the earliest tool's went
    assert "cache_control" not in crowded["tools"][0]


def test_the_transcript_form_puts_the_instructions_in_system() -> None:
    chat = summary_request(
        [{"role": "user", "content": "INC-4821"}], previous=None, model="m", max_tokens=300
    )
    body = messages_transcript_request(chat)
    assert body["system"] == chat["messages"][0]["content"]
    assert body["messages"] == [{"role": "user", "content": chat["messages"][1]["content"]}]
    assert (body["model"], body["max_tokens"]) == ("m", 300)
    bare = messages_transcript_request({"messages": [{"role": "user", "content": "x"}]})
    assert bare == {"messages": [{"role": "user", "content": "x"}]}
