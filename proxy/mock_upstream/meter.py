"""How many tokens the mock's provider counts: the proxy's own counter, scaled.

A real provider's tokenizer never agrees exactly with the proxy's estimate. The mock counts
with the proxy's `TokenCounter` over o200k_base and multiplies by `factor`, so a test can play
a provider that counts, say, 15% more (`factor=1.15`) and see whether the proxy's margins and
its calibration from `usage` cope.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.tokens import TOOL_CALL_TOKENS, TokenCounter
from proxy.mock_upstream.script import Reply

# Canonical JSON: equal messages get equal keys however their fields are ordered.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class Piece:
    """One element of a prompt's prefix, as prompt caching sees it: a key and its tokens."""

    key: bytes
    tokens: int
    """Unscaled: what the proxy's counter says."""


class Meter:
    """Counts prompts and replies as the mock's provider does: the counter times `factor`."""

    def __init__(self, counter: TokenCounter, factor: float) -> None:
        self.counter = counter
        self.factor = factor

    def scale(self, tokens: int) -> int:
        # Rounded to nearest, so factor 1.0 reports exactly the proxy's count.
        return round(tokens * self.factor)

    def prompt(self, body: Mapping[str, Any]) -> int:
        """The request's prompt tokens: messages, reply priming and tool schemas."""
        return self.scale(self.counter.request(body))

    def pieces(self, body: Mapping[str, Any]) -> list[Piece]:
        """The prompt as cacheable pieces, in the order the provider renders them.

        The schemas come first (providers render tools into the system prompt, so changing
        them invalidates every cached prefix), then each message.
        """
        pieces = []
        schemas = self.counter.tools(body)
        if schemas:
            keyed = {name: body.get(name) for name in ("tools", "functions", "response_format")}
            pieces.append(Piece(_key(keyed), schemas))
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else []:
            pieces.append(Piece(_key(message), self.counter.message(message)))
        return pieces

    def completion(self, reply: Reply) -> int:
        """The reply's tokens: its text, and each call's name and arguments with framing."""
        tokens = self.counter.text(reply.content or "")
        for call in reply.tool_calls:
            tokens += TOOL_CALL_TOKENS + self.counter.text(call.name + call.arguments)
        return self.scale(tokens)


def _key(value: object) -> bytes:
    canonical = _CANONICAL.encode(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(canonical, digest_size=16).digest()
