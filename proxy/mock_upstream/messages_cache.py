"""Prompt-cache accounting after Anthropic's rule: explicit breakpoints, reads and writes.

Anthropic caches nothing unasked: a client marks up to four blocks with `cache_control`, and
the prefix up to each marked block is written to the cache (if it is at least the model's
minimum, 1024 tokens for most). A later request reads the longest cached prefix that ends at
one of its own breakpoints or up to `LOOKBACK` blocks before one (the API checks that far
back, which is how a marker that moves to the newest block each request, as Claude Code's
does, still hits the previous request's prefix). The usage then splits the prompt in three:

    cache_read_input_tokens      the prefix read from the cache
    cache_creation_input_tokens  from there to the last breakpoint long enough to cache
    input_tokens                 the rest, after it

so a proxy that rewrites a block before a breakpoint loses every read after it, and one that
keeps the head stable (a frozen compaction block) keeps reading it.

Prefixes are remembered by a rolling hash of their pieces' keys (messages_meter.py), the
most recent `CAPACITY` of them; they do not expire (Anthropic's last five minutes, or an hour).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

LOOKBACK: Final = 20
"""Block boundaries before a breakpoint at which the API still looks for a cached prefix."""
CAPACITY: Final = 4_096


@dataclass(frozen=True, slots=True)
class CacheUse:
    read: int
    """Tokens of the prefix read from the cache."""
    created: int
    """Tokens written to the cache after that prefix."""


class BreakpointCache:
    """The prefixes one mock has cached."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._written: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def account(
        self,
        keys: Sequence[bytes],
        sums: Sequence[int],
        breakpoints: Sequence[int],
        minimum: int,
    ) -> CacheUse:
        """Read and write the cache for a prompt of pieces `keys`, whose prefixes hold
        `sums[n]` tokens (`n` pieces), marked at the piece indices `breakpoints`."""
        digests = _rolling(keys)
        read = 0
        for marked in breakpoints:
            end = marked + 1
            for length in range(end, max(end - LOOKBACK - 1, 0), -1):
                if digests[length] in self._written:
                    self._written.move_to_end(digests[length])
                    read = max(read, length)
                    break
        cacheable = [marked + 1 for marked in breakpoints if sums[marked + 1] >= minimum]
        for length in cacheable:
            self._remember(digests[length])
        written = max(cacheable, default=0)
        created = sums[written] - sums[read] if written > read else 0
        return CacheUse(sums[read], created)

    def _remember(self, digest: bytes) -> None:
        self._written[digest] = None
        self._written.move_to_end(digest)
        while len(self._written) > self._capacity:
            self._written.popitem(last=False)


def _rolling(keys: Sequence[bytes]) -> list[bytes]:
    """A digest per prefix: `[empty, first, first + second, ...]`."""
    digests = [b""]
    for key in keys:
        digests.append(hashlib.blake2b(digests[-1] + key, digest_size=16).digest())
    return digests
