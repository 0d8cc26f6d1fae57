"""/docs served whole by the proxy: Swagger UI's script and style sheet come from here too.

FastAPI's own /docs page loads them from a CDN, so on a machine without internet it stays
blank. The `fastapi-offline` package carries the same files; these routes serve them, from an
explicit list (nothing else under its folder, or above it, can be served from here), under
/docs/static/ so they are counted with the page (`proxy.web.middleware.ROUTE_PREFIXES`).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route

STATIC = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}


def docs_routes(title: str, openapi_url: str) -> list[BaseRoute]:
    """The /docs page and its assets, for the app whose schema is at `openapi_url`."""

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{root}/docs/static/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/static/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/static/favicon.png",
            oauth2_redirect_url=None,
            # Swagger UI would otherwise send the schema to validator.swagger.io for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    return [
        Route("/docs", page, methods=["GET"], include_in_schema=False),
        Route("/docs/static/{name}", asset, methods=["GET"], include_in_schema=False),
    ]


async def asset(request: Request) -> Response:
    """Swagger UI's script, style sheet or icon."""
    name = str(request.path_params["name"])
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail="Not Found")
    return FileResponse(STATIC / name, media_type=media_type)
