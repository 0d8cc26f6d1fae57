"""Which headers cross the proxy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.headers import HOP_BY_HOP, client_response_headers, upstream_request_headers

names = st.sampled_from(
    [*HOP_BY_HOP, "host", "content-length", "x-request-id", "set-cookie", "authorization", "x-a"]
)
header_lists = st.lists(st.tuples(names, st.text("abc, ", max_size=8)), max_size=12)


def test_end_to_end_headers_kept_in_order_with_repeats() -> None:
    upstream = [
        ("Set-Cookie", "a=1"),
        ("x-ratelimit-remaining-requests", "9"),
        ("set-cookie", "b=2"),
    ]
    assert client_response_headers(upstream) == upstream


def test_headers_named_by_connection_are_dropped() -> None:
    headers = [("Connection", "close, X-Trace"), ("x-trace", "1"), ("x-other", "2")]
    assert client_response_headers(headers) == [("x-other", "2")]


def test_content_length_kept_only_for_unchanged_streamed_bodies() -> None:
    headers = [("content-length", "10"), ("host", "proxy:8080")]
    assert upstream_request_headers(headers, api_key=None) == []
    assert upstream_request_headers(headers, api_key=None, keep_content_length=True) == [
        ("content-length", "10")
    ]


def test_upstream_key_replaces_every_client_authorization() -> None:
    headers = [("Authorization", "Bearer client"), ("authorization", "Bearer other")]
    assert upstream_request_headers(headers, api_key="sk-up") == [("authorization", "Bearer sk-up")]


@given(header_lists)
def test_no_hop_by_hop_header_ever_crosses(headers: list[tuple[str, str]]) -> None:
    for relayed in (
        client_response_headers(headers),
        upstream_request_headers(headers, api_key=None),
    ):
        assert not {name.lower() for name, _ in relayed} & HOP_BY_HOP


@given(header_lists)
def test_relayed_headers_are_an_ordered_subsequence(headers: list[tuple[str, str]]) -> None:
    relayed = client_response_headers(headers)
    remaining = iter(headers)
    assert all(any(pair == candidate for candidate in remaining) for pair in relayed)


def test_identity_encoding_drops_accept_encoding() -> None:
    headers = [("Accept-Encoding", "gzip, br"), ("x-a", "1")]
    assert upstream_request_headers(headers, api_key=None, identity_encoding=True) == [("x-a", "1")]
    assert upstream_request_headers(headers, api_key=None) == headers


def test_upstream_key_also_replaces_a_client_api_key_header() -> None:
    # Azure-style clients send their key as `api-key`; with the proxy's own key upstream, that
    # key was for the proxy (`auth.keys`) and must not reach the provider.
    headers = [("api-key", "sk-client"), ("x-trace", "1")]
    assert upstream_request_headers(headers, api_key="sk-up") == [
        ("x-trace", "1"),
        ("authorization", "Bearer sk-up"),
    ]
    assert upstream_request_headers(headers, api_key=None) == headers


def test_the_messages_api_gets_the_proxy_key_as_x_api_key() -> None:
    # Claude Code presents its key as `x-api-key`: with the proxy's own key upstream, that key
    # was for the proxy, and Anthropic reads the proxy's from the same header.
    headers = [("x-api-key", "sk-ant-client"), ("anthropic-version", "2023-06-01")]
    assert upstream_request_headers(headers, api_key="sk-up", anthropic=True) == [
        ("anthropic-version", "2023-06-01"),
        ("x-api-key", "sk-up"),
    ]
    assert upstream_request_headers(headers, api_key="sk-up") == [
        ("anthropic-version", "2023-06-01"),
        ("authorization", "Bearer sk-up"),
    ]
    assert upstream_request_headers(headers, api_key=None, anthropic=True) == headers
