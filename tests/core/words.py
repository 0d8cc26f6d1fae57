"""A tokenizer for tests: one token per whitespace-separated word, easy to reason about."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.tokens import TokenCounter


@dataclass(frozen=True)
class Words:
    name: str = "words"

    def count(self, text: str) -> int:
        return len(text.split())


COUNTER = TokenCounter(Words())
"""A counter over `Words` (the per-message framing of the real counter included)."""

TOOLS = {"tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}]}
"""A request offering one tool, `search`."""
