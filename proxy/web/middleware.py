"""The ASGI layers around the routes: the path guard and the request counter.

`PathGuard` normalizes each request's path (`proxy.core.paths.routed`) before anything
routes it, so `/v1/./chat/completions` is the chat route and `/v1/../admin` no `/v1` route.
`RequestCounter` counts every HTTP request by route and status code
(`compaction_proxy_requests_total`), under the normalized path; and every WebSocket
handshake, refused (`proxy.web.routes`) with the status it was answered.

Both are plain ASGI middleware, not Starlette's `BaseHTTPMiddleware`: they only look at the
scope and watch the response's start message go by, so streams pass through untouched and
unbuffered. A request is counted when it ends, streams included, with the status its
response started with.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.paths import routed
from proxy.observability.metrics import Metrics

# Path prefixes and their route names, first match first. The names are a fixed set: a label
# per path would make a time series per file id, model or session in passthrough paths.
ROUTE_PREFIXES = (
    ("/v1/chat/completions", "chat_completions"),
    ("/v1/responses/compact", "responses_compact"),
    ("/v1/responses", "responses"),
    ("/v1/messages", "messages"),
    ("/v1/models", "models"),
    ("/v1/embeddings", "embeddings"),
    ("/v1/compaction/", "admin"),
    ("/v1/", "passthrough"),
    ("/healthz", "health"),
    ("/readyz", "health"),
    ("/metrics", "metrics"),
    ("/dashboard", "dashboard"),
    ("/docs", "docs"),
    ("/openapi.json", "docs"),
)
# What the server answers when the app raises before it starts a response.
_UNANSWERED = 500


def route_of(path: str) -> str:
    """The route name `path` is counted under."""
    return next((name for prefix, name in ROUTE_PREFIXES if path.startswith(prefix)), "other")


# The start of a response, for an HTTP request and for a WebSocket handshake refused.
_STARTS = frozenset({"http.response.start", "websocket.http.response.start"})
# The proxy accepts no WebSocket: one closed was refused before it opened, which the server
# answers with a 403.
_CLOSED_UNOPENED = 403


class RequestCounter:
    """Counts each HTTP request and WebSocket handshake in `metrics` once it is over."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        status = _UNANSWERED

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] in _STARTS:
                status = message["status"]
            elif message["type"] == "websocket.close":
                status = _CLOSED_UNOPENED
            await send(message)

        try:
            await self._app(scope, receive, watched)
        finally:
            self._metrics.request(route_of(scope["path"]), status)


class PathGuard:
    """Routes every HTTP request by its normalized path (dot and empty segments resolved in
    every spelling the upstream might read), in `raw_path` and in the decoded `path` alike.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            path = routed(raw)
            if path != raw:
                # A copy: the server's scope is not ours to change (ASGI spec).
                scope = {**scope, "raw_path": path.encode("latin-1"), "path": unquote(path)}
        await self._app(scope, receive, send)
