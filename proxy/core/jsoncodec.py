"""JSON in and out on the hot path: orjson, with the standard library behind it.

Every chat completion is parsed once, and its messages are turned into canonical bytes for
hashing (token-count cache keys, chain hashes) on every request: for a 100k-token history
that is about 3 ms per pass with the standard library and 0.4 ms with orjson. orjson refuses
a few things JSON clients can send (NaN, integers beyond 64 bits, lone surrogates in
strings); those fall back to the standard library, so nothing a client sends is rejected
here that would otherwise be accepted. The same value always takes the same path, so its
canonical bytes never change.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

_SORTED: Final = orjson.OPT_SORT_KEYS
_DIGIT_MAP: Final = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord(" ") for b in range(256)
)
_NINETEEN_DIGITS: Final = b"0" * 19
_CANONICAL_FALLBACK: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
_COMPACT_FALLBACK: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


class _NonFinite(float):
    """NaN or an infinity as the client wrote it. JSON has no such numbers, but Python's
    `json` and some clients write them; orjson would write them back as `null`, changing
    the request, so they are kept apart and written back as they came."""

    __slots__ = ("token",)
    token: str

    def __new__(cls, token: str) -> _NonFinite:
        value = super().__new__(cls, token.replace("Infinity", "inf"))
        value.token = token
        return value


def _default(value: object) -> object:
    if isinstance(value, _NonFinite):
        return orjson.Fragment(value.token.encode())
    return str(value)


def loads(raw: bytes | str) -> Any:
    """Parse JSON. Raises `json.JSONDecodeError` (or `UnicodeDecodeError`) on bad input."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    # orjson reads integers beyond 64 bits as floats, silently changing them; any run of 19
    # digits (maybe such an integer, maybe only text) takes the exact path instead. Found by
    # mapping digits to "0" and the rest to " " (C speed): a regex scan costs 20 times more.
    if _NINETEEN_DIGITS in data.translate(_DIGIT_MAP):
        return json.loads(raw, parse_constant=_NonFinite)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(raw, parse_constant=_NonFinite)


def canonical(value: object) -> bytes:
    """Sorted-key, compact bytes: equal values always give equal bytes (for hashing)."""
    try:
        return orjson.dumps(value, option=_SORTED, default=_default)
    except orjson.JSONEncodeError:
        return _CANONICAL_FALLBACK.encode(value).encode("ascii")


def dumps(value: object) -> bytes:
    """Compact UTF-8 bytes, keys in the order given (a request body to send)."""
    try:
        return orjson.dumps(value, default=_default)
    except orjson.JSONEncodeError:
        return _COMPACT_FALLBACK.encode(value).encode("utf-8", "surrogatepass")
