"""A serving process freezes what it built at startup out of the garbage collector's sight."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from asgi_lifespan import LifespanManager

from proxy.web import create_app
from tests.conftest import make_settings


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    # The rest of the test process collects its cycles as before.
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
async def test_a_serving_app_freezes_its_startup_heap(upstream_url: str) -> None:
    app = create_app(make_settings(upstream_url), freeze_heap=True)
    async with LifespanManager(app):
        frozen = gc.get_freeze_count()
        # The service, the modules and the encoders: what a full collection no longer walks.
        assert frozen > 10_000
        assert not _tracked(app.state.service)


@pytest.mark.usefixtures("unfrozen")
async def test_a_test_app_leaves_the_collector_alone(upstream_url: str) -> None:
    app = create_app(make_settings(upstream_url))
    async with LifespanManager(app):
        assert gc.get_freeze_count() == 0
        assert _tracked(app.state.service)


def _tracked(thing: object) -> bool:
    """Whether a collection would walk `thing` (by identity: `in` would call `__eq__`)."""
    return any(found is thing for found in gc.get_objects())
