"""aider's files message through the proxy: its working set, forwarded whole on every request.

aider re-sends the files added to the chat as one user message on every request, after the
history and before the new ask. In a 16k window that message was folded into the compaction
block, then forwarded whole in the cooldown, then folded again. The proxy tells it apart from
history by the request before (`proxy.core.working_set`), on either store, and keeps it whole
while the request fits; the history before it is what a compaction removes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore
from proxy.core.summary import detach_notes
from proxy.mock_upstream import MockUpstream
from proxy.web import create_app
from tests.conftest import make_settings
from tests.redis_server import RedisServer
from tests.service.agent_run import chat_requests, sdk_for

WINDOW = 16_000
FILES_OPENING = "I have *added these files to the chat* so you can go ahead and edit them."


def files_message(version: int) -> dict[str, Any]:
    """Eight files of about 1,000 tokens each, the first at `version`."""
    listed = []
    for n in range(8):
        lines = "\n".join(
            f"def handler_{n}_{i}(request):  # v{version if n == 0 else 1}\n    return {i}"
            for i in range(60)
        )
        listed.append(f"src/module_{n}.py\n```\n{lines}\n```")
    return {"role": "user", "content": FILES_OPENING + "\n\n" + "\n\n".join(listed)}


def aider_request(turn: int) -> list[dict[str, Any]]:
    """aider's layout: system, the done history, the files, "Ok.", the new ask."""
    history: list[dict[str, Any]] = []
    for n in range(turn):
        history.append({"role": "user", "content": f"Change {n}: " + "rename it, " * 300})
        history.append({"role": "assistant", "content": f"Done {n}: " + "renamed " * 300})
    return [
        {"role": "system", "content": "Act as an expert software developer."},
        *history,
        files_message(version=turn // 2),
        {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
        {"role": "user", "content": f"Change {turn}: make handler {turn} async."},
    ]


@asynccontextmanager
async def proxy(
    kind: str, provider: MockUpstream, request: pytest.FixtureRequest
) -> AsyncIterator[openai.AsyncOpenAI]:
    context = {"output_reserved": 1000, "cooldown_turns": 0}
    if kind == "embedded":
        settings = make_settings("http://unused.invalid/v1", context=context)
        app = create_app(settings, store=MemoryStore(), upstream=AsgiUpstream(provider.app))
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        settings = make_settings(
            "http://unused.invalid/v1", context=context, redis={"url": server.url}
        )
        app = create_app(settings, upstream=AsgiUpstream(provider.app))
    async with LifespanManager(app), sdk_for(app, "sk-aider") as client:
        yield client


@pytest.mark.parametrize("kind", ["embedded", "redis"])
async def test_the_files_message_is_forwarded_whole_on_every_request(
    kind: str, request: pytest.FixtureRequest
) -> None:
    provider = MockUpstream(window=WINDOW, strict=True, roles_alternate=True)
    async with proxy(kind, provider, request) as sdk:
        for turn in range(8):
            messages: Any = aider_request(turn)
            await sdk.chat.completions.create(
                model="mock-model", messages=messages, extra_headers={"X-Session-Id": "aider-1"}
            )
    forwarded = [r.json()["messages"] for r in chat_requests(provider)]
    assert len(forwarded) == 8
    assert provider.overflows == 0
    for turn, sent in enumerate(forwarded):
        whole = files_message(version=turn // 2)
        # The first request has no request before it to tell the files apart by; from the
        # second on, the latest copy is there whole, and the new ask last, as sent.
        if turn > 0:
            # Alone, or opened by the block (roles alternate here: the block cannot stand
            # alone before a user message).
            assert whole in [detach_notes(m)[0] for m in sent], turn
        assert sent[-1] == aider_request(turn)[-1]
    # The history before the files did go: the compaction had something else to remove.
    assert len(json.dumps(forwarded[-1])) < len(json.dumps(aider_request(7)))
