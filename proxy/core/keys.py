"""Client keys (`auth.keys`): which API keys may use the proxy, and the tenant each names.

A key is only ever held as its hash, `sha256:<hex>`: the config may give the hash or the
plain key (hashed as the settings load), and a caller's key is hashed to be looked up. A
dict lookup by hash compares no secret byte by byte, so it leaks nothing through timing, and
a dump of the settings or of memory holds no usable key. One SHA-256 (no salt, no
stretching) is right for API keys: they are long random strings, not passwords to guess.

The tenant *name* is what an operator chose (`team-a`); the store namespace is derived from
it (`proxy.core.session.tenant_of_name`), never from the key, so a team keeps its sessions
when its key is rotated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.core.headers import Headers

HASH_PREFIX = "sha256:"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def key_hash(key: str) -> str:
    """`sha256:<hex>` of a client key: the only form a key is kept in."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def configured_hash(entry: str) -> str:
    """A key of `auth.keys` as its hash: a `sha256:<hex>` entry as given, a plain key hashed.

    Raises ValueError, never naming the entry (it may be a plain key).
    """
    if entry.lower().startswith(HASH_PREFIX):
        digest = entry[len(HASH_PREFIX) :].lower()
        if not _HEX_DIGEST.fullmatch(digest):
            raise ValueError("a sha256: entry must be followed by 64 hex digits")
        return HASH_PREFIX + digest
    if not entry.strip():
        raise ValueError("a key cannot be empty")
    return key_hash(entry)


def tenant_name(name: str) -> str:
    """`name` when it is a valid tenant name (letters, digits, `.`, `_`, `-`; at most 64,
    starting with a letter or digit). Raises ValueError."""
    if not _TENANT_NAME.fullmatch(name):
        raise ValueError(
            f"tenant name {name!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def presented_key(credentials: Headers) -> str | None:
    """The key a caller presents: `Authorization: Bearer <key>`, else the `api-key` header
    (Azure's spelling), else `x-api-key` (Anthropic's); None when it sends none."""
    found = {name.lower(): value for name, value in reversed(credentials)}
    authorization = found.get("authorization")
    if authorization is not None:
        scheme, _, key = authorization.strip().partition(" ")
        return key.strip() if scheme.lower() == "bearer" else None
    return found.get("api-key", found.get("x-api-key"))


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """The configured keys, by hash, and the tenant name each one stands for."""

    tenants: Mapping[str, str]
    """`sha256:<hex>` -> tenant name."""

    def tenant_for(self, key: str | None) -> str | None:
        """The tenant name of a presented key; None for no key or an unknown one."""
        return self.tenants.get(key_hash(key)) if key else None
