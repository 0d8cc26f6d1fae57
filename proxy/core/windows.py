"""Context windows of well-known models, as data.

Used when neither the configuration nor the upstream says how large a model's window is.
Rows are name prefixes, matched after dropping a provider prefix (`openai/gpt-4o`) and
ignoring case; the longest matching prefix wins, so `gpt-4o-mini` is not read as `gpt-4`.
Windows are total tokens (prompt and output), as the providers publish them.
"""

from __future__ import annotations

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
