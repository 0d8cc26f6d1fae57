"""Fast JSON with a safe fallback."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.jsoncodec import canonical, dumps, loads

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


def test_other_values_are_written_as_their_text() -> None:
    assert dumps({"a": Decimal("1.50")}) == b'{"a":"1.50"}'
    assert canonical({"a": Decimal("1.50")}) == b'{"a":"1.50"}'
