"""POST /v1/responses through the proxy app: what the route does besides compacting (bytes
kept, headers, errors, the untouched paths, the log line and the metrics)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from proxy.mock_upstream import MockUpstream, Reply

RESPONSES = "/v1/responses"
JSON = {"content-type": "application/json"}


async def test_an_uncompacted_request_goes_byte_for_byte(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    raw = (
        b'{"model": "m",  "instructions": "Be brief.", "store": false, "top_logprobs": 2,'
        b' "input": [{"type": "message", "role": "user", "content": [{"type": "input_text",'
        b' "text": "hi"}]}, {"type": "brand_new_item", "x": [1, 2]}]}'
    )
    response = await client.post(RESPONSES, content=raw, headers=JSON)
    assert response.status_code == 200, response.text
    assert upstream.last.body == raw
    assert upstream.last.path == RESPONSES
    assert response.json()["object"] == "response"
    assert response.headers["x-compaction-applied"] == "none"
    assert response.headers["x-session-id"]
    assert float(response.headers["x-context-pressure"]) < 0.01
    assert int(response.headers["x-compaction-tokens-before"]) > 0


async def test_a_string_input_and_a_stream(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    upstream.queue(Reply(content="streamed answer"))
    body = {"model": "m", "input": "hi", "stream": True}
    async with client.stream("POST", RESPONSES, json=body) as response:
        assert response.status_code == 200
        assert response.headers["x-compaction-applied"] == "none"
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    events = [line for line in raw.split(b"\n") if line.startswith(b"event: ")]
    assert events[0] == b"event: response.created"
    assert events[-1] == b"event: response.completed"
    assert b"streamed answer" in raw
    assert "stream_options" not in upstream.last.json()  # chat's usage option is not added


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"model": "m", "input": {"role": "user"}}', "input"),
        (b'{"model": "m", "input": 3}', "input"),
        (b"not json", None),
        (b'["input"]', None),
    ],
)
async def test_what_cannot_be_read_is_an_openai_shaped_400(
    client: httpx.AsyncClient, upstream: MockUpstream, raw: bytes, param: str | None
) -> None:
    response = await client.post(RESPONSES, content=raw, headers=JSON)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert upstream.requests == []


async def test_server_state_and_compaction_off_are_forwarded_untouched(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    first = (await client.post(RESPONSES, json={"model": "m", "input": "hi"})).json()
    raw = json.dumps({"model": "m", "input": "more", "previous_response_id": first["id"]})
    chained = await client.post(RESPONSES, content=raw.encode(), headers=JSON)
    assert chained.status_code == 200, chained.text
    assert chained.headers["x-compaction-applied"] == "server_state"
    assert upstream.last.body == raw.encode()
    off = await client.post(
        RESPONSES, json={"model": "m", "input": "hi"}, headers={"x-compaction": "off"}
    )
    assert off.status_code == 200
    assert "x-compaction-applied" not in off.headers


async def test_other_responses_paths_pass_through(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    response = await client.get(f"{RESPONSES}/resp_123", params={"include[]": "x"})
    assert response.json()["path"] == "/v1/responses/resp_123"
    deleted = await client.delete(f"{RESPONSES}/resp_123")
    assert deleted.json()["method"] == "DELETE"


async def test_the_log_line_and_the_metrics_name_the_api(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        await client.post(RESPONSES, json={"model": "m", "input": "hi"})
    [line] = [r for r in caplog.records if r.name == "proxy.access"]
    assert (line.getMessage(), getattr(line, "api", None)) == ("response", "responses")
    metrics = (await client.get("/metrics")).text
    assert 'route="responses",status="200"' in metrics
