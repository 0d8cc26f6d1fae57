"""The application factory.

I/O is passed in, never reached for: tests and embedders hand in their own `Upstream`,
`Store` or tokenizer `Encoders`; by default they are built from the settings. They are
opened in the app's lifespan, inside the event loop that serves requests, and closed when
it ends.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import SecretStr
from starlette.exceptions import HTTPException

from proxy import __version__
from proxy.adapters.store import Store, open_store
from proxy.adapters.summarizer import Summarizer
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.adapters.upstream import AiohttpUpstream, Upstream
from proxy.core.breaker import Breaker
from proxy.core.capsule import MIN_KEY_BYTES, Sealer
from proxy.errors import ProxyError
from proxy.observability.metrics import Metrics
from proxy.service import ProxyService, ServiceConfig
from proxy.settings import Settings
from proxy.web import admin, routes
from proxy.web.dashboard import DASHBOARD_ROUTES
from proxy.web.docs import docs_routes
from proxy.web.middleware import PathGuard, RequestCounter

logger = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    store: Store | None = None,
    encoders: Encoders | None = None,
    freeze_heap: bool = False,
) -> FastAPI:
    """The proxy as an ASGI app, configured by `settings`.

    `freeze_heap`: once started, move every object alive (the modules, the encoders, the
    service) out of the garbage collector's sight, as a serving process should; a test
    process that builds many apps must not, or it would keep each one's cycles for good.
    """
    # The app's own registry (not prometheus-client's global one): two apps in one process
    # count apart, and `/metrics` shows this app's numbers only.
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = upstream or AiohttpUpstream(
            settings.upstream.base_url,
            timeout_s=settings.upstream.timeout_s,
            max_connections=settings.upstream.max_connections,
            keepalive_s=settings.upstream.keepalive_s,
        )
        brain = settings.context.summary_brain
        # Its own pool and time-out: a slow summary must not wait behind, or hold up, the
        # forwarded traffic. An upstream handed in (in-process, for tests) writes the
        # summaries too, unless the brain has a URL of its own.
        brain_client: Upstream = (
            upstream
            if upstream is not None and not brain.base_url
            else AiohttpUpstream(
                brain.base_url or settings.upstream.base_url,
                timeout_s=brain.timeout_s,
                max_connections=settings.upstream.max_connections,
                keepalive_s=settings.upstream.keepalive_s,
            )
        )
        sessions = store or open_store(settings.redis)
        _warn_if_one_tenant(settings)
        # Loaded once, off the event loop (reading the files takes about a second); when they
        # cannot be loaded this logs the one startup warning and counts approximately.
        tokenizers = encoders if encoders is not None else await asyncio.to_thread(load_encoders)
        await client.open()
        if brain_client is not client:
            await brain_client.open()
        service = ProxyService(
            upstream=client,
            store=sessions,
            encoders=tokenizers,
            config=_service_config(settings, _compaction_key(settings)),
            summarizer=Summarizer(
                brain_client,
                model=brain.model,
                # The brain's own key, else the proxy's upstream key when the brain is that
                # upstream; else (None) the client's credentials.
                api_key=_secret(brain.api_key)
                or (None if brain.base_url else _secret(settings.upstream.api_key)),
                window=brain.context_window,
                # A server of its own cached none of the conversation: no prefix form there.
                own_upstream=brain.base_url is not None,
                cached_price=brain.cached_input_price,
            ),
            metrics=metrics,
        )
        _attach(app, service, settings)
        if freeze_heap:
            _freeze_heap()
        try:
            yield
        finally:
            await service.aclose()
            await client.aclose()
            if brain_client is not client:
                await brain_client.aclose()
            await sessions.aclose()
            metrics.worker_ended()

    # /docs documents the session API; the proxied OpenAI API is OpenAI's own, not ours.
    app = FastAPI(
        title="compaction-proxy",
        version=__version__,
        description="The session API of compaction-proxy: what it did to each conversation.",
        lifespan=lifespan,
        # Served by `proxy.web.docs` instead: FastAPI's page loads Swagger UI from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.add_exception_handler(ProxyError, routes.proxy_error)
    app.add_exception_handler(HTTPException, routes.http_error)
    app.add_exception_handler(RequestValidationError, routes.validation_error)
    app.add_middleware(RequestCounter, metrics=metrics)
    # Outermost: the counter, the routes and the session API all see the normalized path.
    app.add_middleware(PathGuard)
    app.state.metrics = metrics
    app.router.routes[:0] = [
        routes.CHAT_ROUTE,
        routes.RESPONSES_ROUTE,
        routes.COMPACT_ROUTE,
        routes.INPUT_TOKENS_ROUTE,
        routes.MESSAGES_ROUTE,
        routes.COUNT_TOKENS_ROUTE,
    ]
    app.include_router(admin.router)
    app.router.routes.extend(DASHBOARD_ROUTES)
    app.router.routes.extend(docs_routes(app.title, app.openapi_url or "/openapi.json"))
    app.router.routes.extend(routes.ROUTES)  # the /v1 catch-all after the session API
    return app


def _service_config(settings: Settings, compaction_key: bytes | None) -> ServiceConfig:
    return ServiceConfig(
        policies=settings.model_policies(),
        rules=settings.hook_rules(),
        upstream_api_key=_secret(settings.upstream.api_key),
        client_keys=settings.auth.client_keys(),
        summary_timeout_s=settings.context.summary_brain.timeout_s,
        summary_breaker=Breaker(
            threshold=settings.context.summary_brain.breaker_failures,
            cool_off_s=settings.context.summary_brain.breaker_cool_off_s,
        ),
        summary_concurrency=settings.context.summary_brain.max_concurrent,
        chat_commands=settings.chat_commands,
        log_content=settings.log.content,
        learned_ttl_s=settings.context.learned_ttl_s,
        compaction_by=settings.compaction_handler(),
        sealer=Sealer(compaction_key) if compaction_key is not None else None,
        provider_edits_by=settings.messages.context_management,
    )


def _compaction_key(settings: Settings) -> bytes | None:
    """`responses.compaction_key`; when it is unset and the proxy answers compaction, one
    made up for this process's life (the settings allow that only to a single process on
    the embedded store), said once in the log: its items are refused after a restart."""
    configured = _secret(settings.responses.compaction_key)
    if configured is not None:
        return configured.encode()
    if settings.compaction_handler() != "proxy":
        return None
    logger.warning(
        "responses.compaction_key is not set: the proxy signs its compaction items with a key "
        "of this process's own, and refuses them after a restart; set the key to keep "
        "compacted histories usable across restarts"
    )
    return secrets.token_bytes(MIN_KEY_BYTES)


def _attach(app: FastAPI, service: ProxyService, settings: Settings) -> None:
    """What the routes read from the app's state."""
    app.state.service = service
    app.state.max_body_bytes = settings.server.max_body_bytes
    app.state.settings = settings
    app.state.admin_token = _secret(settings.admin.token)


def _freeze_heap() -> None:
    """Move every object alive out of the garbage collector's sight.

    Its oldest generation holds everything imported and built by startup, about 120,000
    objects that live as long as the process; every full collection walked them all, a 50-60
    ms pause of the event loop that every request in flight waited out (the 8-agent bench's
    p99). Frozen, they are never walked again, and a full collection scans only what requests
    made since: about 1 ms.
    """
    gc.collect()
    gc.freeze()


def _warn_if_one_tenant(settings: Settings) -> None:
    # Not refused: one user in front of their own key (the quick start) is this setup, and
    # it is documented; a shared deployment learns from this line what to set.
    if settings.upstream.api_key is not None and not settings.auth.keys:
        logger.warning(
            "upstream.api_key is set and auth.keys is not: every client uses the proxy's "
            "key and all share one tenant (each sees and deletes the others' sessions); "
            "set auth.keys to give each client key its own tenant"
        )


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None
