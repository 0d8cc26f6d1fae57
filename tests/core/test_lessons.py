"""Which window an overflow error may teach: only numbers about the request that was sent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.lessons import MIN_WINDOW, PROMPT_TOLERANCE, UNSTATED_SHARE, window_lesson
from proxy.core.overflow import Kind, Verdict, classify


def openai_error(message: str, code: str | None = "context_length_exceeded") -> str:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return json.dumps({"error": error})


def resulted(limit: int, prompt: int) -> Verdict:
    """OpenAI's overflow sentence, through the classifier."""
    return classify(
        400,
        openai_error(
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        ),
    )


def overflow(
    limit: int | None,
    prompt: int | None = None,
    *,
    out: int | None = None,
    lower_bound: bool = False,
    kind: Kind = Kind.OVERFLOW_PROMPT,
) -> Verdict:
    return Verdict(
        kind,
        prompt_tokens=prompt,
        limit=limit,
        requested_output=out,
        prompt_is_lower_bound=lower_bound,
    )


# -- a stated prompt ---------------------------------------------------------------------------


def test_a_stated_prompt_close_to_what_was_sent_teaches_the_limit() -> None:
    assert window_lesson(resulted(8192, 9000), sent=8800) == 8192


def test_a_tokenizer_of_another_family_is_within_the_tolerance() -> None:
    # Claude counts about a quarter more than o200k before any calibration corrects it.
    assert window_lesson(resulted(8192, 11_000), sent=8800) == 8192


def test_an_echoed_sentence_about_another_request_teaches_nothing() -> None:
    # A 400 quoting the user's pasted log: its numbers are not this request's.
    echo = classify(
        400,
        openai_error(
            "Invalid content: 'This model's maximum context length is 1000 tokens. However, "
            "your messages resulted in 1200 tokens.'",
            code=None,
        ),
    )
    assert echo.overflow
    assert echo.limit == 1000
    assert window_lesson(echo, sent=5000) is None


def test_a_stated_prompt_far_above_what_was_sent_teaches_nothing() -> None:
    assert window_lesson(resulted(4096, 20_000), sent=5000) is None


def test_a_limit_the_prompt_fits_in_teaches_nothing() -> None:
    # Nothing explains this overflow: the prompt is under the limit and no output reserved.
    assert window_lesson(overflow(8192, 6000), sent=6000) is None


def test_a_total_overflow_counts_the_stated_output() -> None:
    verdict = classify(
        400,
        openai_error(
            "This model's maximum context length is 8192 tokens. However, you requested "
            "10000 tokens (6000 in the messages, 4000 in the completion). Please reduce the "
            "length of the messages or completion."
        ),
    )
    assert window_lesson(verdict, sent=6100) == 8192


def test_a_total_overflow_counts_the_requests_own_output_when_unstated() -> None:
    verdict = overflow(8192, 6000, kind=Kind.OVERFLOW)
    assert window_lesson(verdict, sent=6000, output=4000) == 8192
    assert window_lesson(verdict, sent=6000) is None


def test_a_lower_bound_may_be_far_below_what_was_sent() -> None:
    # vLLM >= 0.16 counts only up to the limit: "you passed 28,673 input tokens".
    verdict = classify(
        400,
        openai_error(
            "You passed 28673 input tokens and requested 4096 output tokens. However, the "
            "model's context length is only 32768 tokens, resulting in a maximum input length "
            "of 28672 tokens. Please reduce the length of the input prompt.",
            code=None,
        ),
    )
    assert verdict.prompt_is_lower_bound
    assert window_lesson(verdict, sent=100_000) == 32768
    # ...but not above it: the prompt is at least that long.
    assert window_lesson(verdict, sent=10_000) is None


# -- no stated prompt --------------------------------------------------------------------------


def test_without_a_stated_prompt_a_limit_just_below_what_was_sent_is_believed() -> None:
    assert window_lesson(overflow(6000, kind=Kind.OVERFLOW), sent=8000) == 6000


def test_without_a_stated_prompt_a_limit_far_below_what_was_sent_is_not() -> None:
    bare = classify(400, openai_error("The maximum context length is 1000 tokens.", code=None))
    assert bare.overflow
    assert (bare.limit, bare.prompt_tokens) == (1000, None)
    assert window_lesson(bare, sent=8000) is None


def test_without_a_stated_prompt_a_limit_above_what_was_sent_needs_the_output() -> None:
    verdict = overflow(9000, kind=Kind.OVERFLOW)
    assert window_lesson(verdict, sent=8000) is None
    assert window_lesson(verdict, sent=8000, output=2000) == 9000


# -- never -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "verdict",
    [
        Verdict(Kind.RATE_LIMIT, limit=4000),
        Verdict(Kind.OUTPUT_CAP, prompt_tokens=5000, limit=4000),
        overflow(None, 5000),
        overflow(MIN_WINDOW - 1, 5000),
    ],
    ids=["rate_limit", "output_cap", "no_limit", "tiny_limit"],
)
def test_no_lesson(verdict: Verdict) -> None:
    assert window_lesson(verdict, sent=5000) is None


# -- properties --------------------------------------------------------------------------------

counts = st.integers(min_value=1, max_value=2_000_000)
verdicts = st.builds(
    overflow,
    st.none() | counts,
    st.none() | counts,
    out=st.none() | st.integers(min_value=0, max_value=200_000),
    lower_bound=st.booleans(),
    kind=st.sampled_from(list(Kind)),
)


@given(verdicts, counts, st.none() | st.integers(min_value=0, max_value=200_000))
def test_a_lesson_is_the_stated_limit_and_explains_an_overflow(
    verdict: Verdict, sent: int, output: int | None
) -> None:
    window = window_lesson(verdict, sent=sent, output=output)
    if window is None:
        return
    assert verdict.overflow
    assert window == verdict.limit
    assert window >= MIN_WINDOW
    reserved = verdict.requested_output or output or 0
    prompt = sent if verdict.prompt_tokens is None else verdict.prompt_tokens
    assert window < prompt + reserved  # a request that fits is not refused for its length
    if verdict.prompt_tokens is None:
        assert window >= sent * UNSTATED_SHARE


@given(verdicts, counts, st.floats(min_value=0.0, max_value=50.0))
def test_a_stated_prompt_unlike_what_was_sent_never_teaches(
    verdict: Verdict, sent: int, ratio: float
) -> None:
    prompt = round(sent * ratio)
    stated = Verdict(
        verdict.kind,
        prompt_tokens=prompt,
        limit=verdict.limit,
        requested_output=verdict.requested_output,
        prompt_is_lower_bound=verdict.prompt_is_lower_bound,
    )
    too_large = prompt > sent * (1 + PROMPT_TOLERANCE)
    too_small = prompt < sent * (1 - PROMPT_TOLERANCE) and not verdict.prompt_is_lower_bound
    if too_large or too_small:
        assert window_lesson(stated, sent=sent, output=100_000) is None
