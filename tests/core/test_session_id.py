"""The client's session id: a bounded length and a safe charset, refused without echo."""

from __future__ import annotations

import pytest

from proxy.core.session import SESSION_ID_MAX_CHARS, checked_session_id, session_id_of
from proxy.errors import InvalidRequestError

GOOD = [
    "0f8fad5b-d9cb-469f-a165-70867728950e",  # UUID
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",  # ULID
    "V1StGXR8_Z5jdHi6B-myT",  # nanoid
    "team:project:42",
    "build.2024-11-25",
    "x" * SESSION_ID_MAX_CHARS,
]
BAD = ["x" * (SESSION_ID_MAX_CHARS + 1), "a b", "a/b", "a\r\nset-cookie: x", "é", '"q"', "a;b"]


@pytest.mark.parametrize("value", GOOD)
def test_common_id_formats_are_accepted(value: str) -> None:
    assert session_id_of(value, ["h1"]) == value


@pytest.mark.parametrize("value", BAD)
def test_bad_ids_are_refused_without_echo(value: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        session_id_of(value, ["h1"])
    assert caught.value.param == "X-Session-Id"
    assert caught.value.status_code == 400
    assert value not in str(caught.value)


def test_no_header_derives_the_id() -> None:
    assert session_id_of(None, ["h1"]) == "h1"
    assert session_id_of("", []) is None


def test_param_is_named_by_the_caller() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        checked_session_id("a b", param="session_id")
    assert caught.value.param == "session_id"
