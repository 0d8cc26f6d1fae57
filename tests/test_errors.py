"""The error tree: each error the proxy answers with, in the OpenAI shape, with its status."""

from __future__ import annotations

import pytest

from proxy import errors
from proxy.errors import (
    ConflictError,
    NotFoundError,
    NothingToCompactError,
    ProxyError,
    SessionNotFoundError,
)


def test_the_session_apis_errors_are_their_http_errors() -> None:
    missing = SessionNotFoundError("s-1")
    assert isinstance(missing, NotFoundError)
    assert missing.status_code == 404
    assert missing.to_body() == {
        "error": {
            "message": "No session 's-1' for this credential.",
            "type": "invalid_request_error",
            "param": "session_id",
            "code": "not_found",
        }
    }
    empty = NothingToCompactError("s-2")
    assert isinstance(empty, ConflictError)
    assert (empty.status_code, empty.to_body()["error"]["code"]) == (409, "conflict")
    assert empty.session_id == "s-2"


@pytest.mark.parametrize(
    "name", [name for name in dir(errors) if name.endswith("Error") and name != "ProxyError"]
)
def test_every_class_of_the_module_is_in_the_drawn_tree(name: str) -> None:
    # The module's docstring draws the tree: a class added without it would be missed.
    assert issubclass(getattr(errors, name), ProxyError)
    assert f" {name} " in (errors.__doc__ or "")
