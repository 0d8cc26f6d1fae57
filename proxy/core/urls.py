"""Credentials written into URLs: `https://user:pass@host/v1`, `redis://:pass@host:6379/0`.

An operator may put an upstream's or Redis's credentials in its URL. Two rules follow:

- An HTTP client sends them as an `Authorization: Basic` header, never in the URL it
  requests: `split_credentials` takes them out (percent-decoded, as RFC 3986 encodes them).
- No log line, error message or API answer shows the password: every URL shown goes
  through `redact`, which works on any text (a message that quotes a URL too).

Userinfo ends at the first `/`, `?` or `#` after the scheme, as every URL parser reads it,
so a password holding one of those must be percent-encoded, as in any URL.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from urllib.parse import unquote

# The scheme, then userinfo up to the last `@` of the authority (a user name may hold one).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")

HIDDEN = "***"


@dataclass(frozen=True, slots=True)
class Credentials:
    """The user name and password of a URL's userinfo, percent-decoded."""

    username: str
    password: str

    def basic(self) -> str:
        """The `Authorization` value that sends them (RFC 7617, UTF-8)."""
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """`url` without its userinfo, and the credentials it held (None when it held none)."""
    found = _USERINFO.match(url)
    if found is None:
        return url, None
    username, _, password = found["userinfo"].partition(":")
    stripped = found["scheme"] + url[found.end() :]
    return stripped, Credentials(unquote(username), unquote(password))


def redact(text: str) -> str:
    """`text` with the password of every URL in it shown as `***`.

    A userinfo without a password is hidden whole: it is then usually a token
    (`https://TOKEN@host`), not a user name.
    """
    return _USERINFO.sub(_hidden, text)


def _hidden(found: re.Match[str]) -> str:
    username, colon, _password = found["userinfo"].partition(":")
    shown = f"{username}:{HIDDEN}" if colon else HIDDEN
    return f"{found['scheme']}{shown}@"
