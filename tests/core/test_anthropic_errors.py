"""The proxy's own errors in the Messages API's shape."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from proxy.core.anthropic_errors import (
    error_body,
    error_type,
    prompt_too_long,
    proxy_error_body,
)
from proxy.core.overflow import Kind, classify
from proxy.errors import (
    ContextLengthExceededError,
    RequestTooLargeError,
    StoreDownError,
    UpstreamTimeoutError,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "invalid_request_error"),
        (413, "request_too_large"),
        (426, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (504, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_the_type_follows_the_status(status: int, kind: str) -> None:
    assert error_type(status) == kind


def test_a_proxy_error_in_the_api_s_shape() -> None:
    assert proxy_error_body(RequestTooLargeError("too big")) == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "too big"},
    }
    assert proxy_error_body(StoreDownError("store"))["error"]["type"] == "api_error"
    assert error_body(504, "slow", "timeout_error")["error"]["type"] == "timeout_error"
    assert proxy_error_body(UpstreamTimeoutError("slow"))["error"]["type"] == "api_error"


def test_the_cannot_fit_answer_reads_as_the_provider_s_overflow() -> None:
    said = prompt_too_long(215_000, 200_000, "compaction-proxy compacted all it could.")
    assert said.startswith("prompt is too long: 215000 tokens > 200000 maximum. ")
    assert prompt_too_long(5, 4) == "prompt is too long: 5 tokens > 4 maximum"
    body = proxy_error_body(ContextLengthExceededError(said))
    verdict = classify(400, json.dumps(body))
    assert (verdict.kind, verdict.prompt_tokens, verdict.limit) == (
        Kind.OVERFLOW_PROMPT,
        215_000,
        200_000,
    )


def test_the_anthropic_sdk_reads_the_message_and_the_type() -> None:
    body = error_body(400, prompt_too_long(9, 8))

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json=body)

    transport = httpx2.MockTransport(answer)
    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://proxy",
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    )
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.body == body
    assert "prompt is too long: 9 tokens > 8 maximum" in str(raised.value)
