"""The session API under `/v1/compaction/`: what the proxy did to each conversation, and the
operator's hand on it (compact, revert, forget, runtime config).

Tenant-scoped like the chat path: a caller's credential (`Authorization` or `api-key`)
names its tenant (through `auth.keys` when set: an unlisted key is a 401), and it sees only
that tenant's sessions; another tenant's session is a 404, never a 403, so ids cannot be
probed. `admin.token` as the bearer token unlocks every tenant (`?tenant=` narrows it to
one) and the runtime config. FastAPI serves these routes: they validate input and are
documented at `/docs`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import ValidationError

from proxy.adapters.store import StoreUnavailableError
from proxy.core.headers import KEY_HEADERS
from proxy.core.session import checked_session_id
from proxy.errors import (
    AuthenticationError,
    InvalidRequestError,
    PermissionDeniedError,
    StoreDownError,
)
from proxy.service import ProxyService
from proxy.service.operator import SessionRef, public_context
from proxy.service.replies import Incoming
from proxy.service.turns import credentials_of
from proxy.settings import Settings
from proxy.web import schemas

router = APIRouter(prefix="/v1/compaction", tags=["compaction"])


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str | None
    """The caller's tenant; None for the admin, who sees every tenant."""
    incoming: Incoming

    @property
    def admin(self) -> bool:
        return self.tenant is None


def _service(request: Request) -> ProxyService:
    return cast(ProxyService, request.app.state.service)


def _incoming(request: Request) -> Incoming:
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    return Incoming(request.method, request.url.path, request.url.query, headers)


def caller(request: Request) -> Caller:
    """Who is calling: the admin (the admin token as bearer) or a tenant (its credential)."""
    incoming = _incoming(request)
    admin_token = cast(str | None, request.app.state.admin_token)
    bearer = (incoming.header("authorization") or "").removeprefix("Bearer ").strip()
    if admin_token and bearer and secrets.compare_digest(bearer, admin_token):
        return Caller(None, incoming)
    credentials = credentials_of(incoming)
    if not any(name.lower() in KEY_HEADERS for name, _ in credentials):
        raise AuthenticationError(
            "Send your API key as `Authorization: Bearer ...` or `x-api-key` (or the admin "
            "token) to see your sessions."
        )
    return Caller(_service(request).tenant_of(credentials), incoming)


def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
    if not who.admin:
        raise PermissionDeniedError("This needs the admin token (admin.token) as bearer token.")
    return who


CallerDep = Annotated[Caller, Depends(caller)]
AdminDep = Annotated[Caller, Depends(admin)]
TenantQuery = Annotated[
    str | None, Query(description="Admin only: the session's tenant (looked up when left out).")
]


async def _ref(request: Request, who: Caller, session_id: str, tenant: str | None) -> SessionRef:
    # The rule the chat path applies to X-Session-Id: a 400 that does not repeat the id.
    checked_session_id(session_id, param="session_id")
    wanted = who.tenant if not who.admin else tenant
    return await _service(request).operator.find(wanted, session_id)


@router.get("/sessions", response_model=schemas.SessionList)
async def list_sessions(
    request: Request,
    who: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    tenant: TenantQuery = None,
) -> dict[str, Any]:
    """Sessions, most recently seen first: turns, pressure, compactions, tokens saved."""
    scope = who.tenant if not who.admin else tenant
    with _store_errors():
        rows, more = await _service(request).operator.sessions(scope, limit=limit, offset=offset)
    return {"object": "list", "data": rows, "limit": limit, "offset": offset, "has_more": more}


@router.get("/sessions/{session_id}", response_model=schemas.SessionDetail)
async def get_session(
    request: Request, who: CallerDep, session_id: str, tenant: TenantQuery = None
) -> dict[str, Any]:
    """The last forwarded request's breakdown, the window, pressure, trigger and target, the
    calibration, the compaction history and the per-turn timeline."""
    with _store_errors():
        ref = await _ref(request, who, session_id, tenant)
        return await _service(request).operator.detail(ref)


@router.get("/sessions/{session_id}/messages", response_model=schemas.Messages)
async def get_messages(
    request: Request,
    who: CallerDep,
    session_id: str,
    view: Literal["original", "forwarded"] = "original",
    tenant: TenantQuery = None,
) -> dict[str, Any]:
    """The archived original history, or what the proxy forwards for it now."""
    with _store_errors():
        ref = await _ref(request, who, session_id, tenant)
        messages = await _service(request).operator.messages(ref, view)
    return {"object": "list", "view": view, "data": messages}


@router.post("/sessions/{session_id}/compact", response_model=schemas.CompactResult)
async def compact_session(
    request: Request,
    who: CallerDep,
    session_id: str,
    options: Annotated[schemas.CompactOptions | None, Body()] = None,
    tenant: TenantQuery = None,
) -> dict[str, Any]:
    """Compact now (everything but the pinned and recent messages); the session's next
    request forwards the result. Returns the new breakdown."""
    strategy = options.strategy if options is not None else None
    with _store_errors():
        ref = await _ref(request, who, session_id, tenant)
        return await _service(request).operator.compact(ref, who.incoming, strategy)


@router.post("/sessions/{session_id}/revert", response_model=schemas.RevertResult)
async def revert_session(
    request: Request, who: CallerDep, session_id: str, tenant: TenantQuery = None
) -> dict[str, Any]:
    """Drop the latest checkpoint (undo the last compaction)."""
    with _store_errors():
        ref = await _ref(request, who, session_id, tenant)
        return await _service(request).operator.revert(ref)


@router.delete("/sessions/{session_id}", response_model=schemas.Deleted)
async def delete_session(
    request: Request, who: CallerDep, session_id: str, tenant: TenantQuery = None
) -> dict[str, Any]:
    """Forget the session: its state, history, timeline, checkpoints and archive."""
    with _store_errors():
        ref = await _ref(request, who, session_id, tenant)
        await _service(request).operator.forget(ref)
    return {"id": session_id, "object": "compaction.session", "deleted": True}


@router.get("/config", response_model=schemas.ContextConfig)
async def get_config(request: Request, who: AdminDep) -> dict[str, Any]:
    """The runtime `context` settings (admin)."""
    settings = cast(Settings, request.app.state.settings)
    return public_context(settings.context.as_dict())


@router.patch("/config", response_model=schemas.ContextConfig)
async def patch_config(
    request: Request, who: AdminDep, changes: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Change `context` settings at run time (admin): validated like the config file,
    applied from the next request on, on this replica (the file is not rewritten)."""
    settings = cast(Settings, request.app.state.settings)
    if "summary_brain" in changes:
        raise InvalidRequestError(
            "summary_brain cannot change at run time: its client is built at startup; "
            "change it in the config file and restart.",
            param="summary_brain",
        )
    try:
        updated = settings.with_context(changes)
    except ValidationError as exc:
        raise InvalidRequestError(_first_problem(exc), param="context") from exc
    request.app.state.settings = updated
    _service(request).set_policies(updated.model_policies())
    return public_context(updated.context.as_dict())


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"]) or "context"
    return f"context.{key}: {error['msg']}"


@contextmanager
def _store_errors() -> Iterator[None]:
    """Turn a store outage into a 503 the operator can read."""
    try:
        yield
    except StoreUnavailableError as exc:
        raise StoreDownError(f"The session store is not usable: {exc}") from exc
