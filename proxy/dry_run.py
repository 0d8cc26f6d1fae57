"""`compaction-proxy inspect`: what the proxy would do with one request, without sending it.

Reads a chat completion body from a file, counts it the way the proxy does, decides the
model's window and budget by the same rules as `serve` (`proxy.core.windows.decide_window`,
`proxy.core.budget.request_budget`: when nothing explicit or well known gives the window,
the configured upstream's `/v1/models` is asked, as `serve` does), runs the same compaction
plan, and reports the token breakdown, the pressure and the messages that would be
forwarded. A window `serve` learned from an overflow error lives in its store and is not
known here. The summary layer needs an LLM: with `--summary-url` the summarizer is called
for real (an OpenAI-compatible base URL); without it, the plan falls back to truncation, as
the proxy does when its summarizer fails.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from proxy.adapters.tokenizer import load_encoders
from proxy.core.breakdown import Breakdown, breakdown
from proxy.core.budget import request_budget
from proxy.core.plan import Compacted, NeedsSummary, Situation, Unchanged, plan_compaction
from proxy.core.request import (
    Api,
    ChatRequest,
    parse_chat_request,
    parse_responses_request,
    wire_body,
)
from proxy.core.responses import readable
from proxy.core.summary import completion_text
from proxy.core.tokens import TokenCounter
from proxy.core.urls import redact, split_credentials
from proxy.core.windows import Window, decide_window, needs_detection, window_in
from proxy.errors import InvalidRequestError
from proxy.settings import Settings

# How long `inspect` waits for the upstream's `/v1/models`.
MODELS_TIMEOUT_S = 10.0


class DryRunError(Exception):
    """The request file cannot be inspected; the message says why."""


@dataclass(frozen=True, slots=True)
class Options:
    context_window: int | None = None
    strategy: str | None = None
    summary_url: str | None = None
    force: bool = False


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of a dry run."""

    model: str | None
    window: int
    window_source: str
    output_reserve: int
    before: Breakdown
    after: Breakdown
    pressure_before: float
    pressure_after: float
    strategy_applied: str | None
    reason: str | None
    """Why nothing was compacted (under_trigger, cooldown, ...), when nothing was."""
    messages: list[dict[str, Any]]
    notes: tuple[str, ...] = ()
    input: list[Any] | None = None
    """For a Responses API request: the `input` items that would be forwarded."""

    def as_json(self) -> dict[str, Any]:
        """The `--json` object."""
        found = {
            "tokens_before": self.before.total,
            "tokens_after": self.after.total,
            "pressure_before": round(self.pressure_before, 4),
            "strategy_applied": self.strategy_applied,
            "messages": self.messages,
        }
        return found if self.input is None else {**found, "input": self.input}


def inspect_file(path: Path, settings: Settings, options: Options) -> Report:
    """Dry-run the chat completion (or Responses API) request in `path`. Raises
    `DryRunError`."""
    request = _read(path)
    policy = settings.model_policies().for_model(request.model)
    if options.strategy:
        policy = policy.replace(strategy=options.strategy)
    window = _window(request.model, settings, options)
    counter = TokenCounter(load_encoders().for_model(request.model))
    budget = request_budget(
        window.tokens,
        request.body,
        output_reserved=policy.output_reserved,
        margin_share=policy.safety_margin,
    )
    situation = Situation(request.messages, request.body, policy, budget, force=options.force)
    plan = plan_compaction(situation, counter)
    notes: list[str] = []
    if isinstance(plan, NeedsSummary):
        plan = _summarized(plan, request, settings, options, notes)
    forwarded = request.messages if isinstance(plan, Unchanged) else plan.messages
    before = breakdown(request.messages, request.body, counter)
    after = breakdown(forwarded, request.body, counter)
    return Report(
        model=request.model,
        window=window.tokens,
        window_source=window.source,
        output_reserve=budget.output_reserve,
        before=before,
        after=after,
        pressure_before=budget.pressure(before.total),
        pressure_after=budget.pressure(after.total),
        strategy_applied=plan.strategy if isinstance(plan, Compacted) else None,
        reason=plan.reason if isinstance(plan, Unchanged) else None,
        messages=readable(forwarded),
        notes=tuple(notes),
        input=wire_body(request, forwarded)["input"] if request.api is Api.RESPONSES else None,
    )


def _read(path: Path) -> ChatRequest:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DryRunError(f"cannot read {path}: {exc.strerror}") from exc
    # A Responses API body has `input` where a chat completion has `messages`.
    responses = b'"messages"' not in raw and b'"input"' in raw
    try:
        return parse_responses_request(raw) if responses else parse_chat_request(raw)
    except InvalidRequestError as exc:
        kind = "Responses API" if responses else "chat completion"
        raise DryRunError(f"{path} is not a {kind} request: {exc.message}") from exc


def _window(model: str | None, settings: Settings, options: Options) -> Window:
    if options.context_window:
        return Window(options.context_window, "--context-window")
    policies = settings.model_policies()
    configured = policies.configured_window(model)
    context_window = policies.default.context_window
    reported = None
    if model and needs_detection(configured=configured, context_window=context_window, model=model):
        reported = _reported_window(model, settings)
    return decide_window(
        model, configured=configured, context_window=context_window, reported=reported
    )


def _reported_window(model: str, settings: Settings) -> int | None:
    """What the configured upstream's `/v1/models` says of `model` (None when it says
    nothing or cannot be reached: the default then applies, as in `serve`)."""
    key = settings.upstream.api_key
    headers = {"authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    url = settings.upstream.base_url + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=MODELS_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    return window_in(response.content, model) if response.status_code == 200 else None


def _summarized(
    plan: NeedsSummary, request: ChatRequest, settings: Settings, options: Options, notes: list[str]
) -> Compacted:
    if not options.summary_url:
        notes.append("summarize needs an LLM: truncated instead (give --summary-url to summarize)")
        return plan.fallback()
    try:
        summary = _call_summarizer(options.summary_url, plan.request, settings)
    except DryRunError as exc:
        notes.append(f"{exc}: truncated instead")
        return plan.fallback()
    return plan.complete(summary)


def _call_summarizer(base_url: str, body: dict[str, Any], settings: Settings) -> str:
    # As `serve` does: credentials in the URL go as Basic auth, and are never shown.
    stripped, credentials = split_credentials(base_url.rstrip("/"))
    key = settings.upstream.api_key
    token = key.get_secret_value() if key else os.environ.get("OPENAI_API_KEY")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if credentials is not None:
        headers = {"authorization": credentials.basic()}
    url = stripped + "/chat/completions"
    shown = redact(base_url.rstrip("/")) + "/chat/completions"
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=settings.upstream.timeout_s)
        response.raise_for_status()
        summary = completion_text(response.json())
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        raise DryRunError(f"the summarizer at {shown} failed ({redact(str(exc))})") from exc
    if summary is None:
        raise DryRunError(f"the summarizer at {shown} returned no text")
    return summary


def render_text(report: Report) -> str:
    """The human-readable report."""
    lines = [
        f"model: {report.model or '(none)'}",
        f"window: {report.window} tokens ({report.window_source}), "
        f"output reserve: {report.output_reserve}",
        "",
        f"{'tokens':<14}{'before':>10}{'after':>10}",
    ]
    after = report.after.as_dict()
    for name, value in report.before.as_dict().items():
        lines.append(f"{name:<14}{value:>10}{after[name]:>10}")
    lines += [
        "",
        f"pressure: {report.pressure_before:.1%} -> {report.pressure_after:.1%}",
        f"action: {report.strategy_applied or 'none (' + str(report.reason) + ')'}",
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
