"""A model's context window: the one rule that decides it, and the published windows as data.

`decide_window` is the only place a window is chosen; the request path, `inspect`, the
summarizer's part sizing and the operator's reports all go through it, so they agree. The
order: what the operator wrote (a `models:` entry, then `context.context_window`), then
what can be detected (the table below, then the upstream's `/v1/models`), then the default.
Explicit configuration wins over detection: an operator who writes 6,000 for a model an
upstream advertises at 8,192 knows something (a shared deployment, a slower tail). A window
an overflow error taught caps whichever it is: the provider saying "the maximum context
length is N" is harder evidence than any table or setting.

The table's rows are name prefixes, matched after dropping a provider prefix (`openai/gpt-4o`)
and ignoring case; the longest matching prefix wins, so `gpt-4o-mini` is not read as `gpt-4`.
Windows are total tokens (prompt and output), as the providers publish them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Fields OpenAI-compatible servers use for a model's window in `/v1/models` (vLLM's
# `max_model_len`, OpenRouter's `context_length`, ...).
_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")

DEFAULT_WINDOW = 128_000
"""The window assumed for a model nothing else tells about."""

KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    # OpenAI
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.5", 128_000),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    # Anthropic, Google, Meta, Mistral, DeepSeek, Qwen (their OpenAI-compatible names)
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-2", 1_048_576),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("meta-llama-3.1", 131_072),
    ("mistral-large", 131_072),
    ("mistral-small", 32_768),
    ("deepseek-chat", 65_536),
    ("deepseek-reasoner", 65_536),
    ("qwen2.5", 32_768),
    ("gemma-3", 131_072),
    ("gemma3", 131_072),
)


def known_window(model: str | None) -> int | None:
    """The published window of `model`, or None if it is not a well-known one."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    matches = [(len(prefix), window) for prefix, window in KNOWN_WINDOWS if name.startswith(prefix)]
    return max(matches)[1] if matches else None


@dataclass(frozen=True, slots=True)
class Window:
    """A decided window and where it came from (for reports and `inspect`)."""

    tokens: int
    source: str


def needs_detection(
    *, configured: int | None, context_window: int | None, model: str | None
) -> bool:
    """Whether the upstream must be asked: nothing explicit, and the model is not well known."""
    return not configured and not context_window and not known_window(model) and bool(model)


def decide_window(
    model: str | None,
    *,
    configured: int | None = None,
    context_window: int | None = None,
    reported: int | None = None,
    learned: int | None = None,
    default: int = DEFAULT_WINDOW,
) -> Window:
    """The window of `model`: the `models:` entry (`configured`), else
    `context.context_window`, else the known table, else what the upstream `reported`, else
    `default`; capped by a window `learned` from an overflow error."""
    candidates = (
        (configured, "configured for the model"),
        (context_window, "context.context_window"),
        (known_window(model), "known model"),
        (reported, "reported by the upstream"),
    )
    tokens, source = next(((w, s) for w, s in candidates if w), (default, "default"))
    if learned and learned < tokens:
        return Window(learned, "learned from an overflow error")
    return Window(tokens, source)


def window_in(raw: bytes, model: str) -> int | None:
    """The window `/v1/models`'s listing `raw` gives `model`, in the fields servers use."""

    try:
        listing = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            return _first_int(entry)
    return None


def _first_int(entry: Mapping[str, Any]) -> int | None:
    for name in _WINDOW_FIELDS:
        value = entry.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
