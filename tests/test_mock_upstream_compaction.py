"""The mock's compaction (`native_compaction`), through the official SDK over real sockets: the
`/v1/responses/compact` answer and the `compaction_trigger` response (whole and streamed) as
OpenAI sends them, its own items read back and others refused; without the option, both forms
refused as a provider without them refuses them, and any compaction item too."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest

from proxy.mock_upstream import MockUpstream
from proxy.mock_upstream.command import Options, add_arguments, describe, mock_for, options_from
from tests.servers import serve

MODEL = "gpt-5"
TRIGGER: Any = {"type": "compaction_trigger"}
HISTORY: list[Any] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
    {"type": "message", "role": "assistant", "content": "Fixed."},
    {"role": "user", "content": "Thanks."},
]


@asynccontextmanager
async def sdk(upstream: MockUpstream) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        serve(upstream.app) as base_url,
        openai.AsyncOpenAI(api_key="sk-test", base_url=f"{base_url}/v1", max_retries=0) as client,
    ):
        yield client


async def test_compact_answers_the_user_messages_then_one_item() -> None:
    upstream = MockUpstream(native_compaction=True)
    async with sdk(upstream) as client:
        raw = await client.responses.with_raw_response.compact(model=MODEL, input=HISTORY)
        compacted = raw.parse()
    assert compacted.object == "response.compaction"
    output = json.loads(raw.content)["output"]
    assert output[:-1] == [HISTORY[0], HISTORY[2]]
    item = compacted.output[-1]
    assert item.type == "compaction"
    assert item.encrypted_content.startswith("gAAAAA")
    assert compacted.usage.input_tokens > 0
    assert compacted.usage.output_tokens > 0


async def test_a_trigger_is_answered_with_the_item_alone_whole_and_streamed() -> None:
    upstream = MockUpstream(native_compaction=True)
    async with sdk(upstream) as client:
        whole = await client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER])
        stream = await client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER], stream=True)
        events = [event async for event in stream]
    assert [item.type for item in whole.output] == ["compaction"]
    assert whole.usage is not None
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(6))


async def test_its_own_items_are_read_back_and_others_refused() -> None:
    upstream = MockUpstream(native_compaction=True)
    async with sdk(upstream) as client:
        compacted = await client.responses.compact(model=MODEL, input=HISTORY)
        item: Any = compacted.output[-1].model_dump()
        answer = await client.responses.create(model=MODEL, input=[item, HISTORY[2]])
        assert answer.output_text
        forged: Any = {**item, "encrypted_content": "gAAAAAforged"}
        with pytest.raises(openai.BadRequestError, match="could not be verified"):
            await client.responses.create(model=MODEL, input=[forged, HISTORY[2]])
        with pytest.raises(openai.BadRequestError, match="must be the final input item"):
            await client.responses.create(model=MODEL, input=[TRIGGER, HISTORY[2]])
        with pytest.raises(openai.BadRequestError, match="could not be verified"):
            await client.responses.compact(model=MODEL, input=[forged])


async def test_a_triggered_response_is_stored_to_continue_from() -> None:
    upstream = MockUpstream(native_compaction=True)
    async with sdk(upstream) as client:
        first = await client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER])
        later = await client.responses.create(
            model=MODEL, input="Go on.", previous_response_id=first.id
        )
        assert later.output_text
        with pytest.raises(openai.BadRequestError, match="not found"):
            await client.responses.compact(
                model=MODEL, input="x", previous_response_id="resp_missing"
            )


async def test_without_native_compaction_both_forms_and_the_items_are_refused() -> None:
    upstream = MockUpstream()
    item: Any = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAAx"}
    async with sdk(upstream) as client:
        with pytest.raises(openai.NotFoundError, match=r"Invalid URL \(POST /v1/responses/compact"):
            await client.responses.compact(model=MODEL, input=HISTORY)
        with pytest.raises(openai.BadRequestError) as trigger:
            await client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER])
        with pytest.raises(openai.BadRequestError, match="'compaction'"):
            await client.responses.create(model=MODEL, input=[item, HISTORY[2]])
    assert trigger.value.param == "input[3].type"
    assert trigger.value.code == "invalid_value"


def test_the_command_line_option_makes_a_native_mock() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from(parser.parse_args(["--native-compaction"]))
    assert options == Options(native_compaction=True)
    assert not options_from(parser.parse_args([])).native_compaction
    assert mock_for(options).native_compaction
    assert "native compaction" in describe(options, "http://127.0.0.1:8000/v1", ("m",))
    assert "native compaction" not in describe(Options(), "http://127.0.0.1:8000/v1", ("m",))
