"""Recognizing chat commands and writing the proxy's answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.commands import (
    clear_text,
    command_of,
    compact_text,
    completion,
    completion_events,
    context_text,
)
from tests.builders import assistant, user

SESSION = {"id": "abc", "turns": 12, "compactions": 2, "tokens_saved": 30_000,
           "tokens_forwarded": 50_000, "tokens_sent": 80_000}  # fmt: skip
CONTEXT: dict[str, Any] = {
    "window": 128_000, "output_reserved": 4_096, "pressure": 0.42, "trigger": 0.75,
    "target": 0.5, "tokens": 52_000,
    "breakdown": {"system": 1_000, "tools": 2_000, "summary": 3_000, "messages": 40_000,
                  "tool_results": 5_000, "placeholders": 1_000, "total": 52_000},
}  # fmt: skip


@pytest.mark.parametrize(
    ("content", "command"),
    [
        ("/context", "context"),
        ("  /compact\n", "compact"),
        ("/context   clear", "clear"),
        ([{"type": "text", "text": "/context"}], "context"),
        ("/context please", None),
        ("/clear", None),
        ("tell me about /context", None),
    ],
)
def test_only_the_whole_last_user_message_is_a_command(content: Any, command: str | None) -> None:
    assert command_of([user("hi"), {"role": "user", "content": content}]) == command


def test_a_command_from_another_role_or_earlier_is_none() -> None:
    assert command_of([]) is None
    assert command_of([assistant("/context")]) is None
    assert command_of([user("/context"), assistant("ok")]) is None


def test_context_text_lists_every_category_and_the_session() -> None:
    text = context_text(SESSION, CONTEXT)
    assert "52,000 of 123,904 prompt tokens (42% of the window" in text
    assert "compaction at 75%, down to 50%" in text
    assert "| tool results | 5,000 |" in text
    assert "| cleared results | 1,000 |" in text
    assert "12 turns, 2 compactions, 30,000 tokens saved" in text


def test_compact_and_clear_texts() -> None:
    done = {"compacted": True, "strategy": "summarize", "tokens_before": 9000, "tokens_after": 2000}
    assert compact_text(done).startswith("Compacted (summarize): 9,000 → 2,000 tokens.")
    assert compact_text({"compacted": False}).startswith("Nothing to compact")
    assert clear_text(0).startswith("Nothing to clear")
    assert clear_text(1).startswith("Cleared 1 compaction:")
    assert clear_text(3).startswith("Cleared 3 compactions:")


def test_completion_is_an_openai_chat_completion() -> None:
    body = completion("hi", "gpt-4o", created=7, id="chatcmpl-proxy-1")
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-proxy-")
    assert (body["model"], body["created"]) == ("gpt-4o", 7)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert body["usage"]["total_tokens"] == 0
    assert completion("hi", None, created=7, id="chatcmpl-proxy-1")["model"] == "compaction-proxy"


@pytest.mark.parametrize("usage", [True, False])
def test_completion_events_are_a_whole_stream(usage: bool) -> None:
    raw = completion_events(
        "hi there", None, created=1, id="chatcmpl-proxy-2", include_usage=usage
    ).decode()
    events = [line.removeprefix("data: ") for line in raw.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == (
        "hi there"
    )
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes == [None, None, "stop"]
    assert (chunks[-1].get("usage") is not None) is usage
