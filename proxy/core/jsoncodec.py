"""JSON in and out on the hot path: orjson, with the standard library behind it.

Every chat completion is parsed once, and its messages are turned into canonical bytes for
hashing (token-count cache keys, chain hashes) on every request: for a 100k-token history
that is about 3 ms per pass with the standard library and 0.4 ms with orjson. orjson refuses
a few things JSON clients can send (NaN, integers beyond 64 bits, lone surrogates in
strings); those fall back to the standard library, so nothing a client sends is rejected
here that would otherwise be accepted. The same value always takes the same path, so its
canonical bytes never change.

Two kinds of valid JSON are refused (`JSONLimitError`): values nested more than `MAX_DEPTH`
arrays and objects deep, and integers longer than Python converts (4,300 digits by default).
Both would otherwise fail far from here: every later stage (hashing, the fallback encoder,
the token counter, the archive) walks a value recursively, and a few hundred levels exhaust
orjson's limits and then Python's stack. Refused at parse time, every value the proxy holds
is safe for all of them.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final

import orjson

MAX_DEPTH: Final = 254
"""Arrays and objects nested in one another, the outermost counted. orjson's encoder writes
this deep and no deeper; a chat body needs a dozen levels (a JSON schema in a tool). Beyond
it the hashes would take the standard library's encoder, whose recursion ends in Python's
stack limit (about 1,000 levels), so this is where values are refused. Checked by encoding
with orjson (C speed, a seventh of a parse) rather than by walking the value in Python."""

_SORTED: Final = orjson.OPT_SORT_KEYS
_DIGIT_MAP: Final = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord(" ") for b in range(256)
)
_NINETEEN_DIGITS: Final = b"0" * 19
_TOO_DEEP: Final = f"the JSON value is nested more than {MAX_DEPTH} levels deep"
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

    # Copied (a checkpoint's `asdict` deep-copies the messages it holds) and pickled from
    # the token: float's own protocol would hand `__new__` the float instead.
    def __getnewargs__(self) -> tuple[str]:  # type: ignore[override]
        return (self.token,)


class JSONLimitError(json.JSONDecodeError):
    """Valid JSON the proxy does not take: nested deeper than `MAX_DEPTH`, or an integer too
    long to convert. A `JSONDecodeError`, so every caller that handles bad JSON handles it."""

    def __init__(self, msg: str, doc: str = "", pos: int = 0) -> None:
        super().__init__(msg, doc, pos)

    def __str__(self) -> str:
        return self.msg  # no line and column: the limit is about the whole value


def _default(value: object) -> object:
    if isinstance(value, _NonFinite):
        return orjson.Fragment(value.token.encode())
    return str(value)


def loads(raw: bytes | str) -> Any:
    """Parse JSON. Raises `json.JSONDecodeError` (`JSONLimitError` for a value beyond the
    limits above) or `UnicodeDecodeError` on bad input."""
    value = _parsed(raw)
    if _deeper_than_limit(value):
        raise JSONLimitError(_TOO_DEEP)
    return value


def _parsed(raw: bytes | str) -> Any:
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    # orjson reads integers beyond 64 bits as floats, silently changing them; any run of 19
    # digits (maybe such an integer, maybe only text) takes the exact path instead. Found by
    # mapping digits to "0" and the rest to " " (C speed): a regex scan costs 20 times more.
    if _NINETEEN_DIGITS in data.translate(_DIGIT_MAP):
        return _standard_loads(raw)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # orjson's own refusals, its depth limit (1,024) among them: the standard library
        # parses what it can, and says which limit the rest is beyond.
        return _standard_loads(raw)


def _standard_loads(raw: bytes | str) -> Any:
    try:
        return json.loads(raw, parse_constant=_NonFinite)
    except RecursionError:
        raise JSONLimitError(_TOO_DEEP) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        # The one other ValueError of the parser: `int()` refuses a number over the
        # interpreter's digit limit (a guard against quadratic-time conversion).
        raise JSONLimitError(
            f"an integer has more than {sys.get_int_max_str_digits()} digits"
        ) from exc


def _deeper_than_limit(value: object) -> bool:
    if not isinstance(value, dict | list):
        return False
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        # Too deep, or what orjson cannot write (a big integer, a lone surrogate, NaN, all
        # parsed by the standard library): only a walk tells which.
        return _deeper_than(value, MAX_DEPTH)
    return False


def _deeper_than(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether `value` nests arrays and objects more than `limit` levels, found level by
    level (no recursion: a value as deep as orjson parses would exhaust Python's stack)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


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
