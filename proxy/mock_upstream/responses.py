"""The mock's `POST /v1/responses`: OpenAI's Responses API, strictly, over the mock's options.

One `MockUpstream` serves chat and responses alike: the same queue of `Reply`s, `default`,
agent, window, `token_factor`, strictness, prompt cache and counters. What is particular to
the Responses API lives here and in the `responses_*` modules:

- `input` (a string or items) is resolved against `previous_response_id`: the stored
  response's input and output come first (not its `instructions`: OpenAI does not carry
  them over). Responses are stored unless `store` is false; an unknown id is OpenAI's
  `previous_response_not_found` 400;
- with `strict`, the call pairs and reasoning items are checked (responses_strictness.py);
- the prompt is metered from the items themselves (responses_meter.py), not from the
  proxy's chat translation, and must fit the window with `max_output_tokens`; an overflow is
  OpenAI's 400, or with `responses_overflow_in_stream` a stream that fails;
- the answer is the queued reply, the recaller's move for a question turn (with `recaller`;
  recaller.py), `default`, the summarizer's summary for the proxy's summary request in the
  prefix form (`proxy.core.summary.responses_prefix_request`, read from a chat view of the
  items as chat's is; counted in `summary_requests` and `summary_usage`, not in
  `prompt_tokens`), or the agent's move read from that view (the recaller reads it too: a
  round's `function_call` items are one assistant message there, each output a `tool`
  message; the calls either makes become `function_call` items); with
  `responses_reasoning` and `include: ["reasoning.encrypted_content"]`, a reasoning item
  comes first (responses_output.py);
- the response goes whole, or as the Responses event stream (responses_stream.py), paced
  by the reply's `chunk_delay_s`, held after its first delta (of any kind: a reasoning
  summary's comes first) by `hold`, and never ending with `endless`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy.mock_upstream.completions import Usage
from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.meter import Meter
from proxy.mock_upstream.responses_compaction import (
    check_compaction_items,
    compacted,
    compaction_item,
    not_found,
    trigger_at_end,
)
from proxy.mock_upstream.responses_items import chat_view, input_items
from proxy.mock_upstream.responses_meter import ENCRYPTED_CHARS_PER_TOKEN, ResponsesMeter
from proxy.mock_upstream.responses_output import (
    ResponsesUsage,
    output_items,
    reasoning_text,
    response_object,
)
from proxy.mock_upstream.responses_stream import events, failed_events, sse
from proxy.mock_upstream.responses_strictness import (
    OVERFLOW_MESSAGE,
    ReasoningLedger,
    check_call_pairs,
    context_length_exceeded,
    previous_response_not_found,
)
from proxy.mock_upstream.script import JSON, Recorded, Reply
from proxy.mock_upstream.summarizer import is_summary_request

if TYPE_CHECKING:
    from proxy.mock_upstream.app import MockUpstream

ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
ENDLESS_DELAY_S: Final = 0.05
"""Seconds between the events of an endless stream that sets no `chunk_delay_s`."""


class ResponsesApi:
    """The Responses endpoint of one mock: what it remembers, and its answer to a request."""

    def __init__(self) -> None:
        self.stored: dict[str, list[JSON]] = {}
        """Stored responses by id: their resolved input, then their output."""
        self.reasoning = ReasoningLedger()
        self.compactions: set[str] = set()
        """The `encrypted_content` of every compaction item made (with `native_compaction`)."""
        self._numbers = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_mock_{next(self._numbers)}"

    async def answer(
        self, host: MockUpstream, recorded: Recorded, meter: Meter, headers: dict[str, str]
    ) -> Response:
        """The mock's response to one `recorded` request, with the provider's `headers`."""
        body = recorded.json()
        counting = ResponsesMeter(meter)
        try:
            items = self._resolve(body)
            check_compaction_items(items, native=host.native_compaction, made=self.compactions)
            prompt = self._admit(host, body, items, counting)
        except Rejected as rejected:
            return self._refuse(host, body, rejected, headers)
        if trigger_at_end(items):
            return self._compacted_in_band(host, body, items, prompt, headers)
        view = chat_view(body, items)
        summary = is_summary_request(view)
        if summary:
            host.summary_requests.append(recorded)
            await asyncio.sleep(host.summary_latency_s)
        reply = host._reply_for(view, summary, meter)
        headers.update(reply.headers)
        if reply.status >= 400:
            error = reply.error or {"error": {"message": "mock error", "type": "server_error"}}
            return JSONResponse(error, status_code=reply.status, headers=headers)
        reasoning = host.responses_reasoning and _wants_encrypted_reasoning(body)
        output = output_items(reply, self.new_id, reasoning=reasoning)
        cached = host._cached(counting.pieces(body, items), prompt, meter)
        usage = _usage(prompt, cached, reply, output, meter)
        self._bill(host, usage, summary=summary)
        response = response_object(body, self.new_id("resp"), output, usage)
        stored = body.get("store") is not False
        self.reasoning.remember(output, stored=stored)
        if stored:
            self.stored[response["id"]] = [*items, *output]
        if body.get("stream") is True:
            stream = self._stream(host, response, reply)
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        return JSONResponse(response, headers=headers)

    async def compact(
        self, host: MockUpstream, recorded: Recorded, meter: Meter, headers: dict[str, str]
    ) -> Response:
        """`POST /v1/responses/compact`: OpenAI's answer with `native_compaction`, else the
        404 of a provider that does not serve the path."""
        if not host.native_compaction:
            refused = not_found(recorded.path)
            return JSONResponse(refused.body, status_code=refused.status, headers=headers)
        body = recorded.json()
        try:
            items = self._resolve(body)
            check_compaction_items(items, native=True, made=self.compactions)
            prompt = self._admit(host, body, items, ResponsesMeter(meter))
        except Rejected as rejected:
            return JSONResponse(rejected.body, status_code=rejected.status, headers=headers)
        item = compaction_item(self.new_id, self.compactions)
        usage = _compaction_usage(prompt, item)
        return JSONResponse(compacted(self.new_id("resp"), items, item, usage), headers=headers)

    async def input_tokens(
        self, host: MockUpstream, recorded: Recorded, meter: Meter, headers: dict[str, str]
    ) -> Response:
        """`POST /v1/responses/input_tokens`: the prompt tokens a create of the same body
        would bill (`usage.input_tokens`), its items checked as a create's are (no window:
        the count is what a client asks to know whether it fits)."""
        body = recorded.json()
        try:
            items = self._resolve(body)
            check_compaction_items(items, native=host.native_compaction, made=self.compactions)
        except Rejected as rejected:
            return JSONResponse(rejected.body, status_code=rejected.status, headers=headers)
        prompt = ResponsesMeter(meter).prompt(body, items)
        answer = {"object": "response.input_tokens", "input_tokens": prompt}
        return JSONResponse(answer, headers=headers)

    def _compacted_in_band(
        self,
        host: MockUpstream,
        body: Mapping[str, Any],
        items: list[JSON],
        prompt: int,
        headers: dict[str, str],
    ) -> Response:
        """The answer to an input ending with `compaction_trigger`: one compaction item."""
        output = [compaction_item(self.new_id, self.compactions)]
        response = response_object(body, self.new_id("resp"), output, None)
        response["usage"] = _compaction_usage(prompt, output[0])
        if body.get("store") is not False:
            self.stored[response["id"]] = [*items[:-1], *output]
        if body.get("stream") is True:
            stream = self._stream(host, response, Reply(content=None))
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        return JSONResponse(response, headers=headers)

    def _resolve(self, body: Mapping[str, Any]) -> list[JSON]:
        """The request's items, after those of the response it continues."""
        items = input_items(body)
        previous = body.get("previous_response_id")
        if previous is None:
            return items
        if not isinstance(previous, str) or previous not in self.stored:
            raise previous_response_not_found(str(previous))
        return [*self.stored[previous], *items]

    def _admit(
        self, host: MockUpstream, body: Mapping[str, Any], items: list[JSON], meter: ResponsesMeter
    ) -> int:
        """The prompt's tokens, once the items pass the checks: structure, then the window."""
        if host.strict:
            try:
                check_call_pairs(items)
                self.reasoning.check(items)
            except Rejected:
                host.strict_rejections += 1
                raise
        prompt = meter.prompt(body, items)
        reserved = body.get("max_output_tokens")
        output = reserved if type(reserved) is int else 0
        if host.window is not None and prompt + output > host.window:
            host.overflows += 1
            raise context_length_exceeded()
        return prompt

    def _refuse(
        self, host: MockUpstream, body: JSON, rejected: Rejected, headers: dict[str, str]
    ) -> Response:
        overflow = rejected.body["error"]["code"] == "context_length_exceeded"
        if overflow and body.get("stream") is True and host.responses_overflow_in_stream:
            # As some providers do: the stream starts, then the response fails in it.
            response = response_object(body, self.new_id("resp"), [], None)
            error = {"code": "context_length_exceeded", "message": OVERFLOW_MESSAGE}
            chunks = [sse(event) for event in failed_events(response, error)]
            return StreamingResponse(iter(chunks), media_type="text/event-stream", headers=headers)
        return JSONResponse(rejected.body, status_code=rejected.status, headers=headers)

    def _bill(self, host: MockUpstream, usage: ResponsesUsage, *, summary: bool) -> None:
        """Record what an answered request billed (a summary request's apart, as chat's)."""
        if summary:
            host.summary_usage.append(
                Usage(usage.input_tokens, usage.output_tokens, usage.cached_tokens)
            )
        else:
            host.prompt_tokens.append(usage.input_tokens)
            host.cached_tokens.append(usage.cached_tokens)

    async def _stream(
        self, host: MockUpstream, response: JSON, reply: Reply
    ) -> AsyncIterator[bytes]:
        """The events of `response`, paced and held as `reply` says (as chat's stream is)."""
        delay = reply.chunk_delay_s or (ENDLESS_DELAY_S if reply.endless else 0.0)
        hold = reply.hold
        finished = False
        try:
            for index, event in enumerate(events(response, endless=reply.endless)):
                if index and delay:
                    await asyncio.sleep(delay)
                yield sse(event)
                if hold is not None and event["type"].endswith(".delta"):
                    # Paused after the first delta until the test lets it go on.
                    await hold.wait()
                    hold = None
            finished = True
        finally:
            if not finished:
                host.streams_abandoned += 1


def _usage(
    prompt: int, cached: int, reply: Reply, output: list[JSON], meter: Meter
) -> ResponsesUsage:
    """What the response bills: its reasoning (the summaries' tokens) counts as output."""
    thinking = meter.scale(meter.counter.text(reasoning_text(output)))
    return ResponsesUsage(prompt, cached, meter.completion(reply) + thinking, thinking)


def _compaction_usage(prompt: int, item: JSON) -> JSON:
    """A compaction bills the prompt, and the summary it sampled as output."""
    written = len(item["encrypted_content"]) // ENCRYPTED_CHARS_PER_TOKEN
    return ResponsesUsage(prompt, 0, written, 0).json()


def _wants_encrypted_reasoning(body: Mapping[str, Any]) -> bool:
    include = body.get("include")
    return isinstance(include, list) and ENCRYPTED_REASONING in include
