"""Counting every HTTP request by route and status code (`compaction_proxy_requests_total`).

A plain ASGI middleware, not Starlette's `BaseHTTPMiddleware`: it only watches the response's
start message go by, so streams pass through untouched and unbuffered. A request is counted
when it ends, streams included, with the status its response started with.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.observability.metrics import Metrics

# Path prefixes and their route names, first match first. The names are a fixed set: a label
# per path would make a time series per file id, model or session in passthrough paths.
ROUTE_PREFIXES = (
    ("/v1/chat/completions", "chat_completions"),
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


class RequestCounter:
    """Counts each HTTP request in `metrics` once it is over."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        status = _UNANSWERED

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, watched)
        finally:
            self._metrics.request(route_of(scope["path"]), status)
