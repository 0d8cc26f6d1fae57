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
stack limit (about 1,000 levels), so this is where values are refused. Checked by walking
a sparse value (a chat body: long texts in a few hundred values), else by encoding it with
orjson (C speed, a seventh of a parse), which refuses what is deeper."""

_SORTED: Final = orjson.OPT_SORT_KEYS
_DIGIT_MAP: Final = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord(" ") for b in range(256)
)
_NINETEEN_DIGITS: Final = b"0" * 19
_WIDE: Final = 2.0**63
"""orjson reads an integer as a float past the 64-bit ranges (-2**63, 2**64): such a float is
at least this large."""
BYTES_PER_VALUE: Final = 16
"""A body walked for its depth and wide floats holds at most one value per this many bytes;
a denser one is checked by its bytes instead (a walk costs about 50 ns a value, the byte
checks under 1 ns a byte)."""
WALK_MIN_BYTES: Final = 2048
"""A value this small is checked by its bytes, not walked: the walk's own cost (a few us)
is then most of a parse, paid for every event of a stream the proxy reads."""
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
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        # orjson's own refusals, its depth limit (1,024) among them: the standard library
        # parses what it can, and says which limit the rest is beyond.
        return _checked(_standard_loads(raw))
    # orjson reads integers beyond 64 bits as floats, silently changing them. A chat body is
    # mostly text in a few hundred values: one walk over them finds the depth and any float
    # as large as such an integer, at a sixth of the cost of checking the bytes.
    found = (
        _scan(value, budget=len(data) // BYTES_PER_VALUE) if len(data) > WALK_MIN_BYTES else None
    )
    if found is None:
        # Small (a stream's event) or dense in values (a long array of numbers): the checks
        # that follow the bytes.
        if _nineteen_digits(data):
            value = _standard_loads(raw)
        return _checked(value)
    too_deep, wide_float = found
    if too_deep:
        raise JSONLimitError(_TOO_DEEP)
    if wide_float and _nineteen_digits(data):
        return _standard_loads(raw)  # as deep as orjson's value: checked already
    return value


def _nineteen_digits(data: bytes) -> bool:
    # Any run of 19 digits (maybe an integer beyond 64 bits, maybe only text) takes the exact
    # path. Found by mapping digits to "0" and the rest to " " (C speed): a regex scan costs
    # 20 times more.
    return _NINETEEN_DIGITS in data.translate(_DIGIT_MAP)


def _checked(value: Any) -> Any:
    if _deeper_than_limit(value):
        raise JSONLimitError(_TOO_DEEP)
    return value


def _scan(value: Any, *, budget: int) -> tuple[bool, bool] | None:
    """Whether `value` nests arrays and objects more than `MAX_DEPTH` levels, and whether it
    holds a float of an integer's size past 64 bits; None when it holds more than `budget`
    values (then a walk costs more than the byte checks). Level by level, no recursion."""
    wide = False
    level = [value]
    for _ in range(MAX_DEPTH):
        deeper: list[Any] = []
        for node in level:
            kind = type(node)
            children = node.values() if kind is dict else node if kind is list else (node,)
            budget -= len(children)
            if budget < 0:
                return None
            for child in children:
                kind = type(child)
                if kind is dict or kind is list:
                    deeper.append(child)
                elif kind is float and not -_WIDE < child < _WIDE:
                    wide = True
        if not deeper:
            return False, wide
        level = deeper
    return True, wide


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
