"""The summary brain: the LLM that writes summaries, behind the same upstream client.

By default it is the upstream the request goes to, with the request's model and the client's
own credentials (the client pays for its summaries, as it would inside an agent framework).
`context.summary_brain` points it elsewhere: a cheaper model, another server, its own key.

A span too long for the summarizer's own window is summarized in parts, each part folding
in the summary of the parts before it. Any failure (unreachable, time-out, an error status,
no text) raises `SummaryFailedError`; the service then truncates instead, so the user's
request never fails because of the summarizer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.adapters.upstream import Upstream, UpstreamRequest, fetched
from proxy.core.headers import Headers
from proxy.core.messages import Message
from proxy.core.summary import completion_text, split_span
from proxy.errors import UpstreamError


class Summarizable(Protocol):
    """A span to summarize (`NeedsSummary`, `SummaryTask`): its messages, the summary it
    folds in, and the request for each part."""

    @property
    def span(self) -> tuple[Message, ...]: ...

    @property
    def previous(self) -> str | None: ...

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]: ...


class SummaryFailedError(Exception):
    """The summarizer gave no usable summary; the message says why."""


@dataclass(frozen=True, slots=True)
class SummaryResult:
    text: str
    model: str | None
    tokens: int
    """What the summarizer reported using (prompt and completion), for the history."""


class Summarizer:
    """Sends summary requests to the summary brain's upstream."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        model: str | None = None,
        api_key: str | None = None,
        window: int | None = None,
    ) -> None:
        self._upstream = upstream
        self._model = model
        self._api_key = api_key
        self._window = window

    async def summarize(
        self,
        need: Summarizable,
        *,
        credentials: Headers,
        count: Callable[[Message], int],
        window: int,
    ) -> SummaryResult:
        """The summary of `need.span`, in parts if the summarizer's window requires it.

        `credentials` are the client's auth headers, used unless the brain has its own key;
        `window` is the summarizer model's window when the brain does not configure one.
        """
        limit = _part_limit(need, count, self._window or window)
        parts = split_span(need.span, max_tokens=limit, count=count)
        summary, model, tokens = need.previous, None, 0
        for part in parts:
            body = need.request_for(part, summary)
            if self._model:
                body["model"] = self._model
            summary, model, used = await self._one(body, credentials)
            tokens += used
        if summary is None:
            raise SummaryFailedError("nothing to summarize")
        return SummaryResult(summary, model, tokens)

    async def _one(
        self, body: dict[str, object], credentials: Headers
    ) -> tuple[str, str | None, int]:
        headers: Headers = [("content-type", "application/json")]
        if self._api_key:
            headers.append(("authorization", f"Bearer {self._api_key}"))
        else:
            headers += credentials
        request = UpstreamRequest(
            "POST", "chat/completions", "", headers, json.dumps(body).encode()
        )
        try:
            response, raw = await fetched(self._upstream, request)
        except UpstreamError as exc:
            raise SummaryFailedError(exc.message) from exc
        if response.status != 200:
            raise SummaryFailedError(f"the summarizer answered {response.status}: {raw[:200]!r}")
        return _parse(raw)


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


def _parse(raw: bytes) -> tuple[str, str | None, int]:
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryFailedError("the summarizer's answer is not JSON") from exc
    if not isinstance(payload, dict):
        raise SummaryFailedError("the summarizer's answer is not a completion")
    text = completion_text(payload)
    if text is None:
        raise SummaryFailedError("the summarizer's answer has no text")
    usage = payload.get("usage")
    tokens = usage.get("total_tokens", 0) if isinstance(usage, dict) else 0
    model = payload.get("model")
    return text, model if isinstance(model, str) else None, tokens if isinstance(tokens, int) else 0
