"""Headless Chromium, for tests that look at a page the way a person would.

The browser is the system's (Debian's `chromium`, which `.ci/run` installs), driven by
Playwright's Python package through `executable_path`: Playwright's own browser downloads
are never used, so nothing but package registries is needed. On a machine without Chromium
the tests that need it are skipped, with the reason, like the ones that need redis-server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from playwright.async_api import ConsoleMessage, Error, Page, async_playwright

from tests import optional

# Containers often give /dev/shm only 64 MB, where Chromium's renderer crashes on big pages.
ARGS = ("--disable-dev-shm-usage",)


def chromium_or_skip() -> str:
    """The executable (`tests.optional`: CHROMIUM names another), or skip the calling test
    when the machine has no Chromium."""
    return optional.require("chromium")


@dataclass
class Tab:
    """A page in the headless browser, and what went wrong in it so far."""

    page: Page
    errors: list[str] = field(default_factory=list)
    """Uncaught script exceptions and console errors (a refused fetch, a CSP violation)."""

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text} ({message.location.get('url')})")

    def _exception(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error}")


@asynccontextmanager
async def headless_tab(executable: str) -> AsyncIterator[Tab]:
    """A fresh browser (own profile, so no storage carries over) with one open tab."""
    async with async_playwright() as playwright:
        # Playwright adds --headless, and --no-sandbox (its default): CI runs as root, where
        # Chromium's sandbox will not start.
        browser = await playwright.chromium.launch(executable_path=executable, args=list(ARGS))
        try:
            page = await browser.new_page()
            tab = Tab(page)
            page.on("console", tab._console)
            page.on("pageerror", tab._exception)
            yield tab
        finally:
            await browser.close()
