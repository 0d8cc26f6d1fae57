"""An overflow on the Responses API: the provider's window is smaller than the proxy was told,
so the request goes out whole, the provider refuses it (a 400, or a stream that fails in its
first events), and the proxy compacts hard and retries once, before the client sees anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from asgi_lifespan import LifespanManager

from proxy.mock_upstream import MockUpstream, Reply
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import serve
from tests.service.agent_run import sdk_for, tool_output

PROVIDER_WINDOW = 3000
TOLD_WINDOW = 16_000  # what the proxy believes: it never compacts before sending


def history(rounds: int) -> list[Any]:
    """`rounds` of a user asking, a function call, its long output and an answer."""
    items: list[Any] = []
    for n in range(rounds):
        call_id = f"call_{n}"
        items += [
            {"role": "user", "content": f"Read module {n}."},
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": call_id,
                "name": "read_file",
                "arguments": json.dumps({"path": f"src/module_{n}.py"}),
            },
            {"type": "function_call_output", "call_id": call_id, "output": tool_output("m", n)},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": f"Module {n} read.", "annotations": []}
                ],
            },
        ]
    return [*items, {"role": "user", "content": "Now summarize what you read."}]


@pytest.fixture
def provider() -> MockUpstream:
    return MockUpstream(window=PROVIDER_WINDOW, strict=True, default=Reply(content="Summary."))


@pytest.fixture
async def sdk(provider: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    async with serve(provider.app) as base_url:
        settings = make_settings(
            f"{base_url}/v1", context={"context_window": TOLD_WINDOW, "output_reserved": 200}
        )
        app = create_app(settings)
        async with LifespanManager(app), sdk_for(app, "sk-overflow") as client:
            yield client


def sent_tokens(provider: MockUpstream) -> list[int]:
    """The size of each request the provider received, in bytes."""
    return [len(r.body) for r in provider.requests if r.path == "/v1/responses"]


async def test_a_refused_request_is_compacted_and_retried_once(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    items = history(7)
    raw = await sdk.responses.with_raw_response.create(model="mock-model", input=items)
    assert raw.parse().output_text == "Summary."
    assert raw.headers["x-compaction-applied"] != "none"
    assert provider.overflows == 1
    first, retried = sent_tokens(provider)
    assert retried < first / 2
    assert provider.strict_rejections == 0
    assert provider.last.json()["input"][-1] == items[-1]  # the question is still asked


@pytest.mark.parametrize("in_stream", [False, True], ids=["status-400", "response.failed"])
async def test_a_streamed_request_is_retried_before_anything_reaches_the_client(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, in_stream: bool
) -> None:
    provider.responses_overflow_in_stream = in_stream
    kinds = []
    text = ""
    async for event in await sdk.responses.create(
        model="mock-model", input=history(7), stream=True
    ):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text == "Summary."
    assert (kinds[0], kinds[-1]) == ("response.created", "response.completed")
    assert "response.failed" not in kinds
    assert provider.overflows == 1
    assert len(sent_tokens(provider)) == 2


async def test_a_second_overflow_reaches_the_client_and_says_not_to_retry(
    sdk: openai.AsyncOpenAI, provider: MockUpstream
) -> None:
    refusal = Reply(status=400, error=OVERFLOW)
    provider.queue(refusal, refusal)
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.responses.create(model="mock-model", input=history(7))
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "input")
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(sent_tokens(provider)) == 2  # one retry, no more


OVERFLOW = {
    "error": {
        "message": "Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}
