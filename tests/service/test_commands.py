"""`ChatCommands`: the proxy answers `/context`, `/compact` and `/context clear` itself, on the
history before the command, whole or streamed; the command never reaches the upstream.

The proxy runs in process over the mock provider (`AsgiUpstream`), on the embedded store and
on Redis where what a command says depends on what the store holds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.messages import Message
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.web import create_app
from tests.builders import assistant, system, user
from tests.conftest import make_settings
from tests.service.stores import STORES, redis_section

CHAT = "/v1/chat/completions"
MODEL = "mock-model"
CONTEXT = {"context_window": 8000, "output_reserved": 500, "keep_recent": 2}
TEXT = "the deploy of the billing service is blocked by a failing migration " * 50
NOTHING_YET = "Nothing to compact yet: this conversation has no stored session."


class Proxy(httpx.AsyncClient):
    """A client of one in-process proxy, with its service and its mock provider at hand."""

    service: ProxyService
    provider: MockUpstream

    async def say(self, history: list[Message], command: str, **headers: str) -> str:
        """The assistant's answer to `command` after `history` (asserting a whole answer)."""
        body = {"model": MODEL, "messages": [*history, user(command)]}
        response = await self.post(CHAT, json=body, headers=headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        choice = response.json()["choices"][0]
        assert (choice["finish_reason"], choice["message"]["role"]) == ("stop", "assistant")
        return str(choice["message"]["content"])

    async def conversation(self, turns: int, **headers: str) -> list[Message]:
        """A conversation of `turns` forwarded turns, as the client holds it after them."""
        messages: list[Message] = [system("Be brief.")]
        for turn in range(turns):
            messages.append(user(f"step {turn}: {TEXT}"))
            body = {"model": MODEL, "messages": messages}
            response = await self.post(CHAT, json=body, headers=headers)
            assert response.status_code == 200, response.text
            messages.append(assistant(response.json()["choices"][0]["message"]["content"]))
        await self.service.settle()
        return messages

    def forwarded(self) -> list[Any]:
        """The chat completions the provider received, as their message lists."""
        return [r.json()["messages"] for r in self.provider.requests if r.path == CHAT]


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    # Loaded once for the module: each app loading its own takes about a second.
    return load_encoders((O200K_BASE,))


@pytest.fixture(params=STORES)
async def proxy(request: pytest.FixtureRequest, encoders: Encoders) -> AsyncIterator[Proxy]:
    provider = MockUpstream()
    settings = make_settings(
        "http://unused.invalid/v1",
        context=CONTEXT,
        chat_commands=True,
        redis=redis_section(request.param, request),
    )
    app = create_app(settings, upstream=AsgiUpstream(provider.app), encoders=encoders)
    transport = httpx.ASGITransport(app=app)
    async with LifespanManager(app), Proxy(transport=transport, base_url="http://proxy") as http:
        http.service, http.provider = app.state.service, provider
        http.headers["authorization"] = "Bearer sk-user"
        yield http


def events(body: bytes) -> list[Any]:
    """The data of each server-sent event, `[DONE]` as is."""
    found = [line.removeprefix(b"data: ") for line in body.split(b"\n\n") if line]
    return [part.decode() if part == b"[DONE]" else json.loads(part) for part in found]


async def test_context_reports_the_history_before_it_and_is_not_forwarded(proxy: Proxy) -> None:
    history = await proxy.conversation(2)
    answer = await proxy.say(history, "/context")
    assert answer.startswith("**Context**")
    assert "of 7,500 prompt tokens" in answer  # the window less the output reserve
    assert "2 turns, 0 compactions" in answer  # the command itself is no turn
    assert len(proxy.forwarded()) == 2


async def test_context_without_a_session_reports_an_empty_one(proxy: Proxy) -> None:
    # A system prompt alone has no body message to name a session by: there is still a
    # context to report (the prompt's tokens), under no session ("-").
    answer = await proxy.say([system("Be brief.")], "/context")
    assert "Session `-`: 0 turns, 0 compactions" in answer
    assert proxy.forwarded() == []


@pytest.mark.parametrize("command", ["/compact", "/context clear"])
async def test_compact_or_clear_without_a_session_has_nothing_to_act_on(
    proxy: Proxy, command: str
) -> None:
    assert await proxy.say([system("Be brief.")], command) == NOTHING_YET
    assert proxy.forwarded() == []


async def test_compact_of_a_session_the_store_never_saw_has_nothing_to_act_on(
    proxy: Proxy,
) -> None:
    # A history the client holds, under a session id no turn was ever counted in (a client
    # naming its own sessions, after a restart on the embedded store). The session API would
    # answer 404; a chat client gets an answer it shows, and nothing is stored for it.
    history = [system("Be brief."), user(TEXT), assistant("noted"), user(TEXT), assistant("ok")]
    answer = await proxy.say(history, "/compact", **{"x-session-id": "never-seen"})
    assert answer == NOTHING_YET
    assert await proxy.service.memory.store.list_sessions(None) == []
    assert proxy.forwarded() == []


async def test_compact_of_a_stored_session_with_nothing_before_the_command(
    proxy: Proxy,
) -> None:
    # The session exists (named by the header), but the command is the whole conversation:
    # as above, an answer rather than the session API's "nothing to compact" error.
    await proxy.conversation(1, **{"x-session-id": "s1"})
    assert await proxy.say([], "/compact", **{"x-session-id": "s1"}) == NOTHING_YET
    assert len(proxy.forwarded()) == 1


async def test_compact_then_clear_act_on_the_history_before_the_command(proxy: Proxy) -> None:
    history = await proxy.conversation(4)
    answer = await proxy.say(history, "/compact")
    assert answer.startswith("Compacted (")
    # The next turn forwards the compacted history, without the command.
    await proxy.post(CHAT, json={"model": MODEL, "messages": [*history, user("go on")]})
    compacted = proxy.forwarded()[-1]
    assert len(compacted) < len(history) + 1
    assert "/compact" not in json.dumps(proxy.forwarded())
    assert (await proxy.say(history, "/context clear")).startswith("Cleared 1 compaction:")
    await proxy.post(CHAT, json={"model": MODEL, "messages": [*history, user("go on")]})
    assert proxy.forwarded()[-1] == [*history, user("go on")]


@pytest.mark.parametrize("usage", [True, False, None], ids=["usage", "no-usage", "no-options"])
async def test_a_streamed_answer_is_a_whole_stream_with_usage_only_if_asked(
    proxy: Proxy, usage: bool | None
) -> None:
    # Nothing was sent to a model, so the usage chunk (when the client asked for one, as
    # the SDK does with `stream_options`) says zero tokens.
    body: dict[str, Any] = {"model": MODEL, "messages": [user("/context")], "stream": True}
    if usage is not None:
        body["stream_options"] = {"include_usage": usage}
    response = await proxy.post(CHAT, json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    found = events(response.content)
    assert found[-1] == "[DONE]"
    chunks = found[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "**Context**" in chunks[1]["choices"][0]["delta"]["content"]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    usages = [chunk["usage"] for chunk in chunks if "usage" in chunk]
    assert usages == (
        [{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}] if usage else []
    )
    assert proxy.forwarded() == []
