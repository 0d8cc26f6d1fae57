"""Known context windows."""

from __future__ import annotations

import pytest

from proxy.core.windows import known_window


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o-mini", 128_000),
        ("openai/GPT-4o", 128_000),
        ("gpt-4", 8_192),
        ("gpt-4-32k-0613", 32_768),
        ("gpt-4.1-nano", 1_047_576),
        ("o1-mini", 128_000),
        ("o1-preview", 200_000),
        ("anthropic/claude-3.5-sonnet", 200_000),
        ("my-finetune", None),
        (None, None),
        ("", None),
    ],
)
def test_known_windows(model: str | None, window: int | None) -> None:
    assert known_window(model) == window
