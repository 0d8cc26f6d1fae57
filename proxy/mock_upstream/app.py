"""`MockUpstream`: the mock provider's options, its state, and its ASGI app."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE, TextEncoder, TokenCounter
from proxy.mock_upstream import errors
from proxy.mock_upstream.agent import Agent, AgentScript
from proxy.mock_upstream.cache import PromptCache, cached_tokens
from proxy.mock_upstream.completions import Completion, Usage
from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.messages import MessagesApi
from proxy.mock_upstream.meter import Meter, Piece
from proxy.mock_upstream.recaller import Recaller
from proxy.mock_upstream.responses import ResponsesApi
from proxy.mock_upstream.script import JSON, Recorded, Reply
from proxy.mock_upstream.strictness import check_alternation, check_tool_pairs
from proxy.mock_upstream.summarizer import SummaryQuality, is_summary_request, summarize


@dataclass(kw_only=True, eq=False)
class MockUpstream:
    """The mock server's options and state, and its ASGI app (`.app`).

    Every option is off by default, which is the plain, lenient mock of old. Options may be
    changed between requests (`upstream.window = 8000`).
    """

    latency_s: float = 0.0
    """Seconds every request waits, its body read, before it is answered."""
    default: Reply | None = None
    """The answer whenever nothing is queued. Without one, summary requests get the
    summarizer's answer, other requests the agent's (with `agent`) or `Reply()`."""
    window: int | None = None
    """The context window in tokens: a longer prompt plus `max_tokens` gets OpenAI's 400."""
    token_factor: float = 1.0
    """The provider's count per token the proxy's counter (o200k_base) sees."""
    strict: bool = False
    """Refuse broken tool-call pairing with OpenAI's 400s."""
    roles_alternate: bool = False
    """Refuse two user or two assistant turns in a row, as strict chat templates do."""
    agent: AgentScript | None = None
    """Play an agent's model when nothing is queued (see `AgentScript`)."""
    recaller: bool = False
    """Play a model that uses `context_recall` (see recaller.py): asked for "the value of
    KEY" (when nothing is queued), it answers from `KEY=value` in the request, else recalls
    the ids it guesses best while the tool is offered (up to 3 rounds a turn), else says it
    does not have the value. Other requests get the usual answer (`default`, agent, ...)."""
    summary_quality: SummaryQuality = "good"
    """How well the mock summarizes when the proxy asks it to."""
    summary_latency_s: float = 0.0
    """Seconds a summary request waits on top of `latency_s` (a slow summarizer)."""
    cache_granularity: int = 128
    cache_min_tokens: int = 1024
    """Prompt-cache rounding (see proxy/mock_upstream/cache.py): OpenAI caches prefixes of
    at least 1024 tokens, in steps of 128."""
    models: tuple[str, ...] = ("mock-model",)
    """The ids `/v1/models` lists (each with the window, when there is one): name the models
    a benchmark asks for, so a proxy that looks its model up finds the window."""
    encoders: Encoders | None = field(default=None, repr=False)
    """The tokenizers; when None, o200k_base is loaded on the first chat request (off the
    event loop, once), falling back to the approximate count as the proxy does."""
    responses_reasoning: bool = False
    """On `/v1/responses`, play a reasoning model: each response opens with a reasoning
    item when the request includes "reasoning.encrypted_content" (see responses.py)."""
    responses_overflow_in_stream: bool = False
    """On `/v1/responses`, answer a streamed overflow 200 with a stream that ends in
    `response.failed`, as some providers do, instead of OpenAI's 400 before the stream."""
    native_compaction: bool = False
    """Compact as OpenAI does (`POST /v1/responses/compact`, a `compaction_trigger` at the end
    of `input`; responses_compaction.py); off, both are refused as a provider without them
    refuses them (a 404, a 400), and so is any `compaction` item in `input`."""
    messages_count_tokens: bool = True
    """Answer `POST /v1/messages/count_tokens` as Anthropic does; off, it is a 404, as from an
    Anthropic-compatible provider without it (messages.py)."""

    # What the mock saw and did, for tests and benchmarks to read.
    requests: list[Recorded] = field(default_factory=list, init=False, repr=False)
    streams_abandoned: int = field(default=0, init=False)
    requests_abandoned: int = field(default=0, init=False)
    overflows: int = field(default=0, init=False)
    strict_rejections: int = field(default=0, init=False)
    """Requests refused for their tool pairing or their role order."""
    prompt_tokens: list[int] = field(default_factory=list, init=False)
    """The prompt tokens of each answered chat request (summary requests apart)."""
    cached_tokens: list[int] = field(default_factory=list, init=False)
    """The cached tokens reported for each of those, in the same order."""
    summary_requests: list[Recorded] = field(default_factory=list, init=False, repr=False)
    """Accepted summary requests (they are in `requests` too)."""
    summary_usage: list[Usage] = field(default_factory=list, init=False, repr=False)
    """The usage billed for each answered summary request: its prompt and cached tokens
    come from the same prompt cache as every other request's."""
    recalled_ids: list[str] = field(default_factory=list, init=False, repr=False)
    """The ids the recaller asked for with `context_recall`, one per call, in order."""
    recall_answers: list[str] = field(default_factory=list, init=False, repr=False)
    """The recaller's answers to question turns, in order."""
    app: Starlette = field(init=False, repr=False)

    _replies: deque[Reply] = field(default_factory=deque, init=False, repr=False)
    _ids: itertools.count[int] = field(
        default_factory=lambda: itertools.count(1), init=False, repr=False
    )
    _cache: PromptCache = field(default_factory=PromptCache, init=False, repr=False)
    _counter: TokenCounter | None = field(default=None, init=False, repr=False)
    _loading: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    _agent: Agent | None = field(default=None, init=False, repr=False)
    _recaller: Recaller = field(init=False, repr=False)
    _responses: ResponsesApi = field(default_factory=ResponsesApi, init=False, repr=False)
    _messages: MessagesApi = field(default_factory=MessagesApi, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.agent is not None and self.default is not None:
            raise ValueError("give `agent` or `default`, not both: the agent answers everything")
        # The recaller writes its record into the mock's own lists, read as the others are.
        self._recaller = Recaller(self.recalled_ids, self.recall_answers)
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses_endpoint, methods=["POST"]),
                Route("/v1/responses/compact", self._compact_endpoint, methods=["POST"]),
                Route("/v1/messages", self._messages_endpoint, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens_endpoint, methods=["POST"]),
                Route("/v1/responses/input_tokens", self._input_tokens_endpoint, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                # Claude Code probes its base URL before its first request.
                Route("/", self._probe, methods=["HEAD"]),
                Route(
                    "/v1/{path:path}",
                    self._echo,
                    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                ),
            ]
        )

    def queue(self, *replies: Reply) -> None:
        """Answer the next chat completions or responses with `replies`, in order."""
        self._replies.extend(replies)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    @property
    def summary_calls(self) -> int:
        return len(self.summary_requests)

    @property
    def recall_calls(self) -> int:
        """The `context_recall` calls the recaller made."""
        return len(self.recalled_ids)

    async def _record(self, request: Request) -> Recorded:
        recorded = Recorded(
            method=request.method,
            path=request.url.path,
            raw_path=request.scope["raw_path"].decode("latin-1"),
            query=request.url.query,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            body=await request.body(),
        )
        self.requests.append(recorded)
        if self.latency_s and await _client_leaves_within(request, self.latency_s):
            self.requests_abandoned += 1
        return recorded

    async def _chat(self, request: Request) -> Response:
        recorded = await self._record(request)
        body = recorded.json()
        meter = await self._meter()
        headers = _provider_headers(next(self._ids))
        try:
            prompt = self._admit(body, meter)
        except Rejected as rejected:
            return JSONResponse(rejected.body, status_code=rejected.status, headers=headers)
        summary = is_summary_request(body)
        if summary:
            self.summary_requests.append(recorded)
            await asyncio.sleep(self.summary_latency_s)
        reply = self._reply_for(body, summary, meter)
        headers.update(reply.headers)
        if reply.status >= 400:
            error = reply.error or {"error": {"message": "mock error", "type": "server_error"}}
            return JSONResponse(error, status_code=reply.status, headers=headers)
        usage = self._bill(body, prompt, reply, meter, summary=summary)
        completion = Completion(body, reply, f"chatcmpl-mock-{next(self._ids)}", usage)
        if body.get("stream") is True:
            return StreamingResponse(
                self._sse(completion), media_type="text/event-stream", headers=headers
            )
        return JSONResponse(completion.whole(), headers=headers)

    async def _meter(self) -> Meter:
        if self._counter is None:
            async with self._loading:
                if self._counter is None:
                    self._counter = TokenCounter(await self._encoder())
        return Meter(self._counter, self.token_factor)

    async def _encoder(self) -> TextEncoder:
        if self.encoders is None:
            # Reading the encoding takes about a second: not on the event loop.
            self.encoders = await asyncio.to_thread(load_encoders, (O200K_BASE,))
        return self.encoders.by_name.get(O200K_BASE, self.encoders.fallback)

    def _admit(self, body: Mapping[str, Any], meter: Meter) -> int:
        """The request's prompt tokens, once it passes the provider's checks.

        Raises `Rejected` as the provider would: structure first, as a template or a schema
        check fails before the tokenizer runs, then the window.
        """
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        try:
            if self.strict:
                check_tool_pairs(messages)
            if self.roles_alternate:
                check_alternation(messages)
        except Rejected:
            self.strict_rejections += 1
            raise
        prompt, output = meter.prompt(body), _requested_output(body)
        if self.window is not None and prompt + output > self.window:
            self.overflows += 1
            raise errors.context_length_exceeded(self.window, prompt, output)
        return prompt

    def _reply_for(self, body: Mapping[str, Any], summary: bool, meter: Meter) -> Reply:
        if self._replies:
            return self._replies.popleft()
        if self.recaller and not summary:
            recall = self._recaller.reply(body)
            if recall is not None:
                return recall
        if self.default is not None:
            return self.default
        if summary:
            return Reply(content=summarize(body, self.summary_quality, meter.counter.text))
        if self.agent is not None:
            return self._player(self.agent).reply(body)
        return Reply()

    def _player(self, script: AgentScript) -> Agent:
        # One player per script: a test that swaps the script starts a fresh agent.
        if self._agent is None or self._agent.script is not script:
            self._agent = Agent(script)
        return self._agent

    def _bill(
        self, body: Mapping[str, Any], prompt: int, reply: Reply, meter: Meter, *, summary: bool
    ) -> Usage:
        """The usage of an answered request; its prompt joins the prompt cache."""
        cached = self._cached(meter.pieces(body), prompt, meter)
        usage = Usage(prompt, meter.completion(reply), cached)
        if summary:
            self.summary_usage.append(usage)
        else:
            self.prompt_tokens.append(prompt)
            self.cached_tokens.append(cached)
        return usage

    def _cached(self, pieces: list[Piece], prompt: int, meter: Meter) -> int:
        """The cached tokens of a prompt made of `pieces`, which join the prompt cache."""
        keys = [piece.key for piece in pieces]
        shared = self._cache.shared_prefix(keys)
        self._cache.remember(keys)
        shared_tokens = min(meter.scale(sum(piece.tokens for piece in pieces[:shared])), prompt)
        return cached_tokens(
            shared_tokens, granularity=self.cache_granularity, minimum=self.cache_min_tokens
        )

    async def _sse(self, completion: Completion) -> AsyncIterator[bytes]:
        reply = completion.reply
        finished = False
        try:
            for index, chunk in enumerate(completion.chunks()):
                if index and reply.chunk_delay_s:
                    await asyncio.sleep(reply.chunk_delay_s)
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                if index == 1 and reply.hold is not None:
                    await reply.hold.wait()
            while reply.endless:
                await asyncio.sleep(reply.chunk_delay_s or 0.05)
                yield b"data: " + json.dumps(completion.delta({"content": "."})).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                self.streams_abandoned += 1

    async def _responses_endpoint(self, request: Request) -> Response:
        recorded = await self._record(request)
        headers = _provider_headers(next(self._ids))
        return await self._responses.answer(self, recorded, await self._meter(), headers)

    async def _compact_endpoint(self, request: Request) -> Response:
        recorded = await self._record(request)
        headers = _provider_headers(next(self._ids))
        return await self._responses.compact(self, recorded, await self._meter(), headers)

    async def _messages_endpoint(self, request: Request) -> Response:
        recorded = await self._record(request)
        return await self._messages.answer(self, recorded, await self._meter(), next(self._ids))

    async def _count_tokens_endpoint(self, request: Request) -> Response:
        recorded = await self._record(request)
        meter = await self._meter()
        return await self._messages.count_tokens(self, recorded, meter, next(self._ids))

    async def _probe(self, request: Request) -> Response:
        await self._record(request)
        return Response(status_code=200)

    async def _input_tokens_endpoint(self, request: Request) -> Response:
        recorded = await self._record(request)
        headers = _provider_headers(next(self._ids))
        return await self._responses.input_tokens(self, recorded, await self._meter(), headers)

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        # The window in the fields vLLM (`max_model_len`) and OpenRouter (`context_length`) use.
        window: JSON = {}
        if self.window is not None:
            window = {"context_length": self.window, "max_model_len": self.window}
        entries = [
            {"id": model, "object": "model", "created": 0, "owned_by": "mock", **window}
            for model in self.models
        ]
        return JSONResponse({"object": "list", "data": entries})

    async def _echo(self, request: Request) -> Response:
        recorded = await self._record(request)
        echo = {
            "method": recorded.method,
            "path": recorded.path,
            "query": recorded.query,
            "body": recorded.body.decode("utf-8", "replace"),
        }
        return JSONResponse(echo, headers={"x-request-id": f"req_echo_{next(self._ids)}"})


async def _client_leaves_within(request: Request, seconds: float) -> bool:
    """Wait `seconds` (the body already read); True if the client hung up meanwhile."""

    async def disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(disconnect(), seconds)
    except TimeoutError:
        return False
    return True


def _requested_output(body: Mapping[str, Any]) -> int:
    """The output the request reserves: `max_completion_tokens`, else `max_tokens`, else 0."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if type(value) is int:
            return value
    return 0


def _provider_headers(number: int) -> dict[str, str]:
    return {
        "x-request-id": f"req_mock_{number}",
        "openai-processing-ms": "1",
        "x-ratelimit-remaining-requests": "9999",
        "x-ratelimit-remaining-tokens": "999999",
    }
