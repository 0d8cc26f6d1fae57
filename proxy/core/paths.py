"""Request paths: what a raw path means once every hop on the way has read it.

The proxy forwards `/v1/*` with its own upstream key attached, so it must be sure a path
stays below `/v1/` however the upstream (or its HTTP client, or a reverse proxy in front of
it) reads the path. Readers disagree: aiohttp's URL parser resolves `..` and decodes `%2e`,
some servers decode `%2f` to a slash or take `\\` for one, Tomcat takes `..;x` for `..`,
nginx merges `//`. So the path is normalized here for the most generous reader, once,
before routing: every spelling of a separator splits segments, every spelling of `.` and `..`
is resolved, empty segments go. What is left has no dot segment in any reading, and routing
(the chat route too) sees the path the upstream would.

Rule: the separators and escapes that survive are kept as the client wrote them (a file id
`a%2Fb` stays one escaped segment), so a path without dot or empty segments is unchanged.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# A slash, a backslash, or either percent-encoded: any of them splits segments for a reader.
_SEPARATOR = re.compile(r"(/|\\|%2f|%5c)", re.IGNORECASE)
API_PREFIX = "/v1/"
"""The OpenAI API's root: the only paths forwarded upstream are below it."""


def normalize(raw_path: str) -> str:
    """`raw_path` (percent-escapes as sent) with dot and empty segments resolved.

    `..` at the root stays at the root (RFC 3986 §5.2.4); the result starts with `/`. A path
    ending in a separator (or in a dot segment) keeps one trailing `/`, as RFC 3986 does:
    `/a/` is not `/a` to a browser resolving relative links.
    """
    parts = _SEPARATOR.split(raw_path)
    kept: list[tuple[str, str]] = []
    for separator, text in zip(["/", *parts[1::2]], parts[0::2], strict=True):
        value = segment_value(text)
        if value == "..":
            if kept:
                kept.pop()
        elif value not in ("", "."):
            kept.append((separator, text))
    if not kept:
        return "/"
    # The first separator is a plain slash: the result must be an origin-form path.
    kept[0] = ("/", kept[0][1])
    trailing = "/" if segment_value(parts[-1]) in ("", ".", "..") else ""
    return "".join(separator + text for separator, text in kept) + trailing


def segment_value(text: str) -> str:
    """What a generous reader takes a raw segment for: percent-decoded once, without the
    `;parameters` some servers strip (`..;x` is `..` to Tomcat)."""
    return unquote(text).partition(";")[0]


def routed(raw_path: str) -> str:
    """The path the proxy routes `raw_path` by: normalized, and below `/v1/` without a
    trailing slash. The OpenAI API names no resource with one, and some upstreams (Express,
    by default) serve `chat/completions/` as `chat/completions`: it must be the chat route."""
    path = normalize(raw_path)
    if path.startswith(API_PREFIX) and len(path) > len(API_PREFIX):
        return path.removesuffix("/")
    return path


def confine(raw_path: str) -> str | None:
    """The routed path below `/v1/` (without that prefix), or None when the path does not
    stay below it (`/v1/../admin`, `/v1%2Fx`, `/v1/` itself)."""
    path = routed(raw_path)
    below = path.removeprefix(API_PREFIX)
    return below if below and below != path else None


def anthropic_path(path: str) -> bool:
    """Whether `path` (below `/v1/`, as `confine` gives it) is the Messages API's
    (`messages`, `messages/count_tokens`, `messages/batches/...`): the provider reads the
    proxy's own key from `x-api-key` there."""
    return path == "messages" or path.startswith("messages/")
