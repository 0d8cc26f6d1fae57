"""/healthz and /readyz."""

from __future__ import annotations

import httpx
from asgi_lifespan import LifespanManager

from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import free_port


async def test_ready_with_embedded_store(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready"})


async def test_not_ready_when_redis_unreachable(upstream_url: str) -> None:
    settings = make_settings(upstream_url, redis={"url": f"redis://127.0.0.1:{free_port()}/0"})
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport) as http:
        ready = await http.get("http://proxy/readyz")
        alive = await http.get("http://proxy/healthz")
    assert ready.status_code == 503
    assert "Redis is not usable" in ready.json()["problems"]["store"]
    assert alive.status_code == 200
