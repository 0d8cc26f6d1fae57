"""An overflow on the Messages API: the provider's window is smaller than the proxy was told,
so the request goes out whole, the provider refuses it with Anthropic's `prompt is too long:
N tokens > M maximum` (before any event, for a stream), and the proxy compacts hard and
retries once, before the client sees anything; the window it stated is learned."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from asgi_lifespan import LifespanManager

from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings
from tests.mock_messages import MODEL, READ_FILE, assistant, text, tool_result, tool_use, user
from tests.servers import serve
from tests.service.agent_run import tool_output
from tests.service.messages_run import anthropic_sdk

PROVIDER_WINDOW = 3000
TOLD_WINDOW = 16_000  # what the proxy believes: it never compacts before sending


def history(rounds: int) -> list[Any]:
    """`rounds` of a user asking, a tool call, its long result and an answer."""
    messages: list[Any] = []
    for n in range(rounds):
        messages += [
            user(f"Read module {n}."),
            assistant(tool_use(f"toolu_{n}", f"src/module_{n}.py")),
            user(tool_result(f"toolu_{n}", tool_output("m", n))),
            assistant(text(f"Module {n} read.")),
        ]
    return [*messages, user("Now summarize what you read.")]


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(window=PROVIDER_WINDOW, strict=True, default=Reply(content="Summary."))


@pytest.fixture
async def sdk(provider: MockUpstream) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with serve(provider.app) as base_url:
        settings = make_settings(
            f"{base_url}/v1", context={"context_window": TOLD_WINDOW, "output_reserved": 200}
        )
        app = create_app(settings)
        async with LifespanManager(app), anthropic_sdk(app, "sk-ant-overflow") as client:
            yield client


def body(rounds: int) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 200, "messages": history(rounds), "tools": [READ_FILE]}


async def test_a_refused_request_is_compacted_and_retried_once(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream
) -> None:
    raw = await sdk.messages.with_raw_response.create(**body(7))
    message = await raw.parse()
    assert message.content[0].type == "text"
    assert message.content[0].text == "Summary."
    assert raw.headers["x-compaction-applied"] != "none"
    assert provider.overflows == 1
    assert provider.strict_rejections == 0
    # The window the error stated is learned: the next, longer turn is compacted first.
    again = await sdk.messages.with_raw_response.create(**body(8))
    assert (await again.parse()).content[0].type == "text"
    assert provider.overflows == 1


async def test_a_stream_refused_before_any_event_is_retried_before_the_client_sees_it(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream
) -> None:
    async with sdk.messages.stream(**body(7)) as stream:
        text_seen = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text_seen == "Summary."
    assert final.usage.input_tokens > 0
    assert provider.overflows == 1
    assert provider.strict_rejections == 0


async def test_an_overflow_compaction_cannot_fix_goes_back_as_the_provider_sent_it(
    sdk: anthropic.AsyncAnthropic, provider: MockUpstream
) -> None:
    provider.window = 300  # below the system prompt alone: nothing to compact will do
    with pytest.raises(anthropic.BadRequestError) as raised:
        await sdk.messages.create(
            **{**body(2), "system": "Follow every rule of the handbook. " * 80}
        )
    assert "prompt is too long" in raised.value.message
    assert raised.value.response.headers["x-should-retry"] == "false"
