"""How many tokens the mock's provider counts in a Messages API request.

There is no public tokenizer for Claude models: the mock counts texts with the same encoder as
its other endpoints (`Meter.counter.text`) and scales the sum by its `token_factor`, so a test
can play a provider whose count the proxy's estimate does not match. The count is the mock's
own, made from the blocks as the provider reads them, not from the proxy's translation.

The prompt is rendered as the API caches it: the tools, then the system blocks, then each
message's blocks, in order (`pieces`, each keyed by its content without `cache_control`,
because a breakpoint marks a place in the prompt and is no part of it). Per piece (unscaled):

- the tools: `TOOLS_TOKENS` + each tool's compact JSON;
- a system block: its text (`SYSTEM_TOKENS` once, on the first);
- a message's first block carries `MESSAGE_TOKENS` for the message's framing; then
  `text` its text; `image` `IMAGE_TOKENS` (about what Anthropic bills a full-size image);
  `document` its text when the source is text, else `DOCUMENT_TOKENS`; `tool_use`
  `TOOL_TOKENS` + its name + its input's compact JSON; `tool_result` `TOOL_TOKENS` + its
  content, block by block; `thinking` its thinking (the signature is not read by the model);
  `redacted_thinking` a token per four characters of its data; any other block its JSON;

and `REPLY_TOKENS` once, for the reply's priming. A piece marked with `cache_control` is a
breakpoint (`breakpoints`): the tools piece when any tool is marked, a tool result when a block
in it is; and the last piece when the request sets `cache_control` itself (automatic caching).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.tokens import TokenCounter
from proxy.mock_upstream.messages_request import (
    block_type,
    blocks,
    messages,
    system_blocks,
    tools,
)
from proxy.mock_upstream.meter import Meter, Piece
from proxy.mock_upstream.script import JSON

TOOLS_TOKENS: Final = 10
SYSTEM_TOKENS: Final = 3
MESSAGE_TOKENS: Final = 3
TOOL_TOKENS: Final = 3
REPLY_TOKENS: Final = 3
IMAGE_TOKENS: Final = 1_600
DOCUMENT_TOKENS: Final = 1_600
REDACTED_CHARS_PER_TOKEN: Final = 4

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class Rendered:
    """A request's prompt as the provider caches it."""

    pieces: list[Piece]
    breakpoints: list[int]
    """Indices of the pieces marked with `cache_control`, in order."""


class MessagesMeter:
    """Counts Messages requests as the mock's provider does (see the module docstring)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self._text = meter.counter.text

    def prompt(self, body: Mapping[str, Any]) -> int:
        """The prompt tokens of `body`, scaled."""
        unscaled = sum(piece.tokens for piece in self.render(body).pieces)
        return self.meter.scale(unscaled + REPLY_TOKENS)

    def render(self, body: Mapping[str, Any]) -> Rendered:
        pieces: list[Piece] = []
        breakpoints: list[int] = []

        def add(key: object, tokens: int, marked: bool) -> None:
            if marked:
                breakpoints.append(len(pieces))
            pieces.append(Piece(_key(key), tokens))

        listed = tools(body)
        if listed:
            tokens = TOOLS_TOKENS + sum(self._text(_COMPACT.encode(tool)) for tool in listed)
            add([_unmarked(tool) for tool in listed], tokens, any(map(_marked, listed)))
        for number, block in enumerate(system_blocks(body)):
            framing = SYSTEM_TOKENS if number == 0 else 0
            add(("system", _unmarked(block)), framing + self.block(block), _marked(block))
        for message in messages(body):
            role = message.get("role")
            content = blocks(message.get("content"))
            if not content:
                add((role, None), MESSAGE_TOKENS, False)
            for number, block in enumerate(content):
                framing = MESSAGE_TOKENS if number == 0 else 0
                add((role, _unmarked(block)), framing + self.block(block), _marked(block))
        last = len(pieces) - 1
        if body.get("cache_control") is not None and last >= 0 and last not in breakpoints:
            breakpoints.append(last)  # automatic caching: a marker on the last block
        return Rendered(pieces, breakpoints)

    def block(self, block: Mapping[str, Any]) -> int:
        """One content block's tokens, unscaled."""
        kind = block_type(block)
        if kind == "text":
            return self._loose(block.get("text"))
        if kind == "image":
            return IMAGE_TOKENS
        if kind == "document":
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                return self._loose(source.get("data"))
            return DOCUMENT_TOKENS
        if kind == "tool_use":
            name, given = block.get("name"), block.get("input")
            return TOOL_TOKENS + self._loose(name) + self._text(_COMPACT.encode(given))
        if kind == "tool_result":
            return TOOL_TOKENS + sum(self.block(part) for part in blocks(block.get("content")))
        if kind == "thinking":
            return self._loose(block.get("thinking"))
        if kind == "redacted_thinking":
            return len(str(block.get("data", ""))) // REDACTED_CHARS_PER_TOKEN
        return self._text(_COMPACT.encode(block))

    def _loose(self, value: object) -> int:
        """A string's tokens; anything else (None apart) as its compact JSON."""
        if value is None:
            return 0
        return self._text(value if isinstance(value, str) else _COMPACT.encode(value))


def messages_prompt_tokens(
    body: Mapping[str, Any], counter: TokenCounter, token_factor: float = 1.0
) -> int:
    """The prompt a mock with `token_factor` counts for `body` (`input_tokens` plus the two
    cache counts of its `usage`); `counter` counts over the mock's encoder."""
    return MessagesMeter(Meter(counter, token_factor)).prompt(body)


def cumulative(pieces: Sequence[Piece], meter: Meter) -> list[int]:
    """The scaled tokens of each prefix of `pieces`: `[0, first, first + second, ...]`."""
    sums, running = [0], 0
    for piece in pieces:
        running += piece.tokens
        sums.append(meter.scale(running))
    return sums


def _marked(block: Mapping[str, Any]) -> bool:
    """Whether a block is a breakpoint: marked itself, or (a tool result) in its content."""
    if block.get("cache_control") is not None:
        return True
    return block_type(block) == "tool_result" and any(map(_marked, blocks(block.get("content"))))


def _unmarked(block: JSON) -> JSON:
    """The block as the cache compares it: its markers (a tool result's too) left out."""
    kept = {name: value for name, value in block.items() if name != "cache_control"}
    if block_type(block) == "tool_result" and isinstance(block.get("content"), list):
        kept["content"] = [_unmarked(part) for part in blocks(block["content"])]
    return kept


def _key(value: object) -> bytes:
    canonical = _CANONICAL.encode(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(canonical, digest_size=16).digest()
