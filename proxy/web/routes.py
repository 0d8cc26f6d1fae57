"""Routes: translate HTTP into service calls and `Reply` values back into HTTP.

No decisions live here beyond HTTP itself: reading the body within its size limit, relaying
a reply whole or as a stream, and refusing a WebSocket.

The proxy serves HTTP only. Codex's built-in OpenAI provider opens a WebSocket on
`/v1/responses` first, and falls back to HTTPS at once on a 426 to its handshake only: any
other refusal (the server's default 403, a 404) it retries five times, for about six seconds,
on the first turn of every run. So a WebSocket to any `/v1/` path is answered 426 with the
OpenAI error body, whether the server hands it over as a WebSocket or, having no WebSocket
support, as a plain request carrying `Upgrade: websocket`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from proxy.core.anthropic_errors import proxy_error_body
from proxy.core.paths import confine
from proxy.errors import (
    InvalidRequestError,
    NotFoundError,
    ProxyError,
    RequestTooLargeError,
    UpstreamError,
    WebSocketRefusedError,
)
from proxy.observability.metrics import Metrics
from proxy.service import Incoming, ProxyService, Reply

logger = logging.getLogger(__name__)
_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def chat_completions(request: Request) -> Response:
    return await _compacted(request, _service(request).chat_completion)


async def responses(request: Request) -> Response:
    return await _compacted(request, _service(request).response)


async def responses_compact(request: Request) -> Response:
    return await _compacted(request, _service(request).compact)


async def responses_input_tokens(request: Request) -> Response:
    return await _compacted(request, _service(request).input_tokens)


async def messages(request: Request) -> Response:
    return await _anthropic(request, _service(request).messages)


async def count_tokens(request: Request) -> Response:
    return await _anthropic(request, _service(request).count_tokens)


async def _anthropic(
    request: Request, handle: Callable[[Incoming, bytes], Awaitable[Reply]]
) -> Response:
    """A Messages API route: the proxy's own errors in the Anthropic shape, which Claude Code
    and Anthropic's SDKs read (the OpenAI one would leave them no message to show)."""
    try:
        return await _compacted(request, handle)
    except ProxyError as error:
        return JSONResponse(proxy_error_body(error), status_code=error.status_code)


async def _compacted(
    request: Request, handle: Callable[[Incoming, bytes], Awaitable[Reply]]
) -> Response:
    try:
        raw = await _read_body(request, limit=cast(int, request.app.state.max_body_bytes))
        reply = await _unless_client_leaves(request, handle(_incoming(request), raw))
    except ProxyError:
        raise  # ours, each with its status and body (`proxy_error`)
    except Exception:
        # A defect of ours, never the client's doing. Left to the framework it becomes a 500
        # on a connection the server then drops, under the feet of a client that already
        # reused it for its next request: answered here, with the connection closed cleanly.
        logger.exception("a %s request failed in the proxy itself", request.url.path)
        return _internal_error(request)
    return _respond(reply) if reply is not None else Response(status_code=_CLIENT_CLOSED)


async def passthrough(request: Request) -> Response:
    if request.headers.get("upgrade", "").lower() == "websocket":
        raise _websocket_refused()
    reply = await _service(request).passthrough(_incoming(request), _body_stream(request))
    return _respond(reply)


async def websocket_refused(websocket: WebSocket) -> None:
    """A WebSocket below `/v1/`: refused before it opens, with the 426 of
    `WebSocketRefusedError`; on a server without ASGI's denial response, with its 403."""
    if "websocket.http.response" not in websocket.scope.get("extensions", {}):
        await websocket.close()
        return
    error = _websocket_refused()
    await websocket.send_denial_response(JSONResponse(error.to_body(), error.status_code))


def _websocket_refused() -> WebSocketRefusedError:
    return WebSocketRefusedError(
        "This proxy serves the OpenAI API over HTTP only, not over WebSocket: send "
        "POST /v1/responses (Codex does so at once after this answer)."
    )


async def root(request: Request) -> Response:
    """The base URL itself: Claude Code sends `HEAD /` before its first request and takes
    anything but a success for an unreachable server."""
    return JSONResponse({"status": "ok", "service": "compaction-proxy"})


async def healthz(request: Request) -> JSONResponse:
    """Liveness: the process serves HTTP."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """Readiness: this replica can serve, its upstream client open and its store usable.
    Parts that work degraded are named in `details` and keep the proxy ready, as it still
    serves every request: a summarizer whose breaker is open, and an upstream that did not
    answer the last background probe (a provider's outage must not take every replica out
    of the load balancer; its errors reach the clients either way)."""
    service = _service(request)
    problems = await service.readiness()
    details = service.details()
    if problems:
        body: dict[str, object] = {"status": "unavailable", "problems": problems}
        return JSONResponse({**body, **({"details": details} if details else {})}, 503)
    return JSONResponse({"status": "ready", **({"details": details} if details else {})})


async def metrics(request: Request) -> Response:
    """Prometheus' scrape: this app's metrics in the text exposition format."""
    body, content_type = cast(Metrics, request.app.state.metrics).exposition()
    return Response(body, media_type=content_type)


# Plain Starlette routes, not FastAPI's: these run on every proxied request, and FastAPI's
# per-route machinery (dependency solving, response models) had nothing to do here but still
# cost about a sixth of the proxy's CPU when profiled. FastAPI serves the routes that do
# validate input (the operator API).
CHAT_ROUTE = Route("/v1/chat/completions", chat_completions, methods=["POST"])
"""Matched before every other route: it serves nearly all the traffic."""
RESPONSES_ROUTE = Route("/v1/responses", responses, methods=["POST"])
"""The Responses API's create, compacted as chat completions are (other methods and
`/v1/responses/{id}` pass through)."""
COMPACT_ROUTE = Route("/v1/responses/compact", responses_compact, methods=["POST"])
"""The Responses API's compaction: answered by the proxy or forwarded untouched, as
`responses.compaction` says."""
INPUT_TOKENS_ROUTE = Route("/v1/responses/input_tokens", responses_input_tokens, methods=["POST"])
"""The Responses API's token count: forwarded with the proxy's compaction items expanded."""
MESSAGES_ROUTE = Route("/v1/messages", messages, methods=["POST"])
"""The Anthropic Messages API (Claude Code's), compacted as chat completions are; any query
(Claude Code's `?beta=true`) is forwarded with it."""
COUNT_TOKENS_ROUTE = Route("/v1/messages/count_tokens", count_tokens, methods=["POST"])
"""Forwarded, or answered by the proxy when the provider lacks it (`proxy.service.messages`)."""
ROUTES: list[BaseRoute] = [
    Route("/v1/{path:path}", passthrough, methods=_ALL_METHODS),
    WebSocketRoute("/v1/{path:path}", websocket_refused),
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]


async def proxy_error(request: Request, exc: Exception) -> Response:
    error = cast(ProxyError, exc)
    return JSONResponse(error.to_body(), status_code=error.status_code)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 answers, in the OpenAI error shape clients parse."""
    error = cast(HTTPException, exc)
    body = InvalidRequestError(f"{request.method} {request.url.path}: {error.detail}").to_body()
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


async def validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422 for a bad parameter of the session API, as an OpenAI-shaped 400."""
    errors = cast(RequestValidationError, exc).errors()
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("query", "body"))
    message = f"{where or 'request'}: {first.get('msg', 'invalid')}"
    return JSONResponse(InvalidRequestError(message, param=where or None).to_body(), 400)


def _service(request: Request) -> ProxyService:
    return cast(ProxyService, request.app.state.service)


def _incoming(request: Request) -> Incoming:
    # The raw path keeps percent-escapes (`files/a%2Fb`) exactly as the client wrote them.
    # PathGuard has normalized it already; confining it again here keeps the upstream key
    # below /v1/ even in an app assembled without the guard.
    raw_path = cast(bytes, request.scope.get("raw_path") or request.url.path.encode())
    path = confine(raw_path.decode("latin-1"))
    if path is None:
        raise NotFoundError(
            f"{request.method} {request.url.path}: Not Found (this proxy serves and forwards "
            "only paths below /v1/)"
        )
    headers = [
        (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw
    ]
    return Incoming(request.method, path, request.url.query, headers)


async def _read_body(request: Request, *, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


# nginx's "client closed request": logged nowhere, sent to nobody, but a truthful status.
_CLIENT_CLOSED = 499


async def _unless_client_leaves(request: Request, work: Awaitable[Reply]) -> Reply | None:
    """Await `work` unless the client disconnects first; then cancel it and return None.

    A non-streaming completion can take minutes; without this, a client that gave up would
    leave the upstream generating (and billing) for nobody. Only for requests whose body is
    already read: the watcher consumes the ASGI receive channel. The work runs in this task
    and one watcher task cancels it: a task and a wait per request fewer than racing two.
    """
    current = asyncio.current_task()
    assert current is not None
    state = {"finished": False, "left": False}

    async def watch() -> None:
        await _disconnect(request)
        if not state["finished"]:
            state["left"] = True
            current.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not state["left"]:
            raise  # cancelled by someone else (the server shutting down): theirs to handle
        current.uncancel()
        return None
    finally:
        state["finished"] = True
        watcher.cancel()


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _internal_error(request: Request) -> Response:
    error = ProxyError("compaction-proxy failed on this request; its log has the details.")
    messages = request.url.path.startswith("/v1/messages")
    body = proxy_error_body(error) if messages else error.to_body()
    return JSONResponse(body, error.status_code, headers={"connection": "close"})


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(
        f"The request body is larger than this proxy accepts ({limit} bytes); "
        "the limit is server.max_body_bytes."
    )


def _body_stream(request: Request) -> AsyncIterator[bytes] | None:
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    return request.stream() if has_body else None


def _respond(reply: Reply) -> Response:
    if isinstance(reply.body, bytes):
        response = Response(reply.body, status_code=reply.status)
    else:
        response = StreamingResponse(_relay(reply), status_code=reply.status)
    # Set raw so repeated headers (set-cookie) and the upstream's order survive; the framework
    # adds content-length for whole bodies and chunked transfer for streams.
    extra = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers
    ]
    response.raw_headers = [*extra, *_framework_headers(response)]
    return response


def _framework_headers(response: Response) -> list[tuple[bytes, bytes]]:
    # Starlette adds content-length and a default content-type; keep only content-length
    # (the upstream's content-type, if any, is already in the relayed headers).
    return [(name, value) for name, value in response.raw_headers if name == b"content-length"]


async def _relay(reply: Reply) -> AsyncIterator[bytes]:
    assert not isinstance(reply.body, bytes)
    try:
        async for chunk in reply.body:
            yield chunk
    except UpstreamError as exc:
        # The status line is already sent: all we can do is break the connection off, so the
        # client sees a truncated stream as an error instead of a clean, silently short end.
        logger.warning("upstream stream broke off mid-response: %s", exc.message)
        raise
    finally:
        # Runs on normal end, on upstream failure, and when the client disconnects (Starlette
        # cancels this generator): the upstream connection is dropped, so generation stops.
        reply.close()
