"""How many tokens the mock's provider counts in a Responses API request.

The count is the mock's own, made from the items as the provider reads them, not from the
proxy's translation into chat messages (`proxy.core.responses`): a proxy that miscounts an
item, or drops one, then disagrees with the provider as it would in production. Texts are
counted with the same encoder as chat (`Meter.counter.text`) and the sum is scaled by the
mock's `token_factor` (`Meter.scale`), so the two endpoints of one mock agree on a text.

Per piece of the prompt (unscaled):

- `instructions`: `ITEM_TOKENS` + its text;
- tools: `TOOLS_TOKENS` + each tool's compact JSON;
- a message: `ITEM_TOKENS` + its role + its text parts (an image `IMAGE_TOKENS`, any other
  part its JSON);
- a call: `ITEM_TOKENS` + its name + its arguments (or a custom call's input);
- a call's output: `ITEM_TOKENS` + the output's text;
- reasoning: `ITEM_TOKENS` + its summary texts + `len(encrypted_content) // 4` (what the
  provider decrypts is about a quarter of the ciphertext's characters);
- any other item: `ITEM_TOKENS` + its compact JSON;

and `REPLY_TOKENS` once, for the reply's priming.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core.tokens import TokenCounter
from proxy.mock_upstream.meter import Meter, Piece
from proxy.mock_upstream.responses_items import (
    CALLS,
    OUTPUTS,
    TEXT_PARTS,
    content_text,
    input_items,
    item_type,
)
from proxy.mock_upstream.script import JSON

ITEM_TOKENS: Final = 4
TOOLS_TOKENS: Final = 10
REPLY_TOKENS: Final = 3
IMAGE_TOKENS: Final = 765
"""An image at high detail in 2x2 tiles; a low-detail one costs `LOW_IMAGE_TOKENS`."""
LOW_IMAGE_TOKENS: Final = 85
ENCRYPTED_CHARS_PER_TOKEN: Final = 4

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


class ResponsesMeter:
    """Counts Responses requests as the mock's provider does (see the module docstring)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self._text = meter.counter.text

    def prompt(self, body: Mapping[str, Any], items: Sequence[JSON]) -> int:
        """The prompt tokens of `body` whose input, resolved, is `items`; scaled."""
        unscaled = sum(piece.tokens for piece in self.pieces(body, items))
        return self.meter.scale(unscaled + REPLY_TOKENS)

    def pieces(self, body: Mapping[str, Any], items: Sequence[JSON]) -> list[Piece]:
        """The prompt as cacheable pieces: instructions, tools, then each item in order."""
        pieces = []
        instructions = body.get("instructions")
        if instructions:
            pieces.append(Piece(_key(instructions), ITEM_TOKENS + self._loose(instructions)))
        tools = body.get("tools")
        if isinstance(tools, list) and tools:
            tokens = TOOLS_TOKENS + sum(self._text(_COMPACT.encode(tool)) for tool in tools)
            pieces.append(Piece(_key(tools), tokens))
        pieces.extend(Piece(_key(item), self.item(item)) for item in items)
        return pieces

    def item(self, item: Mapping[str, Any]) -> int:
        """One input item's tokens, unscaled."""
        kind = item_type(item)
        if kind == "message":
            role = item.get("role")
            return ITEM_TOKENS + self._text(str(role)) + self._content(item.get("content"))
        if kind in CALLS:
            arguments = item.get("arguments", item.get("input"))
            return ITEM_TOKENS + self._loose(item.get("name")) + self._loose(arguments)
        if kind in OUTPUTS:
            return ITEM_TOKENS + self._content(item.get("output"))
        if kind == "reasoning":
            return ITEM_TOKENS + self._reasoning(item)
        return ITEM_TOKENS + self._text(_COMPACT.encode(item))

    def _content(self, content: object) -> int:
        if not isinstance(content, list):
            return self._loose(content)
        return sum(self._part(part) for part in content)

    def _part(self, part: object) -> int:
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(part, dict) and kind in TEXT_PARTS:
            return self._text(content_text([part]))
        if isinstance(part, dict) and kind == "input_image":
            return LOW_IMAGE_TOKENS if part.get("detail") == "low" else IMAGE_TOKENS
        return self._text(_COMPACT.encode(part))

    def _reasoning(self, item: Mapping[str, Any]) -> int:
        summary = item.get("summary")
        texts = [s.get("text") for s in summary if isinstance(s, dict)] if summary else []
        tokens = sum(self._text(text) for text in texts if isinstance(text, str))
        encrypted = item.get("encrypted_content")
        if isinstance(encrypted, str):
            tokens += len(encrypted) // ENCRYPTED_CHARS_PER_TOKEN
        return tokens

    def _loose(self, value: object) -> int:
        """A string's tokens; anything else (None apart) as its compact JSON."""
        if value is None:
            return 0
        return self._text(value if isinstance(value, str) else _COMPACT.encode(value))


def responses_prompt_tokens(
    body: Mapping[str, Any], counter: TokenCounter, token_factor: float = 1.0
) -> int:
    """The `usage.input_tokens` a mock with `token_factor` reports for `body`.

    `counter` counts over the mock's encoder; `body` must not use `previous_response_id`
    (the mock resolves that from its own memory).
    """
    return ResponsesMeter(Meter(counter, token_factor)).prompt(body, input_items(body))


def _key(value: object) -> bytes:
    canonical = _CANONICAL.encode(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(canonical, digest_size=16).digest()
