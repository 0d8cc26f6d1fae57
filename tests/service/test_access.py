"""The request log's content field (only with `log.content: true`)."""

from __future__ import annotations

from proxy.service.access import CONTENT_CHARS, last_user_text
from tests.builders import assistant_calls, tool_result, user


def test_the_last_user_message_is_taken_from_the_end() -> None:
    messages = [user("first"), user("second"), assistant_calls("c1"), tool_result("c1")]
    assert last_user_text(messages) == "second"


def test_text_parts_are_joined_and_a_long_message_cut() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "a" * CONTENT_CHARS}] * 2}
    text = last_user_text([parts])
    assert text == "a" * CONTENT_CHARS + "…"


def test_no_user_message_is_none() -> None:
    assert last_user_text([{"role": "system", "content": "rules"}]) is None
