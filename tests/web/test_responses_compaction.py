"""The Responses API's compaction through the proxy app, with the official OpenAI SDK as the
client: `client.responses.compact(...)` and a create ending with `compaction_trigger` (whole
and streamed) answered by the proxy, its item sent back and expanded into the same bytes, a
tampered one refused; and left to an upstream that compacts (`auto` in front of OpenAI's host,
or `upstream`), answered there or refused by one that cannot."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.core import jsoncodec
from proxy.core.capsule import Sealer
from proxy.core.compaction_items import expand
from proxy.errors import InvalidRequestError
from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import COMPACTION_KEY

MODEL = "mock-model"
TRIGGER: Any = {"type": "compaction_trigger"}
Item = dict[str, Any]


def user(text: str) -> Any:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def history() -> list[Any]:
    items: list[Any] = [user("Migrate the billing service to Postgres 16. Never drop a table.")]
    for i in range(3):
        args = json.dumps({"cmd": f"psql -f migrations/00{i}.sql"})
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": args},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"ALTER {i}\n" * 60},
            user(f"Good. Migration 00{i} is applied; ticket BILL-{40 + i}."),
        ]
    return items


def sdk_for(app: FastAPI) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://proxy/v1", http_client=http, max_retries=0
    )


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_for(app) as client:
        yield client


def replies(upstream: MockUpstream) -> list[Any]:
    """The `input` of each request the provider got for a reply (summaries apart)."""
    return [
        r.json()["input"]
        for r in upstream.requests
        if r.path == "/v1/responses" and r not in upstream.summary_requests
    ]


async def test_the_sdk_compacts_and_its_item_expands_into_a_stable_prefix(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    items = history()
    raw = await sdk.responses.with_raw_response.compact(model=MODEL, input=items)
    assert raw.headers["x-compaction-handled-by"] == "proxy"
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert [o.type for o in compacted.output].count("compaction") == 1
    assert compacted.output[-1].type == "compaction"
    output = json.loads(raw.content)["output"]
    assert output[:-1] == [i for i in items if i.get("role") == "user"]  # verbatim
    assert replies(upstream) == []  # no model call for a reply
    first = [*output, user("Now the reporting jobs.")]
    second = [*first, {"role": "assistant", "content": "Done."}, user("And the backups?")]
    for given in (first, second):
        answer = await sdk.responses.create(model=MODEL, input=given, store=False)
        assert answer.output_text
    one, two = replies(upstream)
    expanded = one[len(output) - 1]
    assert expanded["role"] == "assistant"
    assert "- Good." in expanded["content"][0]["text"]  # the ledger of what the user said
    assert "BILL-41" in expanded["content"][0]["text"]
    # The latest user message stands beside the block verbatim: the ledger does not repeat it.
    assert "BILL-42" not in expanded["content"][0]["text"]
    assert "compaction" not in [i.get("type") for i in one]
    assert jsoncodec.dumps(two).startswith(jsoncodec.dumps(one)[:-1])


async def test_a_create_with_a_trigger_is_answered_with_one_item(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    response = await sdk.responses.create(model=MODEL, input=[*history(), TRIGGER])
    assert [item.type for item in response.output] == ["compaction"]
    assert response.status == "completed"
    assert replies(upstream) == []


async def test_a_streamed_trigger_is_openais_event_sequence(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    stream = await sdk.responses.create(model=MODEL, input=[*history(), TRIGGER], stream=True)
    events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(6))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == ["compaction"]
    assert replies(upstream) == []


async def test_a_tampered_item_is_an_openai_shaped_400(
    sdk: openai.AsyncOpenAI, upstream: MockUpstream
) -> None:
    raw = await sdk.responses.with_raw_response.compact(model=MODEL, input=history())
    output = json.loads(raw.content)["output"]
    sealed = output[-1]["encrypted_content"]
    output[-1]["encrypted_content"] = sealed[:40] + sealed[41:]
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(model=MODEL, input=[*output, user("Go on.")])
    error = raised.value
    assert error.status_code == 400
    assert error.code == "invalid_encrypted_content"
    assert error.param == f"input[{len(output) - 1}]"
    assert "altered" in error.message
    assert replies(upstream) == []


async def test_the_log_line_names_who_answered(
    sdk: openai.AsyncOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        await sdk.responses.compact(model=MODEL, input=history())
    (line,) = [vars(r) for r in caplog.records if r.name == "proxy.access"]
    assert (line["api"], line["action"], line["compaction_by"]) == ("responses", "compact", "proxy")


# --- left to the upstream ----------------------------------------------------------------------


async def test_auto_leaves_compaction_to_openai() -> None:
    # The settings name OpenAI's API; the requests reach a mock that compacts as it does.
    native = MockUpstream(native_compaction=True)
    settings = Settings.model_validate({"upstream": {"base_url": "https://api.openai.com/v1"}})
    assert settings.compaction_handler() == "upstream"
    app = create_app(settings, upstream=AsgiUpstream(native.app))
    async with LifespanManager(app), sdk_for(app) as client:
        raw = await client.responses.with_raw_response.compact(model=MODEL, input=history())
        assert raw.headers["x-compaction-handled-by"] == "upstream"
        item = json.loads(raw.content)["output"][-1]
        assert item["id"].startswith("cmp_mock_")
        stream = await client.responses.create(
            model=MODEL, input=[*history(), TRIGGER], stream=True
        )
        kinds = [event.type async for event in stream]
        assert "response.compaction.compacting" in kinds
        # The provider's own item goes back to it untouched, and it reads it.
        answer = await client.responses.create(model=MODEL, input=[item, user("Go on.")])
        assert answer.output_text
    assert native.last.json()["input"][0] == item


async def test_an_upstream_that_does_not_compact_refuses_both_forms(
    upstream: MockUpstream, upstream_url: str
) -> None:
    settings = make_settings(upstream_url, responses={"compaction": "upstream"})
    app = create_app(settings)
    async with LifespanManager(app), sdk_for(app) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.compact(model=MODEL, input=history())
        assert missing.value.response.headers["x-compaction-handled-by"] == "upstream"
        with pytest.raises(openai.BadRequestError, match="compaction_trigger"):
            await client.responses.create(model=MODEL, input=[*history(), TRIGGER])
    assert [r.path for r in upstream.requests] == ["/v1/responses/compact", "/v1/responses"]


# --- the key -------------------------------------------------------------------------------------


async def test_without_a_key_one_process_makes_its_own_and_says_so(
    upstream_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_settings(upstream_url, responses={}))
    with caplog.at_level(logging.WARNING, logger="proxy.web"):
        async with LifespanManager(app), sdk_for(app) as client:
            raw = await client.responses.with_raw_response.compact(model=MODEL, input=history())
            output = json.loads(raw.content)["output"]
            answer = await client.responses.create(model=MODEL, input=[*output, user("Go.")])
            assert answer.output_text
    warnings = [r.getMessage() for r in caplog.records if "compaction_key" in r.getMessage()]
    assert len(warnings) == 1
    assert "refuses them after a restart" in warnings[0]
    # Not sealed with any configured key: another process could not open them.
    with pytest.raises(InvalidRequestError, match="another key"):
        expand({"input": output[-1:]}, Sealer(COMPACTION_KEY.encode()))
