"""Parsing chat completion bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.request import parse_chat_request
from proxy.errors import InvalidRequestError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


def test_reads_model_and_stream() -> None:
    request = parse_chat_request(b'{"model": "m", "stream": true, "messages": []}')
    assert (request.model, request.stream, request.messages) == ("m", True, [])


def test_stream_must_be_true_not_truthy() -> None:
    assert not parse_chat_request(b'{"stream": "yes", "messages": []}').stream


def test_non_string_model_reads_as_none() -> None:
    assert parse_chat_request(b'{"model": 3, "messages": []}').model is None


@given(
    st.dictionaries(st.text(), json_values, max_size=5),
    st.lists(st.dictionaries(st.text(), json_values, max_size=3), max_size=3),
)
def test_every_field_kept_as_sent(extra: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    body = {**extra, "messages": messages}
    raw = json.dumps(body).encode()
    request = parse_chat_request(raw)
    assert request.body == body
    assert request.raw is raw


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"", None),
        (b"null", None),
        (b'"s"', None),
        (b"{}", "messages"),
        (b'{"messages": 5}', "messages"),
        (b'{"messages": [1]}', "messages[0]"),
    ],
)
def test_rejects_what_we_cannot_read(raw: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_chat_request(raw)
    assert caught.value.param == param
    assert caught.value.to_body()["error"]["type"] == "invalid_request_error"
