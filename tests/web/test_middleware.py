"""Route names for the request counter: a fixed set, whatever the path."""

from __future__ import annotations

import pytest

from proxy.web.middleware import route_of


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/chat/completions", "chat_completions"),
        ("/v1/compaction/sessions/abc/messages", "admin"),
        ("/v1/files/file-123/content", "passthrough"),
        ("/v1/models", "models"),
        ("/v1/responses/compact", "responses_compact"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
        ("/v1/embeddings", "embeddings"),
        ("/healthz", "health"),
        ("/readyz", "health"),
        ("/metrics", "metrics"),
        ("/dashboard", "dashboard"),
        ("/docs", "docs"),
        ("/openapi.json", "docs"),
        ("/favicon.ico", "other"),
        ("/", "other"),
    ],
)
def test_every_path_has_a_route_name_from_the_fixed_set(path: str, route: str) -> None:
    assert route_of(path) == route
