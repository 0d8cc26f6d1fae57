"""Credentials in URLs: taken out to be sent as Basic auth, hidden wherever a URL is shown."""

from __future__ import annotations

import pytest

from proxy.core.urls import Credentials, redact, split_credentials


@pytest.mark.parametrize(
    ("url", "stripped", "credentials"),
    [
        ("https://user:pass@host/v1", "https://host/v1", Credentials("user", "pass")),
        ("http://u:p@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", Credentials("u", "p")),
        ("redis://:secret@redis:6379/0", "redis://redis:6379/0", Credentials("", "secret")),
        ("https://token@host/v1", "https://host/v1", Credentials("token", "")),
        ("https://u:p%40ss%3A@[::1]:8443/v1", "https://[::1]:8443/v1", Credentials("u", "p@ss:")),
        ("https://me@corp:pw@host/v1", "https://host/v1", Credentials("me@corp", "pw")),
        ("unix://:pw@/run/redis.sock", "unix:///run/redis.sock", Credentials("", "pw")),
    ],
)
def test_split_credentials_takes_out_the_userinfo_decoded(
    url: str, stripped: str, credentials: Credentials
) -> None:
    assert split_credentials(url) == (stripped, credentials)


@pytest.mark.parametrize(
    "url",
    ["https://api.openai.com/v1", "http://host/v1/users/me@corp", "http://host/v1?to=a@b"],
)
def test_split_credentials_leaves_a_url_without_userinfo_alone(url: str) -> None:
    assert split_credentials(url) == (url, None)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://user:secret@host/v1", "https://user:***@host/v1"),
        ("redis://:secret@redis:6379/0", "redis://:***@redis:6379/0"),
        ("https://sk-secret@host/v1", "https://***@host/v1"),
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        (
            "The upstream at http://u:secret@h/v1 could not be reached (also rediss://:secret@r)",
            "The upstream at http://u:***@h/v1 could not be reached (also rediss://:***@r)",
        ),
        ("got 'ftp://a:secret@host'", "got 'ftp://a:***@host'"),
    ],
)
def test_redact_hides_every_password_in_the_text(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown  # idempotent: a shown URL stays as shown


def test_credentials_basic_is_the_rfc_7617_header_value() -> None:
    assert Credentials("Aladdin", "open sesame").basic() == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    assert Credentials("", "pässword").basic() == "Basic OnDDpHNzd29yZA=="
