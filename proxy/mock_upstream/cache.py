"""Prompt-cache accounting, after OpenAI's: how much of a prompt a provider serves from cache.

OpenAI caches a prompt's prefix and reports the hit as `usage.prompt_tokens_details.
cached_tokens`: a hit needs the first 1024 tokens to match exactly, and grows in steps of 128
tokens after that (OpenAI's prompt caching guide). What matters for compaction is the shape
of that rule: a proxy that keeps the head of a conversation byte-for-byte stable earns cache
hits, and one that rewrites early messages on every turn loses them.

The mock models it per message: the shared prefix of a request is the longest run of leading
pieces (schemas, then messages, compared by the hash of their canonical JSON) that one of the
recent prompts began with too. Its tokens are rounded down to the granularity above the
minimum, and below the minimum nothing is cached:

    cached = 0                                               if shared < minimum
    cached = minimum + (shared - minimum) // granularity * granularity   otherwise

A message edited anywhere breaks the prefix there, as a changed byte breaks OpenAI's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

RECENT_PROMPTS = 64
"""How many prompts the mock remembers: enough for a few interleaved conversations."""


class PromptCache:
    """The recent prompts of one mock, as sequences of piece keys."""

    def __init__(self, capacity: int = RECENT_PROMPTS) -> None:
        self._prompts: deque[tuple[bytes, ...]] = deque(maxlen=capacity)

    def shared_prefix(self, keys: Sequence[bytes]) -> int:
        """How many leading pieces of `keys` some remembered prompt also starts with."""
        return max((_common_length(keys, prompt) for prompt in self._prompts), default=0)

    def remember(self, keys: Sequence[bytes]) -> None:
        self._prompts.append(tuple(keys))


def _common_length(left: Sequence[bytes], right: Sequence[bytes]) -> int:
    length = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        length += 1
    return length


def cached_tokens(shared: int, *, granularity: int, minimum: int) -> int:
    """The tokens a provider reports as cached for a shared prefix of `shared` tokens."""
    if shared < minimum or shared <= 0:
        return 0
    step = max(granularity, 1)
    return minimum + (shared - minimum) // step * step
