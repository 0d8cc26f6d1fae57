"""The mock's `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages
API, over the mock's options.

One `MockUpstream` serves every API alike: the same queue of `Reply`s, `default`, agent,
recaller, summarizer, window, `token_factor` and counters. What is particular to the Messages
API lives here and in the `messages_*` modules:

- any query (Claude Code's `?beta=true`) and any `anthropic-beta` are accepted;
- with `strict`, the request is checked as the API checks it (messages_strictness.py:
  credentials and `anthropic-version`, the first role, four breakpoints at most, tool pairing,
  thinking signatures); with `roles_alternate`, same-role messages in a row are refused too;
- the prompt is metered from the blocks themselves (messages_meter.py) and must fit the
  window: else the API's 400 `prompt is too long: N tokens > M maximum`, streamed or not
  (before any event; the output reserved by `max_tokens` is not counted, as on current
  models);
- the answer is the queued reply, the recaller's, `default`, the summarizer's for the proxy's
  summary request, or the agent's move, all read from a chat view of the request
  (messages_view.py; summary requests are counted in `summary_requests` and `summary_usage`,
  not in `prompt_tokens`); when the request enables `thinking` (or makes it adaptive), the
  message opens with a signed thinking block (messages_thinking.py);
- `usage` splits the prompt by Anthropic's prompt cache (messages_cache.py): `input_tokens`,
  `cache_read_input_tokens` (also appended to `cached_tokens`) and
  `cache_creation_input_tokens`; `prompt_tokens` gets their sum;
- the message goes whole, or as the Messages event stream (messages_stream.py), paced by the
  reply's `chunk_delay_s`, held after its first delta by `hold`, never ending with `endless`,
  failing with an `error` event after its first delta with `stream_error`;
- `count_tokens` answers `{"input_tokens": N}` with the same count, after the same checks but
  not the window; with `messages_count_tokens` off it is a 404, as from a provider without it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy.mock_upstream import messages_errors as errors
from proxy.mock_upstream.completions import Usage
from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.messages_cache import BreakpointCache
from proxy.mock_upstream.messages_meter import MessagesMeter, cumulative
from proxy.mock_upstream.messages_output import MessagesUsage, content_blocks, message_object
from proxy.mock_upstream.messages_request import messages, thinking_mode, turns
from proxy.mock_upstream.messages_stream import events, sse
from proxy.mock_upstream.messages_strictness import (
    check_breakpoints,
    check_headers,
    check_roles,
    check_thinking,
    check_tool_pairs,
)
from proxy.mock_upstream.messages_thinking import thinking_text
from proxy.mock_upstream.messages_view import chat_view
from proxy.mock_upstream.meter import Meter
from proxy.mock_upstream.script import JSON, Recorded, Reply
from proxy.mock_upstream.summarizer import is_summary_request

if TYPE_CHECKING:
    from proxy.mock_upstream.app import MockUpstream

ENDLESS_DELAY_S: Final = 0.05
"""Seconds between the events of an endless stream that sets no `chunk_delay_s`."""
SCRIPTED_ERROR: Final = {"type": "error", "error": {"type": "api_error", "message": "mock error"}}


class MessagesApi:
    """The Messages endpoints of one mock: its prompt cache, and its answers."""

    def __init__(self) -> None:
        self.cache = BreakpointCache()
        self._numbers = itertools.count(1)

    async def answer(
        self, host: MockUpstream, recorded: Recorded, meter: Meter, number: int
    ) -> Response:
        """The mock's answer to one `POST /v1/messages`; `number` names its request id."""
        headers = _headers(number)
        body = _body(recorded)
        counting = MessagesMeter(meter)
        try:
            self._check(host, recorded, body)
            prompt = counting.prompt(body)
            if host.window is not None and prompt > host.window:
                host.overflows += 1
                raise errors.prompt_too_long(prompt, host.window)
        except Rejected as rejected:
            return _refused(rejected, headers)
        view = chat_view(body)
        summary = is_summary_request(view)
        if summary:
            host.summary_requests.append(recorded)
            await asyncio.sleep(host.summary_latency_s)
        reply = host._reply_for(view, summary, meter)
        headers.update(reply.headers)
        if reply.status >= 400:
            return JSONResponse(reply.error or SCRIPTED_ERROR, reply.status, headers=headers)
        thinking = thinking_mode(body) is not None
        usage = self._usage(host, body, counting, prompt, reply, thinking=thinking)
        _bill(host, usage, summary=summary)
        content = content_blocks(reply, thinking=thinking)
        message = message_object(body, f"msg_mock_{next(self._numbers)}", content, usage)
        if body.get("stream") is True:
            stream = self._stream(host, message, reply)
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        return JSONResponse(message, headers=headers)

    async def count_tokens(
        self, host: MockUpstream, recorded: Recorded, meter: Meter, number: int
    ) -> Response:
        """`POST /v1/messages/count_tokens`: the prompt's count, or a 404 when switched off."""
        headers = _headers(number)
        body = _body(recorded)
        try:
            if not host.messages_count_tokens:
                raise errors.not_found()
            self._check(host, recorded, body)
        except Rejected as rejected:
            return _refused(rejected, headers)
        return JSONResponse({"input_tokens": MessagesMeter(meter).prompt(body)}, headers=headers)

    def _check(self, host: MockUpstream, recorded: Recorded, body: Mapping[str, Any]) -> None:
        """The structure checks `strict` and `roles_alternate` ask for."""
        if not (host.strict or host.roles_alternate):
            return
        listed = messages(body)
        try:
            if host.strict:
                check_headers(recorded)
            check_roles(listed, alternate=host.roles_alternate)
            if host.strict:
                check_breakpoints(body, listed)
                merged = turns(listed)
                check_tool_pairs(merged)
                check_thinking(body, merged)
        except Rejected:
            host.strict_rejections += 1
            raise

    def _usage(
        self,
        host: MockUpstream,
        body: Mapping[str, Any],
        counting: MessagesMeter,
        prompt: int,
        reply: Reply,
        *,
        thinking: bool,
    ) -> MessagesUsage:
        """What the answer bills; its prompt's breakpoints read and write the cache."""
        meter = counting.meter
        rendered = counting.render(body)
        keys = [piece.key for piece in rendered.pieces]
        sums = cumulative(rendered.pieces, meter)
        use = self.cache.account(keys, sums, rendered.breakpoints, host.cache_min_tokens)
        read = min(use.read, prompt)
        created = min(use.created, prompt - read)
        output = meter.completion(reply)
        if thinking:
            output += meter.scale(meter.counter.text(thinking_text(reply)))
        return MessagesUsage(prompt - read - created, read, created, output)

    async def _stream(
        self, host: MockUpstream, message: JSON, reply: Reply
    ) -> AsyncIterator[bytes]:
        """The events of `message`, paced and held as `reply` says (as chat's stream is)."""
        delay = reply.chunk_delay_s or (ENDLESS_DELAY_S if reply.endless else 0.0)
        hold = reply.hold
        finished = False
        try:
            stream = events(message, endless=reply.endless, stream_error=reply.stream_error)
            for index, event in enumerate(stream):
                if index and delay:
                    await asyncio.sleep(delay)
                yield sse(event)
                if hold is not None and event["type"] == "content_block_delta":
                    # Paused after the first delta until the test lets it go on.
                    await hold.wait()
                    hold = None
            finished = True
        finally:
            if not finished:
                host.streams_abandoned += 1


def _body(recorded: Recorded) -> JSON:
    body = recorded.json()
    return body if isinstance(body, dict) else {}


def _bill(host: MockUpstream, usage: MessagesUsage, *, summary: bool) -> None:
    """Record what an answered request billed (a summary request's apart, as chat's)."""
    if summary:
        host.summary_usage.append(
            Usage(usage.prompt, usage.output_tokens, usage.cache_read_input_tokens)
        )
    else:
        host.prompt_tokens.append(usage.prompt)
        host.cached_tokens.append(usage.cache_read_input_tokens)


def _refused(rejected: Rejected, headers: dict[str, str]) -> Response:
    """A refusal with the request id next to the error, as Anthropic sends it."""
    body = {**rejected.body, "request_id": headers["request-id"]}
    return JSONResponse(body, status_code=rejected.status, headers=headers)


def _headers(number: int) -> dict[str, str]:
    return {
        "request-id": f"req_mock_{number}",
        "anthropic-ratelimit-requests-remaining": "9999",
        "anthropic-ratelimit-tokens-remaining": "999999",
    }
