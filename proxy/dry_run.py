"""`compaction-proxy inspect`: what `serve` would forward for one request, without sending it.

There is one pipeline. `inspect` builds the proxy as `serve` does (`proxy.web.create_app`,
with the embedded store) and sends the request file through the service's own entry point;
only the provider is replaced, by a `RecordingUpstream` that keeps the request the service
forwards and answers it itself. Everything else is `serve`'s: the window (its `models:`
entry, the configuration, the table of known models, else the configured upstream's
`/v1/models`, asked for real), the budget, the hooks, the compaction and the summary brain.
The report is made of what was recorded and of the service's own numbers (its
`x-compaction-*` headers and the session's context report). A window `serve` learned from
an overflow error lives in its store and is not known here.

At the trigger `serve` never waits for a summary: it truncates at once and summarizes what
it dropped in the background, for its next compaction. `--force` is the operator's explicit
compaction (`POST /v1/compaction/sessions/{id}/compact`), which waits for the summary; the
request is then sent again and forwards what it stored. The summary brain is the
configured one, or `--summary-url`; without either nothing would write a summary here (the
upstream is not asked), and the compaction falls back to truncation as in `serve` when its
summarizer fails.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.adapters.recording_upstream import RECORD_HEADER, RecordingUpstream
from proxy.adapters.upstream import AiohttpUpstream
from proxy.core import anthropic, jsoncodec
from proxy.core.breakdown import Breakdown, breakdown
from proxy.core.headers import Headers
from proxy.core.policy import Strategy
from proxy.core.request import (
    Api,
    ChatRequest,
    parse_chat_request,
    parse_messages_request,
    parse_responses_request,
)
from proxy.core.responses import readable
from proxy.core.urls import split_credentials
from proxy.errors import InvalidRequestError, ProxyError
from proxy.service import Incoming, ProxyService
from proxy.settings import AuthSettings, RedisSettings, Settings

# How long `inspect` waits for the upstream's `/v1/models`.
MODELS_TIMEOUT_S = 10.0
# The session `inspect`'s request is sent as (the store is its own, and empty).
SESSION = "inspect"
# The `anthropic-version` a Messages API request is sent with (the SDKs' current one).
ANTHROPIC_VERSION = "2023-06-01"


class DryRunError(Exception):
    """The request file cannot be inspected; the message says why."""


@dataclass(frozen=True, slots=True)
class Options:
    context_window: int | None = None
    strategy: Strategy | None = None
    summary_url: str | None = None
    force: bool = False


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of a dry run."""

    model: str | None
    window: int
    output_reserve: int
    before: Breakdown
    after: Breakdown
    tokens_before: int
    """The service's count of the request as sent (`x-compaction-tokens-before`)."""
    tokens_after: int
    """The service's count of what it forwards (`x-compaction-tokens-after`)."""
    pressure_before: float
    pressure_after: float
    trigger: float
    target: float
    strategy_applied: str | None
    messages: list[dict[str, Any]]
    notes: tuple[str, ...] = ()
    input: list[Any] | None = None
    """For a Responses API request: the `input` items that would be forwarded."""
    forwarded: dict[str, Any] | None = None
    """For a Messages API request: the `system` and `messages` that would be forwarded."""
    window_source: str | None = None
    """Where the window came from, when `inspect` set it itself (`--context-window`)."""

    def as_json(self) -> dict[str, Any]:
        """The `--json` object."""
        found: dict[str, Any] = {
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "pressure_before": round(self.pressure_before, 4),
            "strategy_applied": self.strategy_applied,
            "messages": self.messages,
        }
        if self.forwarded is not None:
            found["forwarded"] = self.forwarded
        return found if self.input is None else {**found, "input": self.input}


async def inspect_file(path: Path, settings: Settings, options: Options) -> Report:
    """Send the chat completion (or Responses API, or Messages API) request in `path` through
    the proxy as `serve` runs it, to a recording upstream. Raises `DryRunError`."""
    from proxy.web import create_app  # the web layer only when a dry run is made

    request = _read(path)
    recorder = RecordingUpstream(
        AiohttpUpstream(settings.upstream.base_url, timeout_s=MODELS_TIMEOUT_S),
        lookup_timeout_s=MODELS_TIMEOUT_S,
    )
    app = create_app(_settings_for(settings, options), upstream=recorder)
    with _logged() as logged:
        async with app.router.lifespan_context(app):
            logged.taking = True
            run = _Run(app.state.service, request, options)
            try:
                await run.through()
            finally:
                # The background work (summaries, the timeline) ends before the service
                # closes, even after the proxy refused the request.
                await run.service.settle()
    notes = [*(f"asked {lookup}" for lookup in recorder.lookups), *logged.lines]
    return run.report(recorder, notes)


def _read(path: Path) -> ChatRequest:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DryRunError(f"cannot read {path}: {exc.strerror}") from exc
    api = _api_of(raw)
    try:
        return _PARSERS[api](raw)
    except InvalidRequestError as exc:
        raise DryRunError(f"{path} is not a {_KINDS[api]} request: {exc.message}") from exc


_PARSERS = {
    Api.CHAT: parse_chat_request,
    Api.RESPONSES: parse_responses_request,
    Api.MESSAGES: parse_messages_request,
}
_KINDS = {Api.CHAT: "chat completion", Api.RESPONSES: "Responses API", Api.MESSAGES: "Messages API"}
# Content blocks only the Messages API has (a chat completion's parts are `text`, `image_url`,
# `input_audio`, `file`).
_MESSAGES_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}
)


def _api_of(raw: bytes) -> Api:
    """The API a request file is written for: a Responses API body has `input` where the
    others have `messages`; a Messages API body (Claude Code's, the `anthropic` SDK's) has a
    top-level `system` or `thinking`, a Claude model, or blocks only that API has."""
    try:
        body = jsoncodec.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return Api.CHAT  # the chat parser says what is wrong with it
    if not isinstance(body, dict):
        return Api.CHAT
    if "messages" not in body and "input" in body:
        return Api.RESPONSES
    model = body.get("model")
    if "system" in body or "thinking" in body or str(model).startswith("claude"):
        return Api.MESSAGES
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") in _MESSAGES_BLOCKS:
                return Api.MESSAGES
    return Api.CHAT


def _settings_for(settings: Settings, options: Options) -> Settings:
    """`settings` with the options applied, as `serve` would be configured for them: its
    own embedded store, and no client keys (`inspect` is the only client)."""
    changes: dict[str, Any] = {}
    if options.context_window is not None:
        changes["context_window"] = options.context_window
    if options.strategy is not None:
        changes["strategy"] = options.strategy
    if options.summary_url:
        brain = settings.context.as_dict()["summary_brain"]
        brain["base_url"] = options.summary_url
        if split_credentials(options.summary_url)[1] is not None:
            brain["api_key"] = None  # the URL's credentials go as Basic auth instead
        changes["summary_brain"] = brain
    try:
        context = settings.context.changed(changes)
        policy_changes = {k: v for k, v in changes.items() if k != "summary_brain"}
        models = {
            name: entry.model_validate({**entry.model_dump(), **policy_changes})
            for name, entry in settings.models.items()
        }
    except ValidationError as exc:
        # Each key and what is wrong with it, never the value (a URL may hold a password).
        wrong = "; ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors())
        raise DryRunError(f"invalid option: {wrong}") from exc
    return settings.model_copy(
        update={
            "context": context,
            "models": models,
            "redis": RedisSettings(),
            "auth": AuthSettings(),
        }
    )


class _Logged(logging.Handler):
    """The proxy's warnings while the request runs: they become the report's notes."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.taking = False

    def emit(self, record: logging.LogRecord) -> None:
        # Not before the request: startup advice (tenancy, keys) is about `serve`'s setup.
        if self.taking:
            self.lines.append(record.getMessage())


@contextmanager
def _logged() -> Iterator[_Logged]:
    logger = logging.getLogger("proxy")
    handler, propagate = _Logged(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # shown in the report, not printed on stderr too
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class _Run:
    """The request sent through the service (twice with `--force`, around the explicit
    compaction), and what came back."""

    def __init__(self, service: ProxyService, request: ChatRequest, options: Options) -> None:
        self.service = service
        self.request = request
        self.options = options
        self.headers: dict[str, str] = {}
        self.context: dict[str, Any] = {}
        self.compacted: dict[str, Any] | None = None

    async def through(self) -> None:
        incoming = _incoming(self.request)
        if self.options.force:
            # The session and its archive, as they stand before any compaction; then the
            # operator's compaction of that history, which the request below forwards.
            off = [*incoming.headers, ("x-compaction", "off")]
            await self._send(Incoming(incoming.method, incoming.path, incoming.query, off))
            await self.service.settle()
            ref = await self.service.operator.find(None, SESSION)
            self.compacted = await self.service.operator.compact(
                ref, incoming, self.options.strategy
            )
        await self._send(incoming)
        if "x-compaction-tokens-before" not in self.headers:
            # Not a turn: history kept by the provider (`server_state`), a chat command.
            how = self.headers.get("x-compaction-applied", "answered by the proxy itself")
            raise DryRunError(f"serve would not compact this request ({how})")
        await self.service.settle()
        ref = await self.service.operator.find(None, SESSION)
        detail = await self.service.operator.detail(ref)
        self.context = detail["context"] or {}

    async def _send(self, incoming: Incoming) -> None:
        handle = {
            Api.CHAT: self.service.chat_completion,
            Api.RESPONSES: self.service.response,
            Api.MESSAGES: self.service.messages,
        }[self.request.api]
        try:
            reply = await handle(incoming, self.request.raw)
        except ProxyError as exc:
            raise DryRunError(
                f"serve would answer {exc.status_code} ({exc.code or exc.error_type}): "
                f"{exc.message}"
            ) from exc
        try:
            if not isinstance(reply.body, bytes):
                async for _chunk in reply.body:
                    pass
        finally:
            reply.close()
        self.headers = {name.lower(): value for name, value in reply.headers}

    def report(self, recorder: RecordingUpstream, notes: list[str]) -> Report:
        if not recorder.recorded:
            raise DryRunError("serve would forward nothing for this request")
        sent = recorder.recorded[-1]
        api = self.request.api
        forwarded = _PARSERS[api](sent.body)
        wire = sent.json()
        counter = self.service.counter_for(self.request.model)
        before = int(self.headers["x-compaction-tokens-before"])
        after = int(self.headers["x-compaction-tokens-after"])
        pressure = float(self.headers["x-context-pressure"])
        return Report(
            model=self.request.model,
            window=self.context["window"],
            output_reserve=self.context["output_reserved"],
            before=breakdown(self.request.messages, self.request.body, counter),
            after=breakdown(forwarded.messages, forwarded.body, counter),
            tokens_before=before,
            tokens_after=after,
            # Pressure is proportional to the tokens (a share of one usable input).
            pressure_before=pressure * before / after if after else pressure,
            pressure_after=pressure,
            trigger=self.context["trigger"],
            target=self.context["target"],
            strategy_applied=self._strategy(),
            messages=(anthropic.readable if api is Api.MESSAGES else readable)(forwarded.messages),
            notes=(*notes, *self._explained()),
            input=wire["input"] if api is Api.RESPONSES else None,
            forwarded=_messages_sent(wire) if api is Api.MESSAGES else None,
            window_source="--context-window" if self.options.context_window else None,
        )

    def _strategy(self) -> str | None:
        """The explicit compaction's strategy, else the one this request's turn applied."""
        explicit = self.compacted["strategy"] if self.compacted is not None else None
        applied = self.headers.get("x-compaction-applied", "none")
        if isinstance(explicit, str):
            return explicit
        return None if applied == "none" else applied

    def _explained(self) -> list[str]:
        wanted = self.service.policies.for_model(self.request.model).strategy
        if self.compacted is None and self._strategy() == "truncate" and wanted != "truncate":
            return [
                "at the trigger serve truncates at once and summarizes what it dropped in "
                "the background, for its next compaction (--force waits for the summary, "
                "as /compact does)"
            ]
        return []


def _messages_sent(body: dict[str, Any]) -> dict[str, Any]:
    """What a Messages API body forwards of the conversation: its `system` and `messages`."""
    return {k: body[k] for k in ("system", "messages") if k in body}


def _incoming(request: ChatRequest) -> Incoming:
    """The request as a client would send it: with the SDK's key from the environment (the
    credentials `serve` passes on when it has no key of its own: the OpenAI SDK's, or the
    `anthropic` SDK's with its API version for a Messages API request), in one session."""
    headers: Headers = [
        ("content-type", "application/json"),
        ("x-session-id", SESSION),
        (RECORD_HEADER, "1"),
    ]
    if request.api is Api.MESSAGES:
        headers.append(("anthropic-version", ANTHROPIC_VERSION))
        key = os.environ.get("ANTHROPIC_API_KEY")
        if key:
            headers.append(("x-api-key", key))
    else:
        key = os.environ.get("OPENAI_API_KEY")
        if key:
            headers.append(("authorization", f"Bearer {key}"))
    path = {Api.CHAT: "chat/completions", Api.RESPONSES: "responses", Api.MESSAGES: "messages"}
    return Incoming("POST", path[request.api], "", headers)


def render_text(report: Report) -> str:
    """The human-readable report."""
    source = f" ({report.window_source})" if report.window_source else ""
    lines = [
        f"model: {report.model or '(none)'}",
        f"window: {report.window} tokens{source}, output reserve: {report.output_reserve}",
        "",
        f"{'tokens':<14}{'before':>10}{'after':>10}",
    ]
    after = report.after.as_dict()
    for name, value in report.before.as_dict().items():
        lines.append(f"{name:<14}{value:>10}{after[name]:>10}")
    lines += [
        "",
        f"pressure: {report.pressure_before:.1%} -> {report.pressure_after:.1%} "
        f"(compacts at {report.trigger:.0%}, down to {report.target:.0%})",
        f"action: {report.strategy_applied or 'none'}",
        *(f"note: {note}" for note in report.notes),
        "",
        f"forwarded messages ({len(report.messages)}):",
    ]
    lines += [_one_line(index, message) for index, message in enumerate(report.messages)]
    return "\n".join(lines)


def _one_line(index: int, message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        text = f"{text} -> {len(calls)} tool call(s)"
    flat = " ".join(str(text).split())
    shown = flat if len(flat) <= 100 else flat[:97] + "..."
    return f"{index:>4} {message.get('role', '?'):<10} {shown}"
