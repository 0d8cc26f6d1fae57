"""Overflow classification: does this upstream error mean "the prompt does not fit"?

This module owns one decision. Given an upstream error response (status, headers and the
first bytes of the body, or the first events of a stream), it says whether the context window
overflowed, which kind of overflow it was, and which numbers the provider stated. What to do
about it (compact and retry once, or pass the error through) is the service's business.

Rule 1: pure. No I/O, no clock, no environment; the caller hands in what it read.

Rule 2: never raise on what an upstream sends. Any status and any bytes give a verdict.

Rule 3: a false positive costs more than a miss. Compacting on a rate limit or an output-cap
error destroys history and fixes nothing, so a 429 is never overflow, and loose phrases count
only on the statuses where providers really report overflow.

Providers disagree on status, envelope and wording (research notes: OVERFLOW.md §5). The body
is first reduced to evidence: every message string, every code or type value and llama.cpp's
structured counts, found by walking all the envelopes, including JSON arrays (Gemini), JSON
inside strings (OpenRouter's `metadata.raw`, LiteLLM's wrapped provider errors) and SSE frames
(a 200 stream whose first event is an error). Then ordered rules run; the first match wins:

    R1  status 429                                   RATE_LIMIT
    R2  an overflow code (`context_length_exceeded`)  overflow, numbers from R4's table
    R3  a rate-limit code or phrase                  RATE_LIMIT
    R4  a provider's own overflow sentence           overflow, with the numbers it states
    R5  an output-cap sentence                       OUTPUT_CAP
    R6  a byte-size sentence or code                 PAYLOAD_TOO_LARGE
    R7  llama.cpp's "context size has been exceeded" GENERATION_EXHAUSTED
    R8  a loose phrase, on 400/413/422/200 or frames overflow
    R9  any other 413                                PAYLOAD_TOO_LARGE
        anything else                                NOT_OVERFLOW

An overflow is OVERFLOW_PROMPT when the prompt alone does not fit, OVERFLOW_TOTAL when the
prompt plus the reserved output (`max_tokens`) does not, and plain OVERFLOW when the message
does not say which.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


class Kind(enum.StrEnum):
    """What an upstream error means for the conversation."""

    OVERFLOW_PROMPT = "OVERFLOW_PROMPT"
    """The prompt alone is longer than the context window."""
    OVERFLOW_TOTAL = "OVERFLOW_TOTAL"
    """The prompt plus the reserved output (`max_tokens`) is longer than the window."""
    OVERFLOW = "OVERFLOW"
    """The window overflowed, but the message does not say how."""
    OUTPUT_CAP = "OUTPUT_CAP"
    """`max_tokens` is above the model's output cap; the history is not the problem."""
    RATE_LIMIT = "RATE_LIMIT"
    """A rate limit or quota, however it is worded; waiting helps, compaction does not."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """A limit on bytes or on one field's length, not on tokens."""
    GENERATION_EXHAUSTED = "GENERATION_EXHAUSTED"
    """The window filled up while the model was generating (llama.cpp, mid-decode)."""
    NOT_OVERFLOW = "NOT_OVERFLOW"
    """Any other error: pass it through untouched."""

    @property
    def is_overflow(self) -> bool:
        """True for the three kinds that say the prompt (plus output) does not fit."""
        return self in _OVERFLOW_KINDS


_OVERFLOW_KINDS = frozenset({Kind.OVERFLOW_PROMPT, Kind.OVERFLOW_TOTAL, Kind.OVERFLOW})


@dataclass(frozen=True, slots=True)
class Verdict:
    """The classifier's answer about one upstream error; counts are as the provider stated."""

    kind: Kind
    prompt_tokens: int | None = None
    """Prompt tokens; only a lower bound when `prompt_is_lower_bound`."""
    limit: int | None = None
    """The context window in tokens (for llama.cpp, the window of one slot)."""
    requested_output: int | None = None
    """The output reservation (`max_tokens`) the provider counted against the window."""
    over_by: int | None = None
    """Tokens over the window, when that is all the provider says (Ollama, Cohere)."""
    prompt_chars: int | None = None
    """The prompt's length in characters (vLLM refuses very long text before tokenizing)."""
    prompt_is_lower_bound: bool = False
    compaction_can_fix: bool = False
    """A shorter history can fix this: an overflow whose output reservation leaves room."""
    rule: str = "none"
    """Which rule fired, for the log."""
    message: str = ""
    """The provider's message text, whitespace collapsed."""

    @property
    def overflow(self) -> bool:
        """True when the prompt (plus the reserved output) does not fit the window."""
        return self.kind.is_overflow


def classify(
    status: int | None,
    body: str | bytes,
    headers: Mapping[str, str] | None = None,
    *,
    requested_output: int | None = None,
) -> Verdict:
    """Classify one upstream error response, or the first events of a stream.

    `status` is None for an error frame whose HTTP status is unknown. `headers` has lower-cased
    names. `requested_output` is the request's own `max_tokens`; it decides
    `compaction_can_fix` when the message does not state the reservation.
    """
    evidence = _gather(status, body, headers or {})
    verdict = next(
        (found for rule in _RULES if (found := rule(evidence)) is not None),
        Verdict(Kind.NOT_OVERFLOW, rule="no_match"),
    )
    return dataclasses.replace(
        verdict,
        compaction_can_fix=_compaction_can_fix(verdict, requested_output),
        message=evidence.message,
    )


def _compaction_can_fix(verdict: Verdict, requested_output: int | None) -> bool:
    # When the output reservation alone fills the window (OpenRouter defaulting max_tokens to
    # the model's maximum, Azure asked for 1,000,000) no shorter history fits, and the proxy
    # must not spend its one retry on compaction.
    output = verdict.requested_output if verdict.requested_output is not None else requested_output
    if output is None or verdict.limit is None:
        return verdict.overflow
    return verdict.overflow and output < verdict.limit


# --- Evidence: what the body says, whatever its envelope ---------------------------------

# Message strings: OpenAI `message`, TGI/Ollama `error`, FastAPI `detail`, OpenRouter's `raw`.
_TEXT_KEYS = frozenset({"message", "error", "detail", "details", "error_message", "msg", "raw"})
# Machine-readable codes; numbers too (FastChat's 40303), compared as strings.
_CODE_KEYS = frozenset({"code", "type", "error_type", "status", "reason"})
# llama.cpp states the counts as fields; `n_ctx` is the window of one slot.
_COUNT_KEYS = frozenset({"n_prompt_tokens", "n_ctx"})

# Deep enough for a LiteLLM error relayed inside OpenRouter's `metadata.raw` (a depth counts
# one object, array or JSON string); the bound keeps a hostile body cheap.
_MAX_DEPTH = 10
# Gemini wraps its error in an array; only the first items can be the error.
_MAX_ITEMS = 4

_SSE_START = ("data:", "event:", ":")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'"})
_SPACE = re.compile(r"\s+")
_DECODER = json.JSONDecoder()


@dataclass(slots=True)
class _Evidence:
    """What the body says, gathered from every envelope before any rule runs."""

    status: int | None
    messages: list[str] = field(default_factory=list)
    codes: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    text: str = ""
    """The messages joined and normalised: straight quotes, single spaces, lower case."""
    message: str = ""


def _gather(status: int | None, body: str | bytes, headers: Mapping[str, str]) -> _Evidence:
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    evidence = _Evidence(status)
    for payload in _payloads(text, headers):
        _read_text(payload, evidence, 0)
    evidence.message = " | ".join(_SPACE.sub(" ", message) for message in evidence.messages)
    # Codex shows OpenAI's message with a newline mid-sentence, and some servers write the
    # apostrophe of "model's" as U+2019; the patterns are written for the plain form.
    evidence.text = evidence.message.translate(_QUOTES).lower()
    return evidence


def _payloads(text: str, headers: Mapping[str, str]) -> list[str]:
    """The JSON documents to read: the body, or each event's data in an SSE stream."""
    # llama.cpp (before Oct 2025), OpenRouter and the Responses API report errors inside a 200
    # stream; some relays drop the content type, so the body's first line counts too.
    streamed = "text/event-stream" in headers.get("content-type", "").lower()
    if streamed or text.lstrip().startswith(_SSE_START):
        events = text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n")
        payloads = [data for data in map(_event_data, events) if data and data.strip() != "[DONE]"]
        # A relay that labels a plain JSON error as a stream still sent an error.
        return payloads or [text]
    return [text]


def _event_data(event: str) -> str:
    """One SSE event's data: its `data:` lines joined by newlines, per the SSE spec."""
    lines = event.split("\n")
    return "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))


def _read_text(text: str, evidence: _Evidence, depth: int) -> None:
    """Collect one string: the JSON it is, or the message it is plus any JSON it embeds."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        document = _loads(stripped)
        if document is not None:
            _walk(document, evidence, depth + 1)
            return
    if stripped:
        evidence.messages.append(stripped)
    # LiteLLM appends the provider's JSON to its own words: "...Error - {"type":"error",...}".
    brace = stripped.find("{", 1)
    if brace > 0:
        _walk(_loads_prefix(stripped, brace), evidence, depth + 1)


def _walk(value: object, evidence: _Evidence, depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _read_field(key, item, evidence, depth)
    elif isinstance(value, list):
        for item in value[:_MAX_ITEMS]:
            _walk(item, evidence, depth + 1)


def _read_field(key: str, value: object, evidence: _Evidence, depth: int) -> None:
    if key in _TEXT_KEYS and isinstance(value, str):
        _read_text(value, evidence, depth + 1)
    elif key in _CODE_KEYS and isinstance(value, str | int):
        evidence.codes.add(str(value).strip().lower())
    elif key in _COUNT_KEYS and type(value) is int:
        evidence.counts.setdefault(key, value)
    else:
        _walk(value, evidence, depth + 1)


def _loads(text: str) -> object:
    """`text` parsed as JSON, or None when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _loads_prefix(text: str, start: int) -> object:
    """The JSON value that begins at `start` (trailing words allowed), or None."""
    try:
        return _DECODER.raw_decode(text, start)[0]
    except (ValueError, RecursionError):
        return None


# --- Patterns: provider wording as data ---------------------------------------------------

# A stated count: "131072", "300,000". Bounded, so a hostile body cannot make int() refuse it.
_NUMBER = r"\d[\d,]{0,19}"


class _Captures(dict[str, str]):
    """Fills a template's `{name}`: `{n}` is a number to skip, any other name captures one."""

    def __missing__(self, key: str) -> str:
        return _NUMBER if key == "n" else f"(?P<{key}>{_NUMBER})"


# Capture names: `limit` the window, `out` the output reservation, `over` tokens over the
# window, `chars` the prompt in characters, `lb` marks a lower bound; the `p*` parts add up to
# the prompt tokens (OpenAI counts functions apart, OpenRouter text, tools and images).
_PROMPT_PARTS = ("p", "p_funcs", "p_tool", "p_image")


@dataclass(frozen=True, slots=True)
class _Pattern:
    """One row of a wording table: a named regex and what its match means."""

    name: str
    kind: Kind
    regex: re.Pattern[str]
    prompt_is_lower_bound: bool = False
    # Too generic to trust on a 5xx or a 404: only where providers report overflow.
    lenient_only: bool = False


def _row(
    name: str,
    kind: Kind,
    template: str,
    *,
    lower_bound: bool = False,
    lenient_only: bool = False,
) -> _Pattern:
    regex = re.compile(template.format_map(_Captures()))
    return _Pattern(name, kind, regex, lower_bound, lenient_only)


def _table(kind: Kind, templates: Mapping[str, str]) -> tuple[_Pattern, ...]:
    return tuple(_row(name, kind, template) for name, template in templates.items())


_PROMPT, _TOTAL, _UNSTATED = Kind.OVERFLOW_PROMPT, Kind.OVERFLOW_TOTAL, Kind.OVERFLOW

# R4, on normalised text. Order matters: a sentence that extends another comes first, and the
# generic anchors come last. A TOTAL row whose prompt alone is over the window reports
# OVERFLOW_PROMPT (see _refine).
_OVERFLOW_PATTERNS = (
    _row(
        "openai_messages_resulted",
        _PROMPT,
        r"maximum context length is {limit} tokens\. however, your messages resulted in {p} tokens",
    ),
    # OpenAI, Azure, DeepSeek and vLLM <= 0.9; "in your prompt; ... for the completion" is the
    # legacy completions wording.
    _row(
        "openai_requested_breakdown",
        _TOTAL,
        r"maximum context length is {limit} tokens[.,] however,? you requested {n} tokens "
        r"\({p} in (?:the messages|your prompt)[,;](?: {p_funcs} in the functions,)?(?: and)? "
        r"{out} (?:in|for) the completion\)",
    ),
    _row(
        "vllm_in_the_messages",
        _PROMPT,
        r"maximum context length is {limit} tokens\. however, you requested {p} tokens in the "
        r"messages",
    ),
    _row(
        "vllm_request_has_input",
        _PROMPT,
        r"maximum context length is {limit} tokens\. however, your request has {p} input tokens",
    ),
    _row(
        "vllm_max_tokens_too_large",
        _TOTAL,
        r"'max_tokens' or 'max_completion_tokens' is too large: {out}\. this model's maximum "
        r"context length is {limit} tokens and your request has {p} input tokens",
    ),
    # vLLM >= 0.16 tokenizes only up to the limit, so its count is limit - max_tokens + 1 at
    # most; text too long even for that is refused in characters, before tokenizing.
    _row(
        "vllm_you_passed_tokens",
        _TOTAL,
        r"you passed {p} input tokens and requested {out} output tokens\. however, the model's "
        r"context length is only {limit} tokens",
        lower_bound=True,
    ),
    _row(
        "vllm_you_passed_characters",
        _TOTAL,
        r"you passed {chars} input characters and requested {out} output tokens\. however, the "
        r"model's context length is only {limit} tokens",
    ),
    _row(
        "vllm_prompt_contains_tokens",
        _TOTAL,
        r"maximum context length is {limit} tokens\. however, you requested {out} output tokens "
        r"and your prompt contains (?P<lb>at least )?{p} input tokens",
    ),
    _row(
        "vllm_prompt_contains_characters",
        _TOTAL,
        r"maximum context length is {limit} tokens\. however, you requested {out} output tokens "
        r"and your prompt contains (?:at least )?{chars} characters",
    ),
    # OpenRouter's pre-flight check counts max_tokens (or the model's default) as output.
    _row(
        "openrouter_endpoint",
        _TOTAL,
        r"endpoint's maximum context length is {limit} tokens\. however, you requested about "
        r"{n} tokens \((?:{p} of text input)?(?:, )?(?:{p_tool} of tool input)?(?:, )?"
        r"(?:{p_image} of image input)?(?:, )?(?:{out} in the output)?\)",
    ),
    _row(
        "openai_gpt5_configured_limit",
        _PROMPT,
        r"input tokens exceed the configured limit of {limit} tokens\. your messages resulted in "
        r"{p} tokens",
    ),
    _row("anthropic_prompt_too_long", _PROMPT, r"prompt is too long: {p} tokens > {limit} maximum"),
    _row(
        "anthropic_input_plus_max_tokens",
        _TOTAL,
        r"input length and `?max_tokens`? exceed context limit: {p} \+ {out} > {limit}",
    ),
    _row(
        "gemini_input_token_count",
        _PROMPT,
        r"input token count \({p}\) exceeds the maximum number of tokens allowed \({limit}\)",
    ),
    _row(
        "xai_max_prompt_length",
        _PROMPT,
        r"maximum prompt length is {limit} but the request contains {p} tokens",
    ),
    _row(
        "mistral_too_large_for_model",
        _PROMPT,
        r"prompt contains {p} tokens(?: and {n} (?:draft tokens|images))?,? (?:which is )?"
        r"(?:is )?too large for model with {limit} maximum context length",
    ),
    _row(
        "sglang_together_input_longer",
        _PROMPT,
        r"the input \({p} tokens\) is longer than the model's context length \({limit} tokens\)",
    ),
    _row(
        "sglang_requested_total",
        _TOTAL,
        r"requested token count exceeds the model's maximum context length of {limit} tokens"
        r"(?:\. you requested a total of {n} tokens: {p} tokens from the input messages and "
        r"{out} tokens for the completion)?",
    ),
    _row(
        "together_input_plus_max_tokens",
        _TOTAL,
        r"input token count \+ max_tokens parameter must be less than the context length",
    ),
    _row(
        "fireworks_prompt_too_long",
        _PROMPT,
        r"the prompt is too long: {p}, model maximum context length: {limit}",
    ),
    # llama.cpp, and LocalAI relaying it inside a gRPC error on a 500.
    _row(
        "llamacpp_request_exceeds",
        _PROMPT,
        r"request \({p} tokens\) exceeds the available context size \({limit} tokens\)",
    ),
    _row(
        "llamacpp_larger_than_max_ctx",
        _PROMPT,
        r"input \({p} tokens\) is larger than the max context size \({limit} tokens\)",
    ),
    _row("llamacpp_exceeds_available", _UNSTATED, r"exceeds the available context size"),
    _row(
        "ollama_exceeded_by",
        _PROMPT,
        r"prompt too long; exceeded (?:max )?context length(?: by {over} tokens)?",
    ),
    # LM Studio names the tokens it tried to keep, so the prompt is at least that long.
    _row(
        "lmstudio_keep_first",
        _PROMPT,
        r"trying to keep the first {p} tokens when context the overflows\. however, the model "
        r"is loaded with context length of only {limit} tokens",
        lower_bound=True,
    ),
    _row(
        "lmstudio_tokens_to_keep",
        _UNSTATED,
        r"tokens to keep from the initial prompt is greater than the context length",
    ),
    _row(
        "tgi_inputs_plus_max_new",
        _TOTAL,
        r"`?inputs`? tokens \+ `?max_new_tokens`? must be <= {limit}\. given: {p} `?inputs`? "
        r"tokens and {out} `?max_new_tokens`?",
    ),
    _row(
        "tgi_inputs_less_than",
        _PROMPT,
        r"`?inputs`? must have less than {limit} tokens\. given: {p}",
    ),
    # Cohere's output cap starts with the same "too many tokens:", so these stay specific.
    _row(
        "cohere_size_limit",
        _PROMPT,
        r"too many tokens: size limit exceeded by {over} tokens"
        r"(?:.*?the limit for this model is {limit} tokens)?",
    ),
    _row(
        "cohere_total_prompt",
        _PROMPT,
        r"too many tokens: total number of tokens in the prompt cannot exceed {limit} - "
        r"received {p}",
    ),
    # Here the received count is prompt plus prediction, not the prompt.
    _row(
        "cohere_total_prediction",
        _TOTAL,
        r"too many tokens: total number of tokens \(prompt and prediction\) cannot exceed "
        r"{limit} - received {n}",
    ),
    _row(
        "copilot_prompt_token_count",
        _PROMPT,
        r"prompt token count of {p} exceeds the limit of {limit}",
    ),
    _row(
        "kimi_model_token_limit",
        _PROMPT,
        r"exceeded model token limit: {limit}(?: \(requested: {p}\))?",
    ),
    _row("bedrock_mantle", _PROMPT, r"prompt tokens \({p}\) exceed model maximum \({limit}\)"),
    _row("cerebras_current_length", _PROMPT, r"current length is {p} while limit is {limit}"),
    _row(
        "poolside_input_length",
        _PROMPT,
        r"input length {p} exceeds the maximum allowed input length of {limit} tokens",
    ),
    _row(
        "generic_input_length",
        _PROMPT,
        r"input length \({p}\) exceeds model's maximum context length \({limit}\)",
    ),
    _row(
        "generic_configured_context",
        _PROMPT,
        r"prompt has {p} tokens, but the configured context size is {limit} tokens",
    ),
    _row("dashscope_input_range", _UNSTATED, r"range of input length should be \[1, {limit}\]"),
    _row(
        "bedrock_input_too_long",
        _UNSTATED,
        r"input is too long for requested model|too many input tokens",
    ),
    _row("openai_exceeds_context_window", _UNSTATED, r"input exceeds the context window"),
    _row("minimax_context_window", _UNSTATED, r"context window exceeds limit"),
    _row("litellm_context_window_error", _UNSTATED, r"contextwindowexceedederror"),
    _row(
        "generic_max_context_length",
        _UNSTATED,
        r"maximum context length is {limit} tokens",
        lenient_only=True,
    ),
)

# R3. Groq sends its tokens-per-minute limit as a 413 and Bedrock throttles with "Too many
# tokens"; proxies re-status 429s as 400.
_RATE_LIMIT_PATTERNS = _table(
    Kind.RATE_LIMIT,
    {
        "rate_limit_words": r"rate[ _-]?limit|too many requests|throttl",
        "per_minute_limit": r"tokens per min|per minute|\btpm\b|\brpm\b",
        "wait_and_retry": r"please wait before trying again|try again in \d",
        "quota_exceeded": r"exceeded your current quota|quota exceeded",
    },
)

# R5. The client's max_tokens is above the model's output cap: a shorter history cannot help.
_OUTPUT_CAP_PATTERNS = _table(
    Kind.OUTPUT_CAP,
    {
        "anthropic_max_tokens": (
            r"max_tokens: {n} > {n}, which is the maximum allowed number of output tokens"
        ),
        "openai_max_tokens_too_large": (
            r"max_tokens is too large: {n}\. this model supports at most {n} completion tokens"
        ),
        "bedrock_maximum_tokens": r"maximum tokens you requested exceeds the model limit of {n}",
        "groq_max_tokens": r"max_tokens (?:for `[^`]+` )?must be less than or equal to {n}",
        "cohere_max_tokens": r"max tokens must be less than or equal to {n}, the maximum output",
        "tgi_max_new_tokens": r"`?max_new_tokens`? must be <= {n}\. given: {n}",
        "cannot_be_greater": (
            r"(?:max_tokens|max_completion_tokens|max_output_tokens)\s*=?\s*{n}\s*"
            r"cannot be greater than"
        ),
        "integer_above_maximum": r"integer above maximum value",
    },
)

# R6. Bytes or one field's length, not tokens: Anthropic's 32 MB cap, nginx, Vertex, and
# OpenAI's 10 MB string limit. Dropping images or huge tool output may help; summarising may not.
_PAYLOAD_PATTERNS = _table(
    Kind.PAYLOAD_TOO_LARGE,
    {
        "http_413_words": r"request entity too large|payload too large|request_too_large",
        "maximum_bytes": r"exceeds the maximum allowed number of bytes",
        "payload_size": r"request payload size exceeds|request exceeds the maximum size",
        "string_too_long": r"string too long\. expected a string with maximum length",
    },
)

# R7. llama.cpp ran out of room while decoding: the prompt fitted, so this is not overflow.
_EXHAUSTED_PATTERNS = _table(
    Kind.GENERATION_EXHAUSTED,
    {"llamacpp_context_size_exceeded": r"context size has been exceeded"},
)

# R8. Phrases too loose to trust on any status (see _LENIENT_STATUSES).
_LOOSE_PATTERNS = _table(
    Kind.OVERFLOW,
    {
        "loose_context_length": r"context[ _]length[ _]exceeded|maximum context length",
        "loose_context_window": (
            r"exceeds? the context window|context window (?:is )?(?:full|exceeded)"
        ),
        "loose_prompt_too_long": r"prompt is too long|prompt too long|input is too long",
        "loose_too_many_tokens": (
            r"too many tokens|token limit exceeded|exceeds the maximum number of tokens"
        ),
        "loose_reduce_length": r"reduce the length of the messages",
    },
)

_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure, Groq, Responses
        "exceed_context_size_error",  # llama.cpp
        "model_max_prompt_tokens_exceeded",  # GitHub Copilot
        "prompt_too_long",
        "40303",  # FastChat
    }
)
_RATE_LIMIT_CODES = frozenset(
    {
        "rate_limit_exceeded",
        "rate_limit_error",
        "insufficient_quota",
        "tokens",  # OpenAI's `type` for a tokens-per-minute limit
        "requests",
        "resource_exhausted",  # Gemini
        "throttlingexception",  # Bedrock
    }
)
_PAYLOAD_CODES = frozenset({"string_above_max_length", "request_too_large"})

# Where providers really report overflow: the usual 4xx, and a 200 carrying an error object
# (OpenRouter mid-generation, llama.cpp streams); None is an error frame with no status.
_LENIENT_STATUSES: frozenset[int | None] = frozenset({None, 200, 400, 413, 422})


# --- Rules, in order ----------------------------------------------------------------------


def _rate_limit_status(evidence: _Evidence) -> Verdict | None:
    # R1. OpenAI's "Request too large ... tokens per min" and Bedrock's "Too many tokens" read
    # like overflow, but a 429 is a rate limit whatever it says.
    return Verdict(Kind.RATE_LIMIT, rule="status_429") if evidence.status == 429 else None


def _overflow_code(evidence: _Evidence) -> Verdict | None:
    # R2. A machine code settles it on any status (LocalAI and old llama.cpp answer 500); the
    # sentences only add their numbers.
    code = _first_code(evidence, _OVERFLOW_CODES)
    if code is None:
        return None
    found = _search(_OVERFLOW_PATTERNS, evidence.text, lenient=True)
    rule = f"code:{code}" if found is None else f"code:{code}+{found[0].name}"
    return _overflow_verdict(evidence, rule, found)


def _rate_limit_signal(evidence: _Evidence) -> Verdict | None:
    return _signal(evidence, _RATE_LIMIT_CODES, _RATE_LIMIT_PATTERNS)


def _stated_overflow(evidence: _Evidence) -> Verdict | None:
    # R4. Provider sentences are specific enough for any status: LocalAI's 500, a local
    # backend's 404, llama.cpp's old 200 stream.
    lenient = evidence.status in _LENIENT_STATUSES
    found = _search(_OVERFLOW_PATTERNS, evidence.text, lenient=lenient)
    return None if found is None else _overflow_verdict(evidence, found[0].name, found)


def _output_cap(evidence: _Evidence) -> Verdict | None:
    return _signal(evidence, frozenset(), _OUTPUT_CAP_PATTERNS)


def _payload_signal(evidence: _Evidence) -> Verdict | None:
    return _signal(evidence, _PAYLOAD_CODES, _PAYLOAD_PATTERNS)


def _generation_exhausted(evidence: _Evidence) -> Verdict | None:
    return _signal(evidence, frozenset(), _EXHAUSTED_PATTERNS)


def _loose_overflow(evidence: _Evidence) -> Verdict | None:
    # R8. "Too many tokens" on a 500 or a 503 is as likely a throttle or a crash as overflow.
    if evidence.status not in _LENIENT_STATUSES:
        return None
    found = _search(_LOOSE_PATTERNS, evidence.text)
    return None if found is None else _overflow_verdict(evidence, found[0].name, None)


def _payload_status(evidence: _Evidence) -> Verdict | None:
    # R9. A 413 that names no token limit is what its status says: nginx's HTML page, an empty
    # body from a gateway.
    return Verdict(Kind.PAYLOAD_TOO_LARGE, rule="status_413") if evidence.status == 413 else None


_RULES: tuple[Callable[[_Evidence], Verdict | None], ...] = (
    _rate_limit_status,
    _overflow_code,
    _rate_limit_signal,
    _stated_overflow,
    _output_cap,
    _payload_signal,
    _generation_exhausted,
    _loose_overflow,
    _payload_status,
)


def _first_code(evidence: _Evidence, codes: frozenset[str]) -> str | None:
    found = evidence.codes & codes
    return min(found) if found else None


def _search(
    patterns: tuple[_Pattern, ...], text: str, *, lenient: bool = True
) -> tuple[_Pattern, re.Match[str]] | None:
    """The first pattern that matches `text`, with its match."""
    for pattern in patterns:
        if pattern.lenient_only and not lenient:
            continue
        match = pattern.regex.search(text)
        if match is not None:
            return pattern, match
    return None


def _signal(
    evidence: _Evidence, codes: frozenset[str], patterns: tuple[_Pattern, ...]
) -> Verdict | None:
    """A verdict of the patterns' kind when a code or a pattern says so."""
    code = _first_code(evidence, codes)
    if code is not None:
        return Verdict(patterns[0].kind, rule=f"code:{code}")
    found = _search(patterns, evidence.text)
    return None if found is None else Verdict(found[0].kind, rule=found[0].name)


def _overflow_verdict(
    evidence: _Evidence, rule: str, found: tuple[_Pattern, re.Match[str]] | None
) -> Verdict:
    """An overflow verdict with the numbers the sentence (or llama.cpp's fields) states."""
    kind, numbers, lower_bound = _stated(found)
    parts = [numbers[name] for name in _PROMPT_PARTS if name in numbers]
    prompt = sum(parts) if parts else evidence.counts.get("n_prompt_tokens")
    limit = numbers.get("limit", evidence.counts.get("n_ctx"))
    return Verdict(
        _refine(kind, prompt, limit),
        prompt_tokens=prompt,
        limit=limit,
        requested_output=numbers.get("out"),
        over_by=numbers.get("over"),
        prompt_chars=numbers.get("chars"),
        prompt_is_lower_bound=lower_bound and bool(parts),
        rule=rule,
    )


def _stated(found: tuple[_Pattern, re.Match[str]] | None) -> tuple[Kind, dict[str, int], bool]:
    """The sentence's kind, its numbers by capture name, and whether the prompt is a bound."""
    if found is None:
        return Kind.OVERFLOW, {}, False
    pattern, match = found
    captured = {name: value for name, value in match.groupdict().items() if value is not None}
    numbers = {
        name: int(value.replace(",", "")) for name, value in captured.items() if name != "lb"
    }
    return pattern.kind, numbers, pattern.prompt_is_lower_bound or "lb" in captured


def _refine(kind: Kind, prompt: int | None, limit: int | None) -> Kind:
    # Whatever else the provider counted, a prompt at or over the window is a prompt overflow:
    # TGI reports inputs + max_new_tokens even when the inputs alone are too long, and
    # llama.cpp's bare sentence comes with its counts as fields.
    if prompt is not None and limit is not None and prompt >= limit:
        return Kind.OVERFLOW_PROMPT
    return kind
