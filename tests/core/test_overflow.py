"""Overflow classification: real provider errors, their look-alikes, and what any body gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import overflow
from proxy.core.overflow import Kind, Verdict, classify
from tests import optional

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).with_name("fixtures") / "overflow_errors.json"
# The research workspace's copy, next to the repository; the repo keeps its own for CI.
SHARED_FIXTURES = REPO / ".." / "shared" / "fixtures" / "overflow_errors.json"

CASES: list[dict[str, Any]] = json.loads(FIXTURES.read_text(encoding="utf-8"))["fixtures"]
NUMBERS = ("prompt_tokens", "limit", "requested_output", "over_by", "prompt_chars")

PROMPT, TOTAL, UNSTATED = Kind.OVERFLOW_PROMPT, Kind.OVERFLOW_TOTAL, Kind.OVERFLOW


def error_body(message: str, **fields: object) -> str:
    """An OpenAI-shaped error body around `message`."""
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", **fields}})


def numbers_of(verdict: Verdict) -> dict[str, int | None]:
    return {
        "prompt_tokens": verdict.prompt_tokens,
        "limit": verdict.limit,
        "requested_output": verdict.requested_output,
        "over_by": verdict.over_by,
        "prompt_chars": verdict.prompt_chars,
    }


def stated(**numbers: int) -> dict[str, int | None]:
    """The five numbers a verdict carries, None where the message states none."""
    assert set(numbers) <= set(NUMBERS)
    return {name: numbers.get(name) for name in NUMBERS}


# --- The shared fixtures: every real error body, with its expected verdict -----------------


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_fixture_gets_its_expected_verdict(case: dict[str, Any]) -> None:
    expected = case["expected"]
    verdict = classify(case["http_status"], case["body"], case["headers"])

    assert {
        "overflow": verdict.overflow,
        "kind": verdict.kind,
        **numbers_of(verdict),
        # Stated only where compaction cannot help; otherwise every overflow can be fixed by
        # a shorter history, and nothing else can.
        "compaction_can_fix": verdict.compaction_can_fix,
    } == {
        "overflow": expected["overflow"],
        "kind": Kind(expected["kind"]),
        **{name: expected.get(name) for name in NUMBERS},
        "compaction_can_fix": expected.get("compaction_can_fix", expected["overflow"]),
    }
    assert classify(case["http_status"], case["body"].encode(), case["headers"]) == verdict


def test_fixtures_cover_every_kind() -> None:
    kinds = {Kind(case["expected"]["kind"]) for case in CASES}
    assert kinds == set(Kind)


def test_fixture_file_is_a_verbatim_copy_of_the_shared_one() -> None:
    optional.skip_unless(
        SHARED_FIXTURES.exists(),
        "../shared/fixtures/overflow_errors.json exists only in the research workspace",
    )
    assert FIXTURES.read_bytes() == SHARED_FIXTURES.read_bytes()


JSON_CASES = [case for case in CASES if case["body"].lstrip().startswith("{")]
ENVELOPES: dict[str, Callable[[str], str]] = {
    # Gemini's OpenAI-compatible endpoint answers with an array.
    "gemini_array": lambda body: f"[{body}]",
    # OpenRouter relays the provider's body as a JSON string.
    "openrouter_raw": lambda body: json.dumps(
        {"error": {"message": "Provider returned error", "code": 400, "metadata": {"raw": body}}}
    ),
    # LiteLLM prefixes the provider's body with its own words.
    "litellm_prefix": lambda body: error_body(f"litellm.BadRequestError: Error - {body}"),
    "sse_frame": lambda body: f"data: {body}\n\ndata: [DONE]\n\n",
}


@pytest.mark.parametrize("envelope", ENVELOPES)
@pytest.mark.parametrize("case", JSON_CASES, ids=[case["id"] for case in JSON_CASES])
def test_verdict_survives_any_envelope(case: dict[str, Any], envelope: str) -> None:
    bare = classify(case["http_status"], case["body"])
    wrapped = classify(case["http_status"], ENVELOPES[envelope](case["body"]))
    assert (wrapped.kind, numbers_of(wrapped), wrapped.compaction_can_fix) == (
        bare.kind,
        numbers_of(bare),
        bare.compaction_can_fix,
    )


# --- One example per table row: the wording each rule was written for ------------------------


@dataclass(frozen=True)
class Row:
    rule: str
    message: str
    kind: Kind
    numbers: dict[str, int] = field(default_factory=dict)
    status: int = 400
    lower_bound: bool = False


OVERFLOW_ROWS = [
    Row(
        "openai_messages_resulted",
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens.",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
    ),
    Row(
        "openai_requested_breakdown",
        "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
        "(7000 in the messages, 100 in the functions, and 2000 in the completion). Please reduce "
        "the length of the messages, functions, or completion.",
        TOTAL,
        {"limit": 8192, "prompt_tokens": 7100, "requested_output": 2000},
    ),
    Row(
        "vllm_in_the_messages",
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "in the messages, Please reduce the length of the messages.",
        PROMPT,
        {"limit": 4096, "prompt_tokens": 5000},
    ),
    Row(
        "vllm_request_has_input",
        "This model's maximum context length is 4096 tokens. However, your request has 5000 "
        "input tokens. Please reduce the length of the input messages.",
        PROMPT,
        {"limit": 4096, "prompt_tokens": 5000},
    ),
    Row(
        "vllm_max_tokens_too_large",
        "'max_tokens' or 'max_completion_tokens' is too large: 3000. This model's maximum "
        "context length is 4096 tokens and your request has 2000 input tokens (3000 > 4096 - "
        "2000).",
        TOTAL,
        {"limit": 4096, "prompt_tokens": 2000, "requested_output": 3000},
    ),
    Row(
        "vllm_you_passed_tokens",
        "You passed 3097 input tokens and requested 1000 output tokens. However, the model's "
        "context length is only 4096 tokens, resulting in a maximum input length of 3096 tokens.",
        TOTAL,
        {"limit": 4096, "prompt_tokens": 3097, "requested_output": 1000},
        lower_bound=True,
    ),
    Row(
        "vllm_you_passed_characters",
        "You passed 90000 input characters and requested 1000 output tokens. However, the "
        "model's context length is only 4096 tokens.",
        TOTAL,
        {"limit": 4096, "prompt_chars": 90000, "requested_output": 1000},
    ),
    Row(
        "vllm_prompt_contains_tokens",
        "This model's maximum context length is 4096 tokens. However, you requested 1000 output "
        "tokens and your prompt contains at least 3097 input tokens, for a total of at least "
        "4097 tokens.",
        TOTAL,
        {"limit": 4096, "prompt_tokens": 3097, "requested_output": 1000},
        lower_bound=True,
    ),
    Row(
        "vllm_prompt_contains_characters",
        "This model's maximum context length is 4096 tokens. However, you requested 1000 output "
        "tokens and your prompt contains at least 90000 characters.",
        TOTAL,
        {"limit": 4096, "prompt_chars": 90000, "requested_output": 1000},
    ),
    Row(
        "openrouter_endpoint",
        "This endpoint's maximum context length is 200000 tokens. However, you requested about "
        "210000 tokens (150000 of text input, 20000 of tool input, 8000 of image input, 32000 "
        "in the output). Please reduce the length of either one.",
        TOTAL,
        {"limit": 200000, "prompt_tokens": 178000, "requested_output": 32000},
    ),
    Row(
        "openai_gpt5_configured_limit",
        "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
        "300000 tokens.",
        PROMPT,
        {"limit": 272000, "prompt_tokens": 300000},
    ),
    Row(
        "anthropic_prompt_too_long",
        "prompt is too long: 210000 tokens > 200000 maximum",
        PROMPT,
        {"limit": 200000, "prompt_tokens": 210000},
    ),
    Row(
        "anthropic_input_plus_max_tokens",
        "input length and max_tokens exceed context limit: 190000 + 20000 > 200000",
        TOTAL,
        {"limit": 200000, "prompt_tokens": 190000, "requested_output": 20000},
    ),
    Row(
        "gemini_input_token_count",
        "The input token count (1100000) exceeds the maximum number of tokens allowed (1048576).",
        PROMPT,
        {"limit": 1048576, "prompt_tokens": 1100000},
    ),
    Row(
        "xai_max_prompt_length",
        "This model's maximum prompt length is 131072 but the request contains 140000 tokens.",
        PROMPT,
        {"limit": 131072, "prompt_tokens": 140000},
    ),
    Row(
        "mistral_too_large_for_model",
        "Prompt contains 40000 tokens, too large for model with 32768 maximum context length",
        PROMPT,
        {"limit": 32768, "prompt_tokens": 40000},
    ),
    Row(
        "sglang_together_input_longer",
        "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
        PROMPT,
        {"limit": 32768, "prompt_tokens": 40000},
    ),
    Row(
        "sglang_requested_total",
        "Requested token count exceeds the model's maximum context length of 32768 tokens. You "
        "requested a total of 33000 tokens: 30000 tokens from the input messages and 3000 tokens "
        "for the completion. Please reduce the number of tokens.",
        TOTAL,
        {"limit": 32768, "prompt_tokens": 30000, "requested_output": 3000},
    ),
    Row(
        "together_input_plus_max_tokens",
        "Input token count + max_tokens parameter must be less than the context length of the "
        "model being queried.",
        TOTAL,
    ),
    Row(
        "fireworks_prompt_too_long",
        "The prompt is too long: 140000, model maximum context length: 131072",
        PROMPT,
        {"limit": 131072, "prompt_tokens": 140000},
    ),
    Row(
        "llamacpp_request_exceeds",
        "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
        status=500,
    ),
    Row(
        "llamacpp_larger_than_max_ctx",
        "input (9000 tokens) is larger than the max context size (8192 tokens). skipping",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
    ),
    Row(
        "llamacpp_exceeds_available",
        "the request exceeds the available context size, try increasing it",
        UNSTATED,
        status=404,
    ),
    Row(
        "ollama_exceeded_by",
        "prompt too long; exceeded context length by 12 tokens",
        PROMPT,
        {"over_by": 12},
    ),
    Row(
        "lmstudio_keep_first",
        "Trying to keep the first 9000 tokens when context the overflows. However, the model is "
        "loaded with context length of only 8192 tokens, which is not enough.",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
        lower_bound=True,
    ),
    Row(
        "lmstudio_tokens_to_keep",
        "The number of tokens to keep from the initial prompt is greater than the context length.",
        UNSTATED,
    ),
    Row(
        "tgi_inputs_plus_max_new",
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3000 "
        "`inputs` tokens and 2000 `max_new_tokens`",
        TOTAL,
        {"limit": 4096, "prompt_tokens": 3000, "requested_output": 2000},
        status=422,
    ),
    Row(
        "tgi_inputs_less_than",
        "Input validation error: `inputs` must have less than 4096 tokens. Given: 5000",
        PROMPT,
        {"limit": 4096, "prompt_tokens": 5000},
        status=422,
    ),
    Row(
        "cohere_size_limit",
        "too many tokens: size limit exceeded by 500 tokens. Try using shorter or fewer inputs.",
        PROMPT,
        {"over_by": 500},
    ),
    Row(
        "cohere_total_prompt",
        "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received "
        "5000. Try using a shorter prompt",
        PROMPT,
        {"limit": 4081, "prompt_tokens": 5000},
    ),
    Row(
        "cohere_total_prediction",
        "too many tokens: total number of tokens (prompt and prediction) cannot exceed 4096 - "
        "received 4500. Try using a shorter prompt or a smaller max_tokens value.",
        TOTAL,
        {"limit": 4096},
    ),
    Row(
        "copilot_prompt_token_count",
        "prompt token count of 130000 exceeds the limit of 128000",
        PROMPT,
        {"limit": 128000, "prompt_tokens": 130000},
    ),
    Row(
        "kimi_model_token_limit",
        "Invalid request: Your request exceeded model token limit: 131072",
        PROMPT,
        {"limit": 131072},
    ),
    Row(
        "bedrock_mantle",
        "prompt tokens (210000) exceed model maximum (200000)",
        PROMPT,
        {"limit": 200000, "prompt_tokens": 210000},
    ),
    Row(
        "cerebras_current_length",
        "Please reduce the length of the messages or completion. Current length is 9000 while "
        "limit is 8192",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
    ),
    Row(
        "poolside_input_length",
        "Input length 300000 exceeds the maximum allowed input length of 262144 tokens.",
        PROMPT,
        {"limit": 262144, "prompt_tokens": 300000},
    ),
    Row(
        "generic_input_length",
        "Input length (300000) exceeds model's maximum context length (262144).",
        PROMPT,
        {"limit": 262144, "prompt_tokens": 300000},
    ),
    Row(
        "generic_configured_context",
        "the prompt has 9000 tokens, but the configured context size is 8192 tokens",
        PROMPT,
        {"limit": 8192, "prompt_tokens": 9000},
    ),
    Row(
        "dashscope_input_range",
        "Range of input length should be [1, 30720]",
        UNSTATED,
        {"limit": 30720},
    ),
    Row("bedrock_input_too_long", "Too many input tokens. Max input tokens: 200000", UNSTATED),
    Row(
        "openai_exceeds_context_window",
        "Your input exceeds the context window of this model.",
        UNSTATED,
    ),
    Row("minimax_context_window", "context window exceeds limit (2013)", UNSTATED),
    Row(
        "litellm_context_window_error",
        "litellm.ContextWindowExceededError: upstream refused the request",
        UNSTATED,
    ),
    Row(
        "generic_max_context_length",
        "This model's maximum context length is 16384 tokens.",
        UNSTATED,
        {"limit": 16384},
    ),
    Row("loose_context_length", "Error: context length exceeded", UNSTATED),
    Row("loose_context_window", "The context window is full.", UNSTATED, status=200),
    Row("loose_prompt_too_long", "Prompt is too long", UNSTATED, status=413),
    Row("loose_too_many_tokens", "Too many tokens in request", UNSTATED, status=422),
    Row("loose_reduce_length", "Please reduce the length of the messages.", UNSTATED),
]

LOOK_ALIKE_ROWS = [
    Row("rate_limit_words", "Rate limit exceeded, retry later", Kind.RATE_LIMIT),
    Row(
        "per_minute_limit",
        "Request too large for model `llama3-70b-8192` in organization `org_01` service tier "
        "`on_demand` on tokens per minute (TPM): Limit 6000, Requested 7000, please reduce your "
        "message size and try again.",
        Kind.RATE_LIMIT,
        status=413,
    ),
    Row("wait_and_retry", "Too many tokens, please wait before trying again.", Kind.RATE_LIMIT),
    Row(
        "quota_exceeded",
        "Quota exceeded for quota metric 'Generate Content API requests'",
        Kind.RATE_LIMIT,
        status=403,
    ),
    Row(
        "anthropic_max_tokens",
        "max_tokens: 70000 > 64000, which is the maximum allowed number of output tokens for "
        "claude-sonnet-4",
        Kind.OUTPUT_CAP,
    ),
    Row(
        "openai_max_tokens_too_large",
        "max_tokens is too large: 128000. This model supports at most 16384 completion tokens, "
        "whereas you provided 128000.",
        Kind.OUTPUT_CAP,
    ),
    Row(
        "bedrock_maximum_tokens",
        "The maximum tokens you requested exceeds the model limit of 2048.",
        Kind.OUTPUT_CAP,
    ),
    Row(
        "groq_max_tokens",
        "max_tokens must be less than or equal to 8192, the maximum value for max_tokens",
        Kind.OUTPUT_CAP,
    ),
    Row(
        "cohere_max_tokens",
        "too many tokens: max tokens must be less than or equal to 4096, the maximum output "
        "length for this model - received 8000.",
        Kind.OUTPUT_CAP,
    ),
    Row(
        "tgi_max_new_tokens",
        "Input validation error: `max_new_tokens` must be <= 4096. Given: 8192",
        Kind.OUTPUT_CAP,
        status=422,
    ),
    Row("cannot_be_greater", "max_tokens=100000 cannot be greater than 32768", Kind.OUTPUT_CAP),
    Row(
        "integer_above_maximum",
        "Invalid 'max_tokens': integer above maximum value. Expected a value <= 4096, but got "
        "10000 instead.",
        Kind.OUTPUT_CAP,
    ),
    Row("http_413_words", "Payload Too Large", Kind.PAYLOAD_TOO_LARGE, status=413),
    Row(
        "maximum_bytes",
        "Request exceeds the maximum allowed number of bytes.",
        Kind.PAYLOAD_TOO_LARGE,
        status=413,
    ),
    Row(
        "payload_size",
        "Request payload size exceeds the limit: 10485760 bytes.",
        Kind.PAYLOAD_TOO_LARGE,
    ),
    Row(
        "string_too_long",
        "Invalid 'messages[1].content': string too long. Expected a string with maximum length "
        "10485760, but got a string with length 12000000 instead.",
        Kind.PAYLOAD_TOO_LARGE,
    ),
    Row(
        "llamacpp_context_size_exceeded",
        "Context size has been exceeded.",
        Kind.GENERATION_EXHAUSTED,
        status=500,
    ),
]


def row_ids(rows: list[Row]) -> list[str]:
    return [row.rule for row in rows]


@pytest.mark.parametrize("row", OVERFLOW_ROWS, ids=row_ids(OVERFLOW_ROWS))
def test_overflow_sentence_gives_kind_and_numbers(row: Row) -> None:
    verdict = classify(row.status, error_body(row.message))
    assert (verdict.rule, verdict.kind, numbers_of(verdict)) == (
        row.rule,
        row.kind,
        stated(**row.numbers),
    )
    assert verdict.prompt_is_lower_bound is row.lower_bound
    assert verdict.overflow
    assert verdict.message == row.message


@pytest.mark.parametrize("row", LOOK_ALIKE_ROWS, ids=row_ids(LOOK_ALIKE_ROWS))
def test_look_alike_is_not_overflow(row: Row) -> None:
    verdict = classify(row.status, error_body(row.message))
    assert (verdict.rule, verdict.kind) == (row.rule, row.kind)
    assert not verdict.overflow
    assert not verdict.compaction_can_fix
    assert numbers_of(verdict) == stated()


def test_every_table_row_has_an_example() -> None:
    tables = (
        overflow._OVERFLOW_PATTERNS,
        overflow._RATE_LIMIT_PATTERNS,
        overflow._OUTPUT_CAP_PATTERNS,
        overflow._PAYLOAD_PATTERNS,
        overflow._EXHAUSTED_PATTERNS,
        overflow._LOOSE_PATTERNS,
    )
    names = [pattern.name for table in tables for pattern in table]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(row_ids(OVERFLOW_ROWS + LOOK_ALIKE_ROWS))


# --- Edge cases: statuses, envelopes and bodies the rules must not trip over -----------------

OVERFLOW_SENTENCE = (
    "This model's maximum context length is 4096 tokens. However, your messages resulted in "
    "5000 tokens."
)
GATEWAY_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
LLAMACPP_FRAME = json.dumps(
    {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }
)
SSE = {"content-type": "text/event-stream"}


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "rule"),
    [
        pytest.param(400, "", None, Kind.NOT_OVERFLOW, "no_match", id="empty_400"),
        pytest.param(200, b"", None, Kind.NOT_OVERFLOW, "no_match", id="empty_bytes_200"),
        pytest.param(413, "", None, Kind.PAYLOAD_TOO_LARGE, "status_413", id="empty_413"),
        pytest.param(
            413,
            error_body("Provider returned error", code=413),
            None,
            Kind.PAYLOAD_TOO_LARGE,
            "status_413",
            id="unexplained_413",
        ),
        pytest.param(502, GATEWAY_PAGE, None, Kind.NOT_OVERFLOW, "no_match", id="html_502_page"),
        pytest.param(
            502,
            f"<html><body>{OVERFLOW_SENTENCE.replace('. However', '. Sorry')}</body></html>",
            None,
            Kind.NOT_OVERFLOW,
            "no_match",
            id="generic_anchor_not_trusted_on_502",
        ),
        pytest.param(
            500,
            error_body("Prompt is too long"),
            None,
            Kind.NOT_OVERFLOW,
            "no_match",
            id="loose_phrase_not_trusted_on_500",
        ),
        pytest.param(
            503,
            error_body("Too many tokens"),
            None,
            Kind.NOT_OVERFLOW,
            "no_match",
            id="too_many_tokens_on_503",
        ),
        pytest.param(
            429,
            error_body(OVERFLOW_SENTENCE, code="context_length_exceeded"),
            None,
            Kind.RATE_LIMIT,
            "status_429",
            id="429_with_overflow_words_and_code",
        ),
        pytest.param(
            400,
            error_body("Slow down", code="rate_limit_exceeded"),
            None,
            Kind.RATE_LIMIT,
            "code:rate_limit_exceeded",
            id="rate_limit_code_restatused_400",
        ),
        pytest.param(
            400,
            json.dumps({"type": "ThrottlingException", "message": "Rate exceeded"}),
            None,
            Kind.RATE_LIMIT,
            "code:throttlingexception",
            id="bedrock_throttling_code_400",
        ),
        pytest.param(
            413,
            error_body("Prompt is too long"),
            None,
            Kind.OVERFLOW,
            "loose_prompt_too_long",
            id="413_that_names_the_prompt",
        ),
        pytest.param(
            413,
            "<html><body><h1>413 Request Entity Too Large</h1></body></html>",
            {"content-type": "text/html"},
            Kind.PAYLOAD_TOO_LARGE,
            "http_413_words",
            id="html_413_page",
        ),
        pytest.param(
            400,
            json.dumps("Prompt is too long"),
            None,
            Kind.OVERFLOW,
            "loose_prompt_too_long",
            id="bare_json_string_body",
        ),
        pytest.param(
            400,
            "upstream said: prompt is too long {not json",
            None,
            Kind.OVERFLOW,
            "loose_prompt_too_long",
            id="plain_text_with_a_stray_brace",
        ),
        pytest.param(
            400,
            error_body(OVERFLOW_SENTENCE)[:-20],
            None,
            Kind.OVERFLOW_PROMPT,
            "openai_messages_resulted",
            id="truncated_json_body",
        ),
        pytest.param(
            200,
            json.dumps({"choices": [{"message": {"role": "assistant", "content": "Too long"}}]}),
            None,
            Kind.NOT_OVERFLOW,
            "no_match",
            id="success_body_with_overflow_words_in_content",
        ),
        pytest.param(
            400,
            json.dumps([{"ok": 1}] * 4 + [json.loads(error_body("Prompt is too long"))]),
            None,
            Kind.NOT_OVERFLOW,
            "no_match",
            id="array_items_after_the_fourth_are_ignored",
        ),
        pytest.param(
            400,
            json.dumps({"error": {"message": "Prompt is too long", "code": True}}),
            None,
            Kind.OVERFLOW,
            "loose_prompt_too_long",
            id="boolean_code",
        ),
        pytest.param(
            200,
            f"data: {LLAMACPP_FRAME}\n\n",
            None,
            Kind.OVERFLOW_PROMPT,
            "code:exceed_context_size_error+llamacpp_exceeds_available",
            id="sse_error_frame_without_content_type",
        ),
        pytest.param(
            200,
            f": OPENROUTER PROCESSING\r\n\r\nevent: error\r\ndata: {LLAMACPP_FRAME}\r\n\r\n"
            "data: [DONE]\r\n\r\n",
            SSE,
            Kind.OVERFLOW_PROMPT,
            "code:exceed_context_size_error+llamacpp_exceeds_available",
            id="sse_comment_crlf_and_done",
        ),
        pytest.param(
            None,
            'data: {"error":\ndata: ' + json.dumps({"message": "Prompt is too long"}) + "}\n\n",
            SSE,
            Kind.OVERFLOW,
            "loose_prompt_too_long",
            id="sse_data_split_over_lines_no_status",
        ),
        pytest.param(
            200,
            error_body(OVERFLOW_SENTENCE),
            SSE,
            Kind.OVERFLOW_PROMPT,
            "openai_messages_resulted",
            id="json_error_labelled_as_a_stream",
        ),
        pytest.param(
            400,
            error_body("Your request is invalid", code="context_length_exceeded"),
            None,
            Kind.OVERFLOW,
            "code:context_length_exceeded",
            id="code_without_a_known_sentence",
        ),
    ],
)
def test_edge_case(
    status: int | None,
    body: str | bytes,
    headers: dict[str, str] | None,
    kind: Kind,
    rule: str,
) -> None:
    verdict = classify(status, body, headers)
    assert (verdict.kind, verdict.rule) == (kind, rule)


def test_code_with_llamacpp_fields_gives_the_counts() -> None:
    body = error_body("boom", type="exceed_context_size_error", n_prompt_tokens=5000, n_ctx=4096)
    verdict = classify(500, body)
    assert (verdict.kind, verdict.prompt_tokens, verdict.limit) == (PROMPT, 5000, 4096)


def test_curly_apostrophe_newlines_and_thousands_separators_are_normalised() -> None:
    message = (
        "This model\u2019s maximum context length is 128,000 tokens.\nHowever, your messages "
        "resulted in\n  200,123 tokens."
    )
    verdict = classify(400, error_body(message))
    assert numbers_of(verdict) == stated(limit=128000, prompt_tokens=200123)
    assert "\n" not in verdict.message


def test_prompt_count_without_at_least_is_exact() -> None:
    message = (
        "This model's maximum context length is 4096 tokens. However, you requested 1000 output "
        "tokens and your prompt contains 5000 input tokens."
    )
    verdict = classify(400, error_body(message))
    assert (verdict.kind, verdict.prompt_tokens) == (PROMPT, 5000)
    assert not verdict.prompt_is_lower_bound


def test_openrouter_raw_with_numbers_is_read() -> None:
    raw = json.dumps(
        {"type": "error", "error": {"message": "prompt is too long: 5 tokens > 4 maximum"}}
    )
    body = json.dumps({"error": {"message": "Provider returned error", "metadata": {"raw": raw}}})
    verdict = classify(400, body)
    assert (verdict.kind, verdict.prompt_tokens, verdict.limit) == (PROMPT, 5, 4)
    assert verdict.message == "Provider returned error | prompt is too long: 5 tokens > 4 maximum"


def test_nesting_deeper_than_the_bound_is_ignored() -> None:
    document: object = json.loads(error_body("Prompt is too long"))
    for _ in range(10):
        document = {"error": document}
    assert classify(400, json.dumps(document)).kind is Kind.NOT_OVERFLOW


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="deep_array"),
        pytest.param('x: {"a":' + "[" * 100_000, id="deep_embedded"),
        pytest.param(b"\xff\xfe prompt is too long \xc3", id="invalid_utf8"),
        pytest.param(f"maximum context length is {'9' * 5000} tokens", id="huge_number"),
    ],
)
def test_hostile_body_gives_a_verdict(body: str | bytes) -> None:
    assert isinstance(classify(400, body), Verdict)


@pytest.mark.parametrize(
    ("requested_output", "can_fix"),
    [(None, True), (1000, True), (8191, True), (8192, False), (100_000, False)],
)
def test_requests_own_max_tokens_decides_when_message_is_silent(
    requested_output: int | None, can_fix: bool
) -> None:
    body = error_body("prompt is too long: 9000 tokens > 8192 maximum")
    verdict = classify(400, body, requested_output=requested_output)
    assert verdict.compaction_can_fix is can_fix
    assert verdict.requested_output is None


def test_stated_reservation_wins_over_the_requests_own() -> None:
    fits = error_body("input length and max_tokens exceed context limit: 100 + 200 > 250")
    fills = error_body("input length and max_tokens exceed context limit: 100 + 300 > 250")
    assert classify(400, fits, requested_output=500).compaction_can_fix
    assert not classify(400, fills, requested_output=10).compaction_can_fix


def test_requested_output_is_ignored_without_a_window() -> None:
    verdict = classify(400, error_body("Prompt is too long"), requested_output=10**9)
    assert verdict.compaction_can_fix


# --- Properties ------------------------------------------------------------------------------

PHRASES = [row.message for row in OVERFLOW_ROWS + LOOK_ALIKE_ROWS]
KEYS = [
    "error",
    "message",
    "code",
    "type",
    "status",
    "raw",
    "metadata",
    "detail",
    "response",
    "n_ctx",
    "n_prompt_tokens",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(PHRASES),
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), children, max_size=6)
    ),
    max_leaves=25,
)
bodies = (
    st.text()
    | st.binary()
    | st.sampled_from([case["body"] for case in CASES])
    | json_values.map(json.dumps)
    | json_values.map(lambda value: f"data: {json.dumps(value)}\n\n")
)
statuses = st.none() | st.integers(min_value=100, max_value=599)
content_types = st.sampled_from([None, {"content-type": "text/event-stream"}, {}])


@given(statuses, bodies, content_types, st.none() | st.integers(min_value=0, max_value=10**7))
def test_any_response_gets_a_consistent_verdict(
    status: int | None,
    body: str | bytes,
    headers: dict[str, str] | None,
    requested_output: int | None,
) -> None:
    verdict = classify(status, body, headers, requested_output=requested_output)
    assert verdict.overflow is (verdict.kind in {PROMPT, TOTAL, UNSTATED})
    if verdict.compaction_can_fix:
        assert verdict.overflow
    if not verdict.overflow:
        assert numbers_of(verdict) == stated()


@given(bodies, content_types)
def test_429_is_never_overflow(body: str | bytes, headers: dict[str, str] | None) -> None:
    assert classify(429, body, headers).kind is Kind.RATE_LIMIT


@given(statuses, st.text())
def test_bytes_and_text_agree(status: int | None, body: str) -> None:
    assert classify(status, body.encode()) == classify(status, body)


# The Responses API (`/v1/responses`): its error bodies, its stream events and look-alikes.

RESPONSES_OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


def responses_event(kind: str, **data: object) -> bytes:
    body = json.dumps({"type": kind, "sequence_number": 2, **data})
    return f"event: {kind}\ndata: {body}\n\n".encode()


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, error_body(RESPONSES_OVERFLOW, param="input", code="context_length_exceeded")),
        (400, error_body(RESPONSES_OVERFLOW, param="input", code=None)),  # the wording alone
        (
            200,
            responses_event("response.created", response={"status": "in_progress", "error": None})
            + responses_event(
                "response.failed",
                response={
                    "status": "failed",
                    "error": {"code": "context_length_exceeded", "message": RESPONSES_OVERFLOW},
                },
            ),
        ),
        (
            200,
            responses_event(
                "error", code="context_length_exceeded", message=RESPONSES_OVERFLOW, param="input"
            ),
        ),
    ],
    ids=["400", "400-wording-only", "response.failed", "error-event"],
)
def test_responses_api_overflow(status: int, body: str | bytes) -> None:
    verdict = classify(status, body)
    assert verdict.overflow
    assert verdict.compaction_can_fix


@pytest.mark.parametrize(
    ("status", "body"),
    [
        # The output ran out: the answer is cut, the prompt was fine.
        (
            200,
            responses_event(
                "response.incomplete",
                response={
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                },
            ),
        ),
        (400, error_body("No tool output found for function call call_abc.", param="input")),
        (
            400,
            error_body(
                "No tool call found for function call output with call_id call_abc.",
                param="input",
            ),
        ),
        (
            400,
            error_body(
                "Item 'fc_1' of type 'function_call' was provided without its required "
                "'reasoning' item: 'rs_1'.",
                param="input",
            ),
        ),
        (400, error_body("The encrypted content for item rs_1 could not be verified.")),
        (
            400,
            error_body(
                "Previous response with id 'resp_1' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            ),
        ),
        (
            200,
            responses_event(
                "response.failed",
                response={
                    "status": "failed",
                    "error": {"code": "server_error", "message": "The server had an error."},
                },
            ),
        ),
    ],
    ids=[
        "incomplete-max-output",
        "no-tool-output",
        "no-tool-call",
        "missing-reasoning",
        "encrypted-content",
        "previous-not-found",
        "failed-server-error",
    ],
)
def test_responses_api_look_alikes_are_not_overflow(status: int, body: str | bytes) -> None:
    assert not classify(status, body).overflow


# --- The Messages API (`/v1/messages`) and Anthropic-compatible servers ----------------------


def anthropic_error(message: str, kind: str = "invalid_request_error", **extra: object) -> str:
    """An Anthropic-shaped error body around `message`."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}, **extra})


@pytest.mark.parametrize(
    ("status", "body", "kind", "numbers"),
    [
        # The window a request with the 1M beta has: learned from the message.
        (
            400,
            anthropic_error("prompt is too long: 1048577 tokens > 1000000 maximum"),
            PROMPT,
            stated(prompt_tokens=1_048_577, limit=1_000_000),
        ),
        # Vertex AI (its request ids start req_vrtx_), broken over lines as Claude Code shows it.
        (
            400,
            anthropic_error(
                "input length and `max_tokens` exceed context limit: 193125 + 21333 >\n 200000, "
                "decrease input \n    length or `max_tokens` and try again",
                request_id="req_vrtx_011CWscdZLbCzvTdKUeranGy",
            ),
            TOTAL,
            stated(prompt_tokens=193_125, limit=200_000, requested_output=21_333),
        ),
        # Bedrock's Claude, in Bedrock's own envelope.
        (
            400,
            json.dumps({"message": "prompt is too long: 215000 tokens > 200000 maximum"}),
            PROMPT,
            stated(prompt_tokens=215_000, limit=200_000),
        ),
        (
            400,
            json.dumps({"message": "Input is too long for requested model."}),
            UNSTATED,
            stated(),
        ),
        # Moonshot's Anthropic-compatible endpoint words it as its OpenAI one does.
        (
            400,
            anthropic_error(
                "Invalid request: Your request exceeded model token limit: 262144 "
                "(requested: 300000)"
            ),
            PROMPT,
            stated(prompt_tokens=300_000, limit=262_144),
        ),
        # A Claude Code proxy in front of a local GLM relays the server's error as a repr.
        (
            400,
            json.dumps(
                {
                    "detail": "Error code: 400 - {'object': 'error', 'message': \"The input "
                    "(233781 tokens) is longer than the model's context length (202752 tokens).\", "
                    "'type': 'BadRequestError', 'param': None, 'code': 400}"
                }
            ),
            PROMPT,
            stated(prompt_tokens=233_781, limit=202_752),
        ),
        # A local server's Anthropic endpoint (mlx-serve), with no numbers.
        (400, anthropic_error("Prompt exceeds maximum context length"), UNSTATED, stated()),
    ],
    ids=["anthropic-1m", "vertex", "bedrock", "bedrock-bare", "moonshot", "glm-relay", "mlx"],
)
def test_messages_api_overflow(
    status: int, body: str, kind: Kind, numbers: dict[str, int | None]
) -> None:
    verdict = classify(status, body)
    assert (verdict.kind, numbers_of(verdict)) == (kind, numbers)
    assert verdict.compaction_can_fix


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            anthropic_error("A maximum of 4 blocks with cache_control may be provided. Found 5."),
        ),
        (
            400,
            anthropic_error(
                "messages.1.content.0.thinking.signature: Invalid `signature` in `thinking` block"
            ),
        ),
        (
            400,
            anthropic_error(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                "documentation at https://docs.claude.com/en/docs/build-with-claude/"
                "extended-thinking#max-tokens-and-context-window-size"
            ),
        ),
        (400, anthropic_error("messages: text content blocks must be non-empty")),
        (
            400,
            anthropic_error(
                "Your credit balance is too low to access the Anthropic API. Please go to Plans "
                "& Billing to upgrade or purchase credits."
            ),
        ),
        (
            429,
            anthropic_error(
                "Extra usage is required for long context requests.", "rate_limit_error"
            ),
        ),
        # Mid-stream, the provider is overloaded: no event about the prompt.
        (
            200,
            'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
            '"message":"Overloaded"}}\n\n',
        ),
    ],
    ids=["breakpoints", "signature", "budget", "empty-text", "credit", "long-context", "stream"],
)
def test_messages_api_look_alikes_are_not_overflow(status: int, body: str) -> None:
    verdict = classify(status, body)
    assert not verdict.overflow
    assert not verdict.compaction_can_fix
