"""Fast JSON with a safe fallback."""

from __future__ import annotations

import copy
import json
import math
import pickle
import sys
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.jsoncodec import MAX_DEPTH, JSONLimitError, canonical, dumps, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(values)
def test_round_trip_and_canonical_order(value: object) -> None:
    parsed = loads(json.dumps(value))  # what a client sent, as the proxy holds it
    assert loads(dumps(parsed)) == json.loads(json.dumps(value))
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert canonical(reordered) == canonical(value)


@pytest.mark.parametrize(
    "raw",
    [b'{"a": NaN}', b'{"big": 123456789012345678901234567890}', b'{"s": "\\ud800"}'],
)
def test_what_orjson_refuses_still_parses(raw: bytes) -> None:
    value = loads(raw)
    assert isinstance(value, dict)
    assert canonical(value)
    assert dumps(value)


def test_bad_json_raises_the_standard_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(b"{nope")


@pytest.mark.parametrize("write", [dumps, canonical])
def test_non_finite_numbers_are_written_back_as_sent(write: Callable[[object], bytes]) -> None:
    # orjson alone would turn each into null, changing what the client asked for.
    value = loads(b'{"a": Infinity, "b": -Infinity, "c": NaN, "d": 1.5}')
    assert write(value) == b'{"a":Infinity,"b":-Infinity,"c":NaN,"d":1.5}'
    assert value["a"] == math.inf
    assert value["b"] == -math.inf
    assert math.isnan(value["c"])


def test_non_finite_numbers_survive_copies_and_pickles() -> None:
    # A checkpoint's `asdict` deep-copies the messages it keeps: a client's NaN once made
    # that raise, a 500 found by the Responses API fuzz suite.
    value = loads(b'{"a": [Infinity, -Infinity, NaN]}')
    for copied in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert dumps(copied) == b'{"a":[Infinity,-Infinity,NaN]}'


def test_other_values_are_written_as_their_text() -> None:
    assert dumps({"a": Decimal("1.50")}) == b'{"a":"1.50"}'
    assert canonical({"a": Decimal("1.50")}) == b'{"a":"1.50"}'


def nested(levels: int, *, as_object: bool = False) -> bytes:
    if as_object:
        return b'{"k":' * levels + b'"x"' + b"}" * levels
    return b"[" * levels + b'"x"' + b"]" * levels


# A long text makes a value sparse enough to be walked (`BYTES_PER_VALUE`); without it the
# nested values are checked by their bytes.
TEXT = b'"' + b"p" * 20 * MAX_DEPTH + b'"'


@pytest.mark.parametrize("as_object", [False, True])
@pytest.mark.parametrize(
    "extra", [b"", b"[12345678901234567890123]", TEXT, TEXT + b",12345678901234567890123"]
)
def test_nesting_up_to_the_limit_parses_and_writes(as_object: bool, extra: bytes) -> None:
    # `extra`: an integer past 64 bits sends the value down the standard library's path.
    raw = (
        b"[" + extra + (b"," if extra else b"") + nested(MAX_DEPTH - 1, as_object=as_object) + b"]"
    )
    value = loads(raw)
    assert loads(dumps(value)) == value
    assert canonical(value)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 600, 1000, 1025, 5000])
@pytest.mark.parametrize("as_object", [False, True])
@pytest.mark.parametrize(
    "extra",
    [b"", b"12345678901234567890123,", b'"\\ud800",', TEXT + b",", TEXT + b",1e300,"],
)
def test_nesting_past_the_limit_is_refused(levels: int, as_object: bool, extra: bytes) -> None:
    # Past orjson's parser (1,024) the standard library's recursion gives out instead: both
    # end in the same error, never a RecursionError.
    raw = b"[" + extra + nested(levels - 1, as_object=as_object) + b"]"
    with pytest.raises(JSONLimitError, match=f"nested more than {MAX_DEPTH} levels"):
        loads(raw)


def _same(a: object, b: object) -> bool:
    """Equal, and of the same types throughout (1 == 1.0 in Python; not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))  # type: ignore[arg-type]


wide = st.one_of(
    st.integers(min_value=2**62, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-(2**62)),
    st.floats(min_value=1e18, max_value=1e300),
    st.floats(min_value=-1e300, max_value=-1e18),
    st.from_regex(r"\A[0-9]{17,21}\Z"),  # digits in a text
)
sparse = st.recursive(
    wide | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(sparse, st.integers(min_value=0, max_value=4000))
def test_numbers_parse_exactly_walked_or_not(value: object, padding: int) -> None:
    # With `padding` bytes of text the value is walked; without, its bytes are checked.
    raw = json.dumps([value, "p" * padding])
    assert _same(loads(raw), json.loads(raw))
    assert _same(loads(raw.encode()), json.loads(raw))


@pytest.mark.parametrize("padding", [0, 4000])
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"12345678901234567890123", 12345678901234567890123),
        (b"-9223372036854775809", -9223372036854775809),
        (b"18446744073709551615", 18446744073709551615),  # orjson's own: exact
        (b"1e300", 1e300),  # as large, but no integer's digits: orjson's float stands
        (b'"12345678901234567890123"', "12345678901234567890123"),
    ],
)
def test_wide_numbers_parse_exactly(raw: bytes, expected: object, padding: int) -> None:
    value = loads(b"[" + raw + b',"' + b"p" * padding + b'"]')
    assert _same(value[0], expected)


def test_an_integer_past_the_interpreters_digit_limit_is_refused() -> None:
    limit = sys.get_int_max_str_digits()
    assert loads(b"[" + b"9" * limit + b"]") == [int("9" * limit)]
    with pytest.raises(JSONLimitError, match=f"more than {limit} digits") as caught:
        loads(b'{"n": -' + b"9" * (limit + 1) + b"}")
    assert isinstance(caught.value, json.JSONDecodeError)  # what every caller handles
    assert str(caught.value) == caught.value.msg


def test_limit_error_survives_pickling() -> None:
    error = JSONLimitError("too deep")
    assert str(pickle.loads(pickle.dumps(error))) == "too deep"
