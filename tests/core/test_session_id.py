"""The session id: the client's own (a bounded length and a safe charset, refused without
echo), a well-known client's conversation id, or derived; in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.session import (
    CLIENT_SESSION_HEADERS,
    SESSION_ID_MAX_CHARS,
    checked_session_id,
    client_session_id,
    session_id_of,
)
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


CODEX_THREAD = "01a21a0b-0b15-7002-ab9a-83b2d5f1027c"


def test_codex_thread_id_names_the_session() -> None:
    headers = [("Session-Id", "01a21a0b-root"), ("Thread-Id", CODEX_THREAD)]
    assert client_session_id(headers) == CODEX_THREAD


@pytest.mark.parametrize(
    "name", [header.name for header in CLIENT_SESSION_HEADERS], ids=lambda name: name
)
def test_each_well_known_header_names_the_session_alone(name: str) -> None:
    assert client_session_id([("accept", "*/*"), (name, CODEX_THREAD)]) == CODEX_THREAD


def test_an_invalid_client_id_is_passed_over_not_refused() -> None:
    # Not addressed to the proxy: the request goes on, under the next header or derived.
    assert client_session_id([("thread-id", "a b"), ("session-id", "ok-1")]) == "ok-1"
    assert client_session_id([("thread-id", "x" * (SESSION_ID_MAX_CHARS + 1))]) is None
    assert client_session_id([("thread-id", "")]) is None


def test_the_first_value_of_a_repeated_header_counts() -> None:
    assert client_session_id([("thread-id", "first"), ("thread-id", "second")]) == "first"


def test_no_well_known_header_is_none() -> None:
    assert client_session_id([("x-request-id", "r1"), ("user-agent", "curl")]) is None


def test_session_precedence() -> None:
    """X-Session-Id, then the proxy's item's session, then the client's own id, then h_1."""
    assert session_id_of("mine", ["h1"], item="made", client="codex") == "mine"
    assert session_id_of(None, ["h1"], item="made", client="codex") == "made"
    assert session_id_of(None, ["h1"], client="codex") == "codex"
    assert session_id_of(None, [], client="codex") == "codex"
    assert session_id_of(None, ["h1"]) == "h1"


def test_an_explicit_bad_header_is_refused_even_with_a_client_id() -> None:
    with pytest.raises(InvalidRequestError):
        session_id_of("a b", ["h1"], client="codex")


def test_the_docs_list_every_well_known_header() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "sessions.md").read_text()
    assert all(f"`{header.name}`" in docs for header in CLIENT_SESSION_HEADERS)
