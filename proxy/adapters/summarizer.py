"""The summary brain: the LLM that writes summaries, behind the same upstream client.

By default it is the upstream the request goes to, with the request's model and the client's
own credentials (the client pays for its summaries, as it would inside an agent framework).
`context.summary_brain` points it elsewhere: a cheaper model, another server, its own key.

The brain that is the conversation's own model and upstream is asked in the prefix form:
the conversation as it was forwarded, which the provider has cached, then one instruction,
in the API the conversation was forwarded by: a chat completion
(`proxy.core.summary.prefix_request`), or for a conversation that came over the Responses
API a `POST responses` whose items are the ones forwarded, reasoning and its
`encrypted_content` included (`proxy.core.summary.responses_prefix_request`): the provider
cached those as items, which a chat request would not match. It is asked when it costs less
than the span alone as a transcript, at the provider's price of a cached input token
(`cached_price`, a share of an uncached one): the prefix holds the instructions, the tools
and the task too, often several times the span. When that form does not fit the window, or
the upstream refuses it (a 4xx: a strict chat template, an overflow), the transcript form is
sent instead. A brain of its own always gets the transcript form: it cached nothing of the
conversation. The transcript form is a chat completion, except for a conversation that came
over the Messages API to a brain on its own upstream: a provider that speaks the Messages
API may speak nothing else, so both forms go to it as Messages requests
(`proxy.core.anthropic_summary`), its key in `x-api-key`. A span too long for the
summarizer's own window is summarized in parts, each part folding in the summary of the
parts before it.

Any failure (unreachable, time-out, an error status, no text) raises `SummaryFailedError`;
the service then truncates instead, so the user's request never fails because of the
summarizer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from proxy.adapters.upstream import Upstream, UpstreamRequest, fetched
from proxy.core.anthropic_summary import messages_prefix_request, messages_transcript_request
from proxy.core.anthropic_usage import prompt_tokens
from proxy.core.headers import Headers
from proxy.core.messages import Message
from proxy.core.request import Api
from proxy.core.summary import (
    DEFAULT_CACHED_PRICE,
    Prefix,
    completion_text,
    prefix_closing,
    prefix_request,
    responses_prefix_request,
    split_span,
)
from proxy.errors import UpstreamError

logger = logging.getLogger("proxy.compaction")

# Statuses that refuse any request, whatever its form (a wrong key, a rate limit): the
# transcript form would meet them too, so they are no reason to send it.
_NOT_THE_FORM = frozenset({401, 403, 429})


class Summarizable(Protocol):
    """A span to summarize (`NeedsSummary`, `SummaryTask`): its messages, the summary it
    folds in, the request for each part, and the conversation's forwarded prefix."""

    @property
    def span(self) -> tuple[Message, ...]: ...

    @property
    def previous(self) -> str | None: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def prefix(self) -> Prefix | None: ...

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]: ...


class SummaryFailedError(Exception):
    """The summarizer gave no usable summary; the message says why."""


class SummaryRefusedError(SummaryFailedError):
    """The summarizer refused the request as sent (a 4xx about the request itself)."""


@dataclass(frozen=True, slots=True)
class SummaryResult:
    text: str
    model: str | None
    tokens: int
    """What the summarizer reported using (prompt and completion), for the history."""
    input_tokens: int = 0
    """The prompt tokens it reported (`usage.prompt_tokens`, the Responses API's
    `usage.input_tokens`), every part's together."""
    cached_tokens: int = 0
    """Of those, the ones its prompt cache served (`prompt_tokens_details.cached_tokens`,
    the Responses API's `input_tokens_details.cached_tokens`)."""
    form: str = "transcript"
    """How the span was sent: "prefix" (the conversation, then one instruction) or
    "transcript"."""
    refused: bool = False
    """Whether the prefix form was refused first (the transcript form answered instead)."""

    def plus(self, other: SummaryResult) -> SummaryResult:
        """`other` (a later part's summary) with this one's usage added to its own."""
        return replace(
            other,
            tokens=self.tokens + other.tokens,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class Summarizer:
    """Sends summary requests to the summary brain's upstream."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        model: str | None = None,
        api_key: str | None = None,
        window: int | None = None,
        own_upstream: bool = False,
        cached_price: float = DEFAULT_CACHED_PRICE,
    ) -> None:
        self._upstream = upstream
        self._model = model
        self._api_key = api_key
        self._window = window
        self._cached_price = cached_price
        self._own_upstream = own_upstream
        # The conversation's own model on its own upstream: the provider's cache there holds
        # the conversation, so the prefix form reads it from the cache.
        self._shares_cache = model is None and not own_upstream

    async def summarize(
        self,
        need: Summarizable,
        *,
        credentials: Headers,
        count: Callable[[Message], int],
        window: int,
        api: Api = Api.CHAT,
        calibration: float = 1.0,
    ) -> SummaryResult:
        """The summary of `need.span`: in the prefix form when the brain shares the
        conversation's cache and it fits, else in the transcript form, in parts if the
        summarizer's window requires it.

        `credentials` are the client's auth headers, used unless the brain has its own key;
        `window` is the summarizer model's window when the brain does not configure one;
        `api` is the API the conversation was forwarded by, which the prefix form is sent by
        (the provider cached a Responses API conversation as items, which a chat request
        would not match). `calibration` is the conversation's: provider tokens per token of
        `count`, by which `window` (the conversation model's) is read in our count.
        """
        # An uncalibrated approximate count errs high (Claude's by half): compared with the
        # window as it was, it ruled the prefix form out of every 16k Messages conversation.
        window = self._window or int(window / calibration)
        prefix = need.prefix if self._shares_cache else None
        refused = False
        if prefix is not None:
            # The closing message, as both forms send it (a chat message, a message item).
            text = prefix_closing(prefix, previous=need.previous, max_tokens=need.max_tokens)
            closing = count({"role": "user", "content": text})
            fits = _fits(prefix, closing, need.max_tokens, window)
            if fits and self._cheaper(prefix, closing, need, count):
                form = _PREFIX_FORMS.get(api, prefix_request)
                body = form(prefix, previous=need.previous, max_tokens=need.max_tokens)
                try:
                    return replace(await self._one(body, credentials, api), form="prefix")
                except SummaryRefusedError as exc:
                    logger.info("the conversation's prefix was refused for a summary: %s", exc)
                    refused = True
        # A Messages conversation's own upstream may speak nothing but the Messages API.
        transcript = Api.MESSAGES if api is Api.MESSAGES and not self._own_upstream else Api.CHAT
        result = await self._in_parts(need, credentials, count, window, transcript)
        return replace(result, refused=refused)

    def _cheaper(
        self,
        prefix: Prefix,
        closing: int,
        need: Summarizable,
        count: Callable[[Message], int],
    ) -> bool:
        """Whether the prefix form (`prefix`, then its closing message of `closing` tokens),
        its prefix read from the provider's cache at `cached_price`, costs less input than
        the transcript form, uncached: its instructions, the span and the summary it folds
        in (both forms' instructions counted, as the closing message holds the prefix's)."""
        request = need.request_for(need.span, need.previous)
        transcript = sum(count(message) for message in request["messages"])
        return prefix.tokens * self._cached_price + closing < transcript

    async def _in_parts(
        self,
        need: Summarizable,
        credentials: Headers,
        count: Callable[[Message], int],
        window: int,
        api: Api = Api.CHAT,
        calibration: float = 1.0,
    ) -> SummaryResult:
        """The transcript form: the span in parts that fit `window`, each folding in the
        summary of the parts before it, sent by `api` (chat, or the Messages API)."""
        limit = _part_limit(need, count, window)
        parts = split_span(need.span, max_tokens=limit, count=count)
        summary, result = need.previous, SummaryResult(need.previous or "", None, 0)
        for part in parts:
            body = need.request_for(part, summary)
            if self._model:
                body["model"] = self._model
            if api is Api.MESSAGES:
                body = messages_transcript_request(body)
            answer = await self._one(body, credentials, api)
            result, summary = result.plus(answer), answer.text
        if summary is None:
            raise SummaryFailedError("nothing to summarize")
        return result

    async def _one(
        self, body: dict[str, Any], credentials: Headers, api: Api = Api.CHAT
    ) -> SummaryResult:
        """The answer to one summary request `body`, sent by `api`."""
        headers: Headers = [("content-type", "application/json")]
        messages = api is Api.MESSAGES
        if self._api_key:
            key = ("x-api-key", self._api_key) if messages else None
            headers.append(key or ("authorization", f"Bearer {self._api_key}"))
            headers += [(k, v) for k, v in credentials if k.lower().startswith("anthropic-")]
        else:
            headers += credentials
        if messages and not any(k.lower() == "anthropic-version" for k, _ in headers):
            headers.append(("anthropic-version", ANTHROPIC_VERSION))
        path = _PATHS[api]
        request = UpstreamRequest("POST", path, "", headers, json.dumps(body).encode())
        try:
            response, raw = await fetched(self._upstream, request)
        except UpstreamError as exc:
            raise SummaryFailedError(exc.message) from exc
        if response.status != 200:
            refused = 400 <= response.status < 500 and response.status not in _NOT_THE_FORM
            error = SummaryRefusedError if refused else SummaryFailedError
            raise error(f"the summarizer answered {response.status}: {raw[:200]!r}")
        return _parse(raw, api)


def _fits(prefix: Prefix, closing: int, max_tokens: int, window: int) -> bool:
    """Whether a summary request in the prefix form (`prefix`, a closing message of
    `closing` tokens, a reply of `max_tokens`) fits `window`, a tenth kept back for a
    provider that counts more than we do (a request over the window would be refused, then
    sent again)."""
    return prefix.tokens + closing + max_tokens <= window * 9 // 10


def _part_limit(need: Summarizable, count: Callable[[Message], int], window: int) -> int:
    """The most span tokens one summary request can carry in `window`.

    Each request holds the instructions, the summary so far (the previous one for the first
    part, the summary of the parts before it for later ones, which can grow to a reply's
    length) and room for the reply; the rest is the transcript's. A tenth is kept back
    because the transcript renders messages in a few more words than they count. The floor
    keeps a tiny window from cutting the span into one-message parts: such a request may
    overflow, and an overflow falls back to truncation like any failed summary.
    """
    empty = need.request_for([], need.previous)
    fixed = sum(count(message) for message in empty["messages"])
    reply = int(empty.get("max_tokens") or 0)
    room = window - fixed - 2 * reply
    return max(room * 9 // 10, window // 8, 1)


ANTHROPIC_VERSION = "2023-06-01"
"""Sent with a Messages summary request when the client's own request named none."""
_PATHS = {Api.CHAT: "chat/completions", Api.RESPONSES: "responses", Api.MESSAGES: "messages"}
_PREFIX_FORMS = {Api.RESPONSES: responses_prefix_request, Api.MESSAGES: messages_prefix_request}

# Where each API's answer states its prompt tokens and the cached share of them.
_INPUT = {Api.CHAT: "prompt_tokens", Api.RESPONSES: "input_tokens"}
_INPUT_DETAILS = {Api.CHAT: "prompt_tokens_details", Api.RESPONSES: "input_tokens_details"}


def _parse(raw: bytes, api: Api = Api.CHAT) -> SummaryResult:
    """The summary in a chat completion, or in a Responses API response (`api`)."""
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryFailedError("the summarizer's answer is not JSON") from exc
    if not isinstance(payload, dict):
        raise SummaryFailedError("the summarizer's answer is not a completion")
    if api is Api.MESSAGES:
        return _parse_message(payload)
    text = _response_text(payload) if api is Api.RESPONSES else completion_text(payload)
    if text is None:
        raise SummaryFailedError("the summarizer's answer has no text")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get(_INPUT_DETAILS[api])
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    model = payload.get("model")
    return SummaryResult(
        text,
        model if isinstance(model, str) else None,
        _count(usage.get("total_tokens")),
        input_tokens=_count(usage.get(_INPUT[api])),
        cached_tokens=_count(cached),
    )


def _parse_message(message: dict[str, Any]) -> SummaryResult:
    """The summary in a Messages API response: its text blocks (thinking is no text); its
    prompt is the uncached input plus the cache's reads and writes, of which the reads are
    the cached share."""
    content = message.get("content")
    text = "".join(
        block["text"]
        for block in (content if isinstance(content, list) else ())
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )
    if not text.strip():
        raise SummaryFailedError("the summarizer's answer has no text")
    usage = message.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt = prompt_tokens(usage) or 0
    model = message.get("model")
    return SummaryResult(
        text,
        model if isinstance(model, str) else None,
        prompt + _count(usage.get("output_tokens")),
        input_tokens=prompt,
        cached_tokens=_count(usage.get("cache_read_input_tokens")),
    )


def _response_text(response: dict[str, Any]) -> str | None:
    """The text of a Responses API response: its `message` output items' `output_text`
    parts (a reasoning item, a refusal or a call is no text), if it has any."""
    output = response.get("output")
    messages = [
        "".join(
            part["text"]
            for part in item.get("content") or ()
            if isinstance(part, dict)
            and part.get("type") == "output_text"
            and isinstance(part.get("text"), str)
        )
        for item in (output if isinstance(output, list) else ())
        if isinstance(item, dict) and item.get("type") == "message"
    ]
    text = "\n\n".join(message for message in messages if message)
    return text if text.strip() else None


def _count(value: object) -> int:
    """A token count from `usage`, 0 when it is missing or not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
