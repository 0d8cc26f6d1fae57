"""Who answers a compaction request: the setting, and `auto` by the upstream's host."""

from __future__ import annotations

import pytest

from proxy.core.delegation import CompactionMode, compaction_handler


@pytest.mark.parametrize(
    ("mode", "base_url", "handler"),
    [
        ("auto", "https://api.openai.com/v1", "upstream"),
        ("auto", "https://API.OpenAI.com:443/v1", "upstream"),
        ("auto", "https://user:secret@api.openai.com/v1", "upstream"),
        ("auto", "http://127.0.0.1:8000/v1", "proxy"),
        ("auto", "https://openrouter.ai/api/v1", "proxy"),
        ("auto", "https://api.openai.com.example.net/v1", "proxy"),
        ("auto", "not a url", "proxy"),
        ("proxy", "https://api.openai.com/v1", "proxy"),
        ("upstream", "http://127.0.0.1:8000/v1", "upstream"),
    ],
)
def test_auto_leaves_compaction_to_openai_alone(
    mode: CompactionMode, base_url: str, handler: str
) -> None:
    assert compaction_handler(mode, base_url) == handler
