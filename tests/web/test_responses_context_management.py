"""The Responses API's automatic compaction (`context_management`) through the proxy app, with
the official OpenAI SDK as the client: the proxy compacts in the provider's place at the
client's `compact_threshold` and opens the answer's output with its item (whole and
streamed), the field never reaching an upstream that does not compact; the item expanded on
the next request whether the client keeps its history or drops what precedes the item; left
to an upstream that compacts natively, forwarded untouched. Then the two neighbours of the
contract: `/v1/responses/input_tokens` counts the items expanded, and a
`previous_response_id` naming one of the proxy's own answers is refused with the reason."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.core import jsoncodec
from proxy.core.capsule import Sealer
from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app
from tests.servers import COMPACTION_KEY
from tests.web.test_responses_compaction import MODEL, TRIGGER, history, replies, sdk_for, user

Item = dict[str, Any]
SEALER = Sealer(COMPACTION_KEY.encode())


def compaction(threshold: int) -> Any:
    return [{"type": "compaction", "compact_threshold": threshold}]


def users(items: list[Any]) -> list[Any]:
    return [item for item in items if item.get("role") == "user"]


def forwarded(upstream: MockUpstream) -> list[dict[str, Any]]:
    """The body of each request the provider got for a reply (summaries apart)."""
    return [
        r.json()
        for r in upstream.requests
        if r.path == "/v1/responses" and r not in upstream.summary_requests
    ]


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_for(app) as client:
        yield client


async def test_past_the_threshold_the_answer_opens_with_the_proxys_item(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    items = history()
    raw = await sdk.responses.with_raw_response.create(
        model=MODEL, input=items, store=False, context_management=compaction(200)
    )
    assert raw.headers["x-compaction-handled-by"] == "proxy"
    assert raw.headers["x-compaction-applied"] == "summarize"
    output = json.loads(raw.content)["output"]
    assert [item["type"] for item in output] == ["compaction", "message"]
    assert raw.parse().output_text  # the model's answer, after the item
    capsule = SEALER.open(output[0]["encrypted_content"])
    assert capsule.covers_prior
    assert capsule.block is not None
    assert "BILL-42" in capsule.block
    # The model answered the compacted view: the user's messages verbatim, then the block;
    # the field never reached a provider that does not compact.
    (sent,) = forwarded(upstream)
    assert "context_management" not in sent
    assert sent["input"][:-1] == users(items)
    assert sent["input"][-1]["content"][0]["text"] == capsule.block
    assert upstream.summary_calls == 1


async def test_the_next_request_continues_on_the_same_bytes_kept_or_dropped(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    items = history()
    answer = await sdk.responses.with_raw_response.create(
        model=MODEL, input=items, store=False, context_management=compaction(200)
    )
    output = json.loads(answer.content)["output"]
    later = [user("Now the reporting jobs.")]
    # A client that appends the output to its whole history, as usual...
    kept = [*items, *output, *later]
    # ...and one that drops what came before the latest compaction item, as OpenAI allows.
    dropped = [*output, *later]
    for given in (kept, dropped):
        await sdk.responses.create(
            model=MODEL, input=given, store=False, context_management=compaction(100_000)
        )
    first, after_kept, after_dropped = (body["input"] for body in forwarded(upstream))
    # Kept: the compacted view, extended byte for byte (the provider's cache keeps it).
    assert jsoncodec.dumps(after_kept).startswith(jsoncodec.dumps(first)[:-1])
    assert after_kept[len(first) :] == [output[1], *later]
    # Dropped: the block alone, on the user's side (no user message before it).
    block = first[-1]["content"][0]["text"]
    assert after_dropped[0] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": block}],
    }
    assert after_dropped[1:] == [output[1], *later]
    assert upstream.summary_calls == 1  # no compaction below the threshold


async def test_a_stream_carries_the_item_as_its_first_output_item(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    stream = await sdk.responses.create(
        model=MODEL, input=history(), store=False, stream=True, context_management=compaction(200)
    )
    events = [event async for event in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
    ]
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "compaction"), (1, "message")]
    assert {e.output_index for e in events if e.type == "response.output_text.delta"} == {1}
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == ["compaction", "message"]
    # The SDK's own accumulation, which places items by `output_index`, agrees.
    async with sdk.responses.stream(
        model=MODEL, input=history(), store=False, context_management=compaction(200)
    ) as again:
        final = await again.get_final_response()
    assert [item.type for item in final.output] == ["compaction", "message"]
    assert final.output_text == completed.response.output_text


async def test_below_the_threshold_nothing_is_compacted(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    raw = await sdk.responses.with_raw_response.create(
        model=MODEL, input=history(), context_management=compaction(100_000)
    )
    assert raw.headers["x-compaction-handled-by"] == "proxy"
    assert raw.headers["x-compaction-applied"] == "none"
    assert [item.type for item in raw.parse().output] == ["message"]
    (sent,) = forwarded(upstream)
    assert "context_management" not in sent
    assert sent["input"] == history()
    assert upstream.summary_calls == 0


async def test_a_malformed_field_is_refused_as_openai_refuses_it(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(
            model=MODEL, input=history(), context_management=[{"type": "pruning"}]
        )
    assert raised.value.param == "context_management[0].type"
    assert forwarded(upstream) == []


async def test_left_to_openai_the_field_is_forwarded_untouched() -> None:
    native = MockUpstream(native_compaction=True)
    settings = Settings.model_validate({"upstream": {"base_url": "https://api.openai.com/v1"}})
    app = create_app(settings, upstream=AsgiUpstream(native.app))
    async with LifespanManager(app), sdk_for(app) as client:
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input=history(), context_management=compaction(200)
        )
        assert "x-compaction-handled-by" not in raw.headers
    assert native.last.json()["context_management"] == compaction(200)


# --- the neighbours: counting, and the proxy's own response ids ---------------------------------


async def test_input_tokens_counts_the_block_the_item_stands_for(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    raw = await sdk.responses.with_raw_response.compact(model=MODEL, input=history())
    output = json.loads(raw.content)["output"]
    given = [*output, user("Go on.")]
    counted = await sdk.responses.input_tokens.count(model=MODEL, input=given)
    # The provider counted the block in the item's place, as a create would send it.
    sent = upstream.last.json()["input"]
    assert "compaction" not in [item.get("type") for item in sent]
    answer = await sdk.responses.with_raw_response.create(model=MODEL, input=given)
    assert forwarded(upstream)[-1]["input"] == sent
    assert counted.input_tokens == answer.parse().usage.input_tokens  # type: ignore[union-attr]


async def test_a_previous_response_the_proxy_answered_is_refused_with_the_reason(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    triggered = await sdk.responses.create(model=MODEL, input=[*history(), TRIGGER])
    assert triggered.id.startswith("resp_compaction_proxy_")
    for call in (
        sdk.responses.create(model=MODEL, input="Go on.", previous_response_id=triggered.id),
        sdk.responses.input_tokens.count(model=MODEL, previous_response_id=triggered.id),
    ):
        with pytest.raises(openai.BadRequestError) as raised:
            await call
        error = raised.value
        assert (error.code, error.param) == ("previous_response_not_found", "previous_response_id")
        assert "compaction-proxy answered it itself" in error.message
    assert replies(upstream) == []
    assert [r.path for r in upstream.requests if "input_tokens" in r.path] == []
