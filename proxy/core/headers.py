"""Which headers cross the proxy, in each direction.

A proxy must not forward hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection,
not the message. That is the fixed list below plus any header the `Connection` header names.
Everything else passes untouched, so `x-request-id`, `x-ratelimit-*`, `retry-after`,
`openai-*` and vendor headers reach the client exactly as the upstream sent them.

Headers are handled as lists of `(name, value)` pairs, never dicts: repeated headers such as
`set-cookie` must survive, and so must the order the peer chose.
"""

from __future__ import annotations

from collections.abc import Iterable

Headers = list[tuple[str, str]]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

KEY_HEADERS = ("authorization", "api-key", "x-api-key")
"""The headers a client's API key comes in: OpenAI's (and Claude Code's token's) bearer,
Azure's `api-key`, Anthropic's `x-api-key`."""

# Recomputed by our own HTTP stack for the bytes it actually sends: `host` for the upstream's
# address, `content-length` for the body we send (chunked when streaming).
_RECOMPUTED = frozenset({"host", "content-length"})


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    """Header names listed in `Connection` (also hop-by-hop, per RFC 9110)."""
    return frozenset(
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
        if token.strip()
    )


def _end_to_end(headers: Iterable[tuple[str, str]], drop: frozenset[str]) -> Headers:
    pairs = list(headers)
    dropped = HOP_BY_HOP | drop | _connection_tokens(pairs)
    return [(name, value) for name, value in pairs if name.lower() not in dropped]


def upstream_request_headers(
    client_headers: Iterable[tuple[str, str]],
    *,
    api_key: str | None,
    keep_content_length: bool = False,
    identity_encoding: bool = False,
    anthropic: bool = False,
) -> Headers:
    """The client's headers as sent upstream.

    With `api_key` the proxy authenticates itself and the client's `Authorization` (and
    `api-key`) is replaced; without it, the client's credentials travel through unchanged. Keep
    `content-length` only when the body is relayed unchanged as a stream. With
    `identity_encoding` the client's `accept-encoding` is not passed on, so the response
    arrives uncompressed and the proxy can read it (usage, errors); the client gets the same
    JSON, uncompressed. `anthropic`: the request goes to the Messages API, which reads the
    proxy's own key from `x-api-key` (Anthropic's header; a bearer token it reads as an
    OAuth token).
    """
    drop = {"host"} | ({"content-length"} if not keep_content_length else set())
    if identity_encoding:
        drop.add("accept-encoding")
    if api_key is not None:
        # Every way a client presents its key (OpenAI's bearer, Azure's `api-key`,
        # Anthropic's `x-api-key`): with the proxy's own key, the client's is for the proxy
        # (`auth.keys`), never the provider.
        drop |= set(KEY_HEADERS)
    headers = _end_to_end(client_headers, frozenset(drop))
    if api_key is not None:
        headers.append(
            ("x-api-key", api_key) if anthropic else ("authorization", f"Bearer {api_key}")
        )
    return headers


def client_response_headers(upstream_headers: Iterable[tuple[str, str]]) -> Headers:
    """The upstream's response headers as relayed to the client."""
    return _end_to_end(upstream_headers, _RECOMPUTED)
