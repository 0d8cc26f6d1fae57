"""The OpenAI SDK checks, written once and run with the sync and the async client, against
the proxy in-process and as a running `compaction-proxy serve`.

Each case takes a client already pointed at the proxy and the mock upstream behind it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from proxy.mock_upstream import MockUpstream, Reply, ToolCall

MODEL = "gpt-4o-mini"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER_CALL = ToolCall("get_weather", '{"city": "Paris"}', id="call_w1")

Sdk = openai.OpenAI | openai.AsyncOpenAI


async def create(sdk: Sdk, **params: Any) -> Any:
    """`chat.completions.create` on either client."""
    result = sdk.chat.completions.create(**params)
    return await result if inspect.isawaitable(result) else result


async def items(stream: Any) -> AsyncIterator[Any]:
    """The chunks of a sync or async stream."""
    if hasattr(stream, "__aiter__"):
        async for chunk in stream:
            yield chunk
    else:
        for chunk in stream:
            yield chunk


async def plain_completion(sdk: Sdk, upstream: MockUpstream) -> None:
    upstream.queue(Reply(content="Bonjour."))
    completion = await create(
        sdk, model=MODEL, messages=[{"role": "user", "content": "Say hello in French."}]
    )
    assert completion.choices[0].message.content == "Bonjour."
    assert completion.usage is not None
    assert upstream.last.json()["messages"] == [{"role": "user", "content": "Say hello in French."}]


async def streamed_content(sdk: Sdk, upstream: MockUpstream) -> None:
    text = "A streamed answer, in several deltas."
    upstream.queue(Reply(content=text))
    stream = await create(
        sdk, model=MODEL, messages=[{"role": "user", "content": "go"}], stream=True
    )
    deltas = [chunk.choices[0].delta.content async for chunk in items(stream) if chunk.choices]
    assert "".join(d or "" for d in deltas) == text
    assert len(deltas) > 3


async def streamed_tool_call(sdk: Sdk, upstream: MockUpstream) -> None:
    upstream.queue(Reply(content=None, tool_calls=(WEATHER_CALL,)))
    stream = await create(
        sdk,
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    name, arguments, finish = "", "", None
    async for chunk in items(stream):
        choice = chunk.choices[0]
        for call in choice.delta.tool_calls or []:
            name += (call.function and call.function.name) or ""
            arguments += (call.function and call.function.arguments) or ""
        finish = choice.finish_reason or finish
    assert (name, json.loads(arguments), finish) == ("get_weather", {"city": "Paris"}, "tool_calls")


async def tool_call_round_trip(sdk: Sdk, upstream: MockUpstream) -> None:
    upstream.queue(Reply(content=None, tool_calls=(WEATHER_CALL,)), Reply(content="It is sunny."))
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Paris?"}]
    first = await create(
        sdk,
        model=MODEL,
        messages=messages,
        tools=[WEATHER_TOOL],
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    assert call.type == "function"
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'})
    second = await create(
        sdk,
        model=MODEL,
        messages=messages,
        tools=[WEATHER_TOOL],
    )
    assert second.choices[0].message.content == "It is sunny."
    forwarded = upstream.last.json()["messages"]
    assert forwarded[1]["tool_calls"][0]["id"] == "call_w1"
    assert forwarded[2] == {
        "role": "tool",
        "tool_call_id": "call_w1",
        "content": '{"sky": "clear"}',
    }


async def upstream_400_is_bad_request(sdk: Sdk, upstream: MockUpstream) -> None:
    error = {
        "error": {
            "message": "Invalid value for 'temperature': must be at most 2.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "invalid_value",
        }
    }
    upstream.queue(Reply(status=400, error=error))
    with pytest.raises(openai.BadRequestError) as caught:
        await create(sdk, model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=9)
    assert caught.value.status_code == 400
    assert "must be at most 2" in caught.value.message
    assert caught.value.code == "invalid_value"


async def extra_body_arrives(sdk: Sdk, upstream: MockUpstream) -> None:
    await create(
        sdk,
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        reasoning_effort="low",
        metadata={"run": "r-42"},
        extra_body={"top_k": 20, "repetition_penalty": 1.1, "chat_template_kwargs": {"x": True}},
    )
    body = upstream.last.json()
    assert body["top_k"] == 20
    assert body["repetition_penalty"] == 1.1
    assert body["chat_template_kwargs"] == {"x": True}
    assert body["reasoning_effort"] == "low"
    assert body["metadata"] == {"run": "r-42"}


CASES = [
    plain_completion,
    streamed_content,
    streamed_tool_call,
    tool_call_round_trip,
    upstream_400_is_bad_request,
    extra_body_arrives,
]
