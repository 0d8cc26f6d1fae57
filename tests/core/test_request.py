"""Parsing chat completion bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import jsoncodec
from proxy.core.capsule import Capsule, Sealer
from proxy.core.compaction_items import block_item, compaction_item
from proxy.core.request import (
    Api,
    Compaction,
    parse_chat_request,
    parse_compact_request,
    parse_responses_request,
    wire_body,
)
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError

TRIGGER = {"type": "compaction_trigger"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


def test_reads_model_and_stream() -> None:
    request = parse_chat_request(b'{"model": "m", "stream": true, "messages": []}')
    assert (request.model, request.stream, request.messages) == ("m", True, [])


def test_stream_must_be_true_not_truthy() -> None:
    assert not parse_chat_request(b'{"stream": "yes", "messages": []}').stream


def test_non_string_model_reads_as_none() -> None:
    assert parse_chat_request(b'{"model": 3, "messages": []}').model is None


@given(
    st.dictionaries(st.text(), json_values, max_size=5),
    st.lists(st.dictionaries(st.text(), json_values, max_size=3), max_size=3),
)
def test_every_field_kept_as_sent(extra: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    body = {**extra, "messages": messages}
    raw = json.dumps(body).encode()
    request = parse_chat_request(raw)
    assert request.body == body
    assert request.raw is raw


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"", None),
        (b"null", None),
        (b'"s"', None),
        (b"{}", "messages"),
        (b'{"messages": 5}', "messages"),
        (b'{"messages": [1]}', "messages[0]"),
    ],
)
def test_rejects_what_we_cannot_read(raw: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_chat_request(raw)
    assert caught.value.param == param
    assert caught.value.to_body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [], "x": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"messages": [{"role": "user", "content": ' + b"[" * 300 + b"]" * 300 + b"}]}",
        b'{"messages": [], "seed": ' + b"1" * 5000 + b"}",
    ],
    ids=["deep_body", "deep_content", "huge_integer"],
)
def test_rejects_json_past_the_codecs_limits(raw: bytes) -> None:
    with pytest.raises(InvalidRequestError, match="beyond what this proxy accepts") as caught:
        parse_chat_request(raw)
    assert caught.value.status_code == 400


@pytest.mark.parametrize("model", ["\\ud800", "gpt-4o\\udfff", "\\udc00\\ud800"])
def test_rejects_a_model_with_a_lone_surrogate(model: str) -> None:
    raw = b'{"model": "' + model.encode() + b'", "messages": []}'
    with pytest.raises(InvalidRequestError, match="surrogate") as caught:
        parse_chat_request(raw)
    assert caught.value.param == "model"


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-\\u00e9", "gpt-\\ud83d\\ude42"])
def test_accepts_a_model_that_is_unicode_text(model: str) -> None:
    raw = b'{"model": "' + model.encode() + b'", "messages": []}'
    assert parse_chat_request(raw).model == json.loads(raw)["model"]


def test_keeps_lone_surrogates_in_messages_for_the_upstream_to_judge() -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}'
    assert parse_chat_request(raw).messages[0]["content"] == "\ud800"


def test_a_responses_request_reads_as_its_chat_view() -> None:
    raw = b'{"model": "m", "stream": true, "instructions": "Be brief.", "input": "hi"}'
    request = parse_responses_request(raw)
    assert (request.api, request.model, request.stream, request.raw) == (
        Api.RESPONSES,
        "m",
        True,
        raw,
    )
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert wire_body(request, request.messages) == {
        "model": "m",
        "stream": True,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}],
    }


def test_a_chat_request_is_forwarded_with_its_messages_replaced() -> None:
    request = parse_chat_request(b'{"model": "m", "messages": [], "top_k": 3}')
    assert request.api is Api.CHAT
    assert wire_body(request, [{"role": "user", "content": "x"}]) == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "top_k": 3,
    }


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"input": {"role": "user"}}', "input"),
        (b'{"input": 3}', "input"),
        (b"[]", None),
        (b'{"model": "\\ud800", "input": "x"}', "model"),
    ],
)
def test_a_responses_request_rejects_what_we_cannot_read(raw: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_responses_request(raw)
    assert caught.value.param == param


def test_a_responses_request_may_leave_input_out() -> None:
    request = parse_responses_request(b'{"model": "m", "prompt": {"id": "pmpt_1"}}')
    assert request.messages == []


# --- the Responses API's compaction ---------------------------------------------------------------

SEALER = Sealer(b"k" * 32)
BLOCK = "[2 earlier messages omitted]"


def _item() -> dict[str, Any]:
    return compaction_item(SEALER.seal(Capsule(BLOCK, "assistant", "s9")))


def test_an_input_ending_with_a_trigger_asks_for_compaction() -> None:
    raw = json.dumps({"model": "m", "input": [{"role": "user", "content": "hi"}, TRIGGER]})
    request = parse_responses_request(raw.encode())
    assert request.compaction is Compaction.TRIGGER
    assert request.raw == raw.encode()  # forwarded untouched, trigger and all
    assert [m["content"] for m in request.messages] == ["hi"]  # compacted without it


def test_a_compact_request_asks_for_compaction() -> None:
    request = parse_compact_request(b'{"model": "m", "input": "hi"}')
    assert request.compaction is Compaction.COMPACT
    assert request.api is Api.RESPONSES
    assert parse_responses_request(b'{"model": "m", "input": "hi"}').compaction is None


def test_the_proxys_item_is_expanded_before_anything_reads_the_request() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, _item()]}
    request = parse_responses_request(json.dumps(body).encode(), SEALER)
    expanded = json.loads(request.raw)
    assert expanded["input"][1] == block_item(BLOCK, "assistant")
    assert request.raw == jsoncodec.dumps(expanded)  # one serialization, byte-stable
    assert request.notes == {note_digest(BLOCK)}
    assert request.session == "s9"
    assert request.messages[-1]["content"] == [{"type": "text", "text": BLOCK}]


def test_a_request_without_the_proxys_items_keeps_its_own_bytes() -> None:
    raw = b'{"model": "m",  "input": [{"type": "compaction", "encrypted_content": "gAAAA"}]}'
    request = parse_responses_request(raw, SEALER)
    assert request.raw == raw
    assert (request.notes, request.session) == (frozenset(), None)


def test_a_trigger_after_the_proxys_item_is_still_the_last_item() -> None:
    body = {"model": "m", "input": [_item(), TRIGGER]}
    request = parse_responses_request(json.dumps(body).encode(), SEALER)
    assert request.compaction is Compaction.TRIGGER
    assert json.loads(request.raw)["input"][-1] == TRIGGER
