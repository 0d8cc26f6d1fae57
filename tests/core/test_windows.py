"""Known context windows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.windows import Window, decide_window, known_window, needs_detection, window_in


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


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (
            {"configured": 8000, "context_window": 6000, "reported": 4096},
            Window(8000, "configured for the model"),
        ),
        ({"context_window": 6000, "reported": 8192}, Window(6000, "context.context_window")),
        ({"model": "gpt-4o", "reported": 4096}, Window(128_000, "known model")),
        ({"reported": 4096}, Window(4096, "reported by the upstream")),
        ({}, Window(32_000, "default")),
        ({"model": "gpt-4o", "learned": 2048}, Window(2048, "learned from an overflow error")),
        ({"configured": 1000, "learned": 2048}, Window(1000, "configured for the model")),
        ({"context_window": 6000, "learned": 5000}, Window(5000, "learned from an overflow error")),
    ],
)
def test_window_sources_in_order(sources: dict[str, Any], expected: Window) -> None:
    arguments = {"model": "mock-model", **sources}
    assert decide_window(default=32_000, **arguments) == expected


def test_detection_only_when_nothing_explicit_or_known() -> None:
    assert needs_detection(configured=None, context_window=None, model="mock-model")
    assert not needs_detection(configured=None, context_window=6000, model="mock-model")
    assert not needs_detection(configured=8000, context_window=None, model="mock-model")
    assert not needs_detection(configured=None, context_window=None, model="gpt-4o")
    assert not needs_detection(configured=None, context_window=None, model=None)


def test_the_window_a_models_listing_gives() -> None:
    listing = {
        "data": [
            {"id": "other", "max_model_len": 1},
            {"id": "m", "max_model_len": True, "context_length": 8192},
        ]
    }
    assert window_in(json.dumps(listing).encode(), "m") == 8192
    assert window_in(json.dumps(listing).encode(), "missing") is None
    assert window_in(json.dumps({"data": [{"id": "m"}]}).encode(), "m") is None
    assert window_in(b"not json", "m") is None
    assert window_in(b"[1, 2]", "m") is None
    assert window_in(b'{"data": {"id": "m"}}', "m") is None
