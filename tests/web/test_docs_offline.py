"""/docs works offline: the page loads nothing from another origin, and what it loads is here."""

from __future__ import annotations

import re

import httpx

# Every URL the page names: in src= and href= attributes and in the script's `url: '...'`.
URLS = re.compile(r"""(?:src|href)="([^"]+)"|url: '([^']+)'""")


async def test_docs_loads_only_the_proxys_own_urls_and_each_answers(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    urls = [a or b for a, b in URLS.findall(page.text)]
    assert len(urls) >= 4  # style sheet, icon, script, schema
    assert all(url.startswith("/") and not url.startswith("//") for url in urls), urls
    assert "http://" not in page.text
    assert "https://" not in page.text
    assert '"validatorUrl": null' in page.text
    for url in urls:
        answer = await client.get(url)
        assert answer.status_code == 200, url
        assert len(answer.content) > 1000, url
    script = await client.get("/docs/static/swagger-ui-bundle.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert b"SwaggerUIBundle" in script.content


async def test_docs_assets_are_an_explicit_list(client: httpx.AsyncClient) -> None:
    for name in ("redoc.standalone.js", "..%2Fcore.py", "missing.js"):
        assert (await client.get(f"/docs/static/{name}")).status_code == 404, name


async def test_docs_requests_are_counted_as_docs(client: httpx.AsyncClient) -> None:
    await client.get("/docs/static/swagger-ui.css")
    metrics = (await client.get("/metrics")).text
    assert 'compaction_proxy_requests_total{route="docs",status="200"} 1.0' in metrics
