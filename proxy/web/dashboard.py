"""The operator's dashboard: one static page whose script draws everything from the session API.

The page and its assets hold no data and need no credential: the admin token reaches the
page in the URL fragment (`/dashboard#token=...`), which browsers never send to a server,
and the script sends it as a bearer token on each API call. So these routes only serve
files from `proxy/web/static/`, and the Content-Security-Policy lets the page load nothing
and talk to nothing but this proxy, so it works offline and cannot leak the token elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

STATIC = Path(__file__).resolve().parent / "static"

# The files the page loads, with their types: an explicit list, so no other path under
# static/ (or above it) can ever be served from here.
ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

_HEADERS = {
    # Session ids and models come from clients: the script inserts them as text only, and
    # this policy forbids inline script and any other origin should that ever slip.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    # Revalidated each load: a proxy upgrade must not leave an old script driving a new API.
    "cache-control": "no-cache",
}


async def dashboard(request: Request) -> Response:
    """The dashboard page itself (no data: the script fetches it)."""
    return FileResponse(
        STATIC / "dashboard.html", media_type="text/html; charset=utf-8", headers=_HEADERS
    )


async def asset(request: Request) -> Response:
    """One of the page's scripts or style sheets."""
    name = str(request.path_params["name"])
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail="Not Found")
    return FileResponse(STATIC / name, media_type=media_type, headers=_HEADERS)


DASHBOARD_ROUTES: list[BaseRoute] = [
    Route("/dashboard", dashboard, methods=["GET"]),
    Route("/dashboard/static/{name}", asset, methods=["GET"]),
]
