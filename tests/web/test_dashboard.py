"""The dashboard (`/dashboard`): a static page served without credentials, and, in headless
Chromium against the real proxy on a socket with live sessions sent by the OpenAI SDK, the
session API's numbers in its table, chart and list of compactions."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from playwright.async_api import Page, expect

from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.settings import Settings
from proxy.web import create_app
from tests.browser import Tab, chromium_or_skip, headless_tab
from tests.builders import assistant, system, user
from tests.conftest import make_settings
from tests.servers import serve
from tests.web.test_admin import ADMIN, CONTEXT, MODEL, WINDOW, WORDS

LONG = 60  # repetitions of WORDS in a user turn: a few turns fill the window
SHORT = 2
# Fields of the sessions table shown as integers with thousands separators.
INTEGER_FIELDS = ("turns", "compactions", "tokens_sent", "tokens_forwarded", "tokens_saved")
MISSING = "\N{EN DASH}"  # what the page shows for an unknown value


@pytest.fixture
def upstream() -> MockUpstream:
    return MockUpstream(window=WINDOW)


@pytest.fixture
def settings(upstream_url: str) -> Settings:
    return make_settings(upstream_url, context=CONTEXT, admin={"token": ADMIN})


@dataclass
class Proxy:
    """The real proxy on a loopback socket, and its app (to wait for its background work)."""

    app: FastAPI
    url: str

    async def converse(self, key: str, turns: int, *, repeat: int, session: str = "") -> None:
        """A conversation of `turns` user turns sent with the SDK; `session` pins its id."""
        headers = {"X-Session-Id": session} if session else {}
        messages = [system("Be brief.")]
        async with openai.AsyncOpenAI(
            api_key=key, base_url=f"{self.url}/v1", max_retries=0, default_headers=headers
        ) as client:
            for turn in range(turns):
                messages.append(user(f"step {turn}: " + WORDS * repeat))
                params: dict[str, Any] = {"model": MODEL, "messages": messages}
                completion = await client.chat.completions.create(**params)
                messages.append(assistant(completion.choices[0].message.content or ""))
        # The timeline and context report are written after each answer has gone out.
        service: ProxyService = self.app.state.service
        await service.settle()

    async def api(self, path: str, **params: str) -> dict[str, Any]:
        """A session API answer, as the admin."""
        async with httpx.AsyncClient(base_url=self.url) as http:
            response = await http.get(
                path, params=params, headers={"authorization": f"Bearer {ADMIN}"}
            )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@pytest.fixture
async def proxy(settings: Settings) -> AsyncIterator[Proxy]:
    app = create_app(settings)
    async with serve(app) as url:
        yield Proxy(app, url)


@pytest.fixture
async def tab() -> AsyncIterator[Tab]:
    async with headless_tab(chromium_or_skip()) as opened:
        yield opened


def percent(pressure: float) -> str:
    """The pressure as the page writes it: JavaScript's `(p * 100).toFixed(1)`, which rounds
    the exact binary value half up (Python's own formatting would round half to even)."""
    exact = Decimal(pressure * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"{exact}%"


def expected_row(session: dict[str, Any]) -> dict[str, str]:
    row = {name: f"{session[name]:,}" for name in INTEGER_FIELDS}
    pressure = session["last_pressure"]
    row["last_pressure"] = MISSING if pressure is None else percent(pressure)
    model = session["model"] or MISSING
    return {"id": session["id"], "tenant": session["tenant"], "model": model, **row}


# The table as the page shows it: the text of each cell, by field, row by row.
_READ_TABLE = """() => [...document.querySelectorAll("#sessions tbody tr")].map((row) =>
  Object.fromEntries([...row.cells].map((cell) => [cell.dataset.field, cell.textContent])))"""

# The pressure chart's points and compaction markers, with where they were drawn.
_READ_CHART = """() => {
  const chart = document.getElementById("pressure-chart");
  const points = [...chart.querySelectorAll("circle.point")].map((c) => ({
    turn: Number(c.dataset.turn), pressure: Number(c.dataset.pressure),
    action: c.dataset.action, x: Number(c.getAttribute("cx"))}));
  const markers = [...chart.querySelectorAll("g.marker")].map((m) => ({
    turn: Number(m.dataset.turn), action: m.dataset.action,
    x: Number(m.querySelector("line").getAttribute("x1"))}));
  return {points, markers};
}"""


async def read_table(page: Page) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = await page.evaluate(_READ_TABLE)
    return rows


async def live_sessions(proxy: Proxy) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Three sessions of two tenants, one compacted; the API's list and that one's detail."""
    await proxy.converse("sk-alice", 6, repeat=LONG, session="build-agent")
    await proxy.converse("sk-alice", 2, repeat=SHORT, session="quick-question")
    await proxy.converse("sk-bob", 1, repeat=SHORT)  # no header: the id is derived
    listing = await proxy.api("/v1/compaction/sessions")
    sessions: list[dict[str, Any]] = listing["data"]
    [long] = [s for s in sessions if s["id"] == "build-agent"]
    detail = await proxy.api("/v1/compaction/sessions/build-agent", tenant=long["tenant"])
    assert len(sessions) == 3
    assert detail["compactions"] >= 1, detail  # else the chart would have nothing to mark
    return sessions, detail


async def test_page_and_assets_are_served_without_credentials(client: httpx.AsyncClient) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "dashboard/static/dashboard.js" in page.text
    # Nothing but this proxy may be loaded or called: the page works offline and the token
    # in its fragment cannot be sent anywhere else.
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    script = await client.get("/dashboard/static/dashboard.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "Authorization" in script.text
    style = await client.get("/dashboard/static/dashboard.css")
    assert style.headers["content-type"].startswith("text/css")


@pytest.mark.parametrize("name", ["dashboard.html", "../dashboard.py", "other.js"])
async def test_only_the_page_assets_are_served(client: httpx.AsyncClient, name: str) -> None:
    response = await client.get(f"/dashboard/static/{name}")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_table_shows_every_session_as_the_api_reports_it(proxy: Proxy, tab: Tab) -> None:
    sessions, _ = await live_sessions(proxy)
    page = tab.page
    await page.goto(f"{proxy.url}/dashboard#token={ADMIN}")
    await expect(page.locator("#sessions tbody tr")).to_have_count(len(sessions))
    # Sorted by pressure, highest first, when the page opens.
    by_pressure = sorted(sessions, key=lambda s: (-(s["last_pressure"] or 0), s["id"]))
    table = await read_table(page)
    # Seen moments ago; the exact seconds depend on the clock.
    assert all(re.fullmatch(r"\d+ s ago", row.pop("last_seen")) for row in table)
    assert table == [expected_row(s) for s in by_pressure]
    await expect(page.locator("#total-sessions")).to_have_text("3")
    await page.click("#sessions th[data-key=turns] button")
    by_turns = sorted(sessions, key=lambda s: (-s["turns"], s["id"]))
    assert [row["id"] for row in await read_table(page)] == [s["id"] for s in by_turns]
    # The token was taken out of the address bar, and nothing failed in the page.
    assert "token" not in page.url
    assert tab.errors == []


async def test_chart_shows_a_session_turns_and_its_compactions(proxy: Proxy, tab: Tab) -> None:
    _, detail = await live_sessions(proxy)
    page = tab.page
    await page.goto(f"{proxy.url}/dashboard#token={ADMIN}")
    await page.click("#sessions tbody tr[data-id=build-agent]")
    await expect(page.locator("#detail-id")).to_have_text("build-agent")
    timeline = detail["timeline"]
    await expect(page.locator("#pressure-chart circle.point")).to_have_count(len(timeline))
    chart = await page.evaluate(_READ_CHART)
    assert [(p["turn"], p["pressure"], p["action"]) for p in chart["points"]] == [
        (p["turn"], p["pressure"], p["action"]) for p in timeline
    ]
    compacted = [p for p in timeline if p["action"] != "none"]
    assert [(m["turn"], m["action"]) for m in chart["markers"]] == [
        (p["turn"], p["action"]) for p in compacted
    ]
    # Each marker stands at its turn's point.
    x_of = {p["turn"]: p["x"] for p in chart["points"]}
    assert all(m["x"] == x_of[m["turn"]] for m in chart["markers"])
    # Tokens saved over time: the running sum of what each turn did not forward.
    saved = sum(p["tokens_before"] - p["tokens_after"] for p in timeline)
    last = page.locator("#saved-chart circle.point").last
    await expect(last).to_have_attribute("data-saved", str(saved))
    # Recent compactions list this session's history.
    recent = page.locator("#compactions tbody tr[data-id=build-agent]")
    await expect(recent).to_have_count(len(detail["history"]))
    assert tab.errors == []


async def test_asks_for_a_token_and_tells_a_tenant_key_from_the_admin_one(
    proxy: Proxy, tab: Tab
) -> None:
    await proxy.converse("sk-alice", 1, repeat=SHORT, session="alice-only")
    await proxy.converse("sk-bob", 1, repeat=SHORT, session="bob-only")
    page = tab.page
    await page.goto(f"{proxy.url}/dashboard")
    await expect(page.locator("#login")).to_be_visible()
    await expect(page.locator("#content")).to_be_hidden()
    # A tenant's own key is a credential too: its sessions only, and the page says so.
    await page.fill("#token-input", "sk-alice")
    await page.press("#token-input", "Enter")
    await expect(page.locator("#scope-note")).to_be_visible()
    await expect(page.locator("#sessions tbody tr")).to_have_count(1)
    await expect(page.locator("#sessions tbody tr td[data-field=id]")).to_have_text("alice-only")
    await page.click("#scope-sign-out")
    await page.fill("#token-input", ADMIN)
    await page.press("#token-input", "Enter")
    await expect(page.locator("#sessions tbody tr")).to_have_count(2)
    await expect(page.locator("#scope-note")).to_be_hidden()
