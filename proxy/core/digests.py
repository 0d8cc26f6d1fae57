"""Message digests: one hash of each message's canonical JSON, computed once per request.

Three things on the request path name a message by its content: the token counter's cache
key, the session's chain hashes and the archive's content address. For a 100k-token history
each used to canonicalize and hash all of it again (about 2 ms apiece here); a `Digests`
computes each message's digest once and all three share it, so what a request costs follows
its new messages rather than its history.

The hash is XXH3-128: about 15 times cheaper than BLAKE2b on a list of message-sized inputs,
where the per-call cost dominates (`bench/README.md`). It is not a cryptographic hash; a
forged collision could at worst make a tenant's own history look like another of its own
histories, since everything a digest names is scoped to one tenant, and the one shared use,
the token-count cache, stores counts, which a collision could only make wrong for the party
that already knows the colliding content.
"""

from __future__ import annotations

from typing import Final

import xxhash

from proxy.core.jsoncodec import canonical

DIGEST_BYTES: Final = 16


def digest(value: object) -> bytes:
    """The 16-byte digest of `value`'s canonical JSON: equal values, equal digests."""
    return xxhash.xxh3_128_digest(canonical(value))


def chain(previous: bytes, item: bytes) -> bytes:
    """The digest of `previous` followed by `item` (for chain hashes)."""
    return xxhash.xxh3_128_digest(previous + item)


class Digests:
    """The digests of one request's values, each computed once, looked up by identity.

    A request's messages are parsed once and shared by everything that handles it, so
    identity finds them again without hashing anything. Each entry keeps its value alive,
    so an id cannot be reused by another object while this table exists; keep one table
    per request, not longer.
    """

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[int, tuple[object, bytes]] = {}

    def of(self, value: object) -> bytes:
        """The digest of `value` (computed on the first call for this object)."""
        entry = self._known.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        found = digest(value)
        self._known[id(value)] = (value, found)
        return found

    def copy(self) -> Digests:
        """A table with this one's digests so far, to use in another thread (a table is
        not safe to share between threads)."""
        copied = Digests()
        copied._known = dict(self._known)
        return copied

    def update(self, other: Digests) -> None:
        """Add the digests `other` computed (a copy used in another thread, now done)."""
        self._known.update(other._known)
