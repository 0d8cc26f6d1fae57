"""Chat commands: `/context`, `/compact` and `/context clear`, answered by the proxy itself.

With `chat_commands: true`, a request whose last message is a user message saying exactly
one of these (whitespace around it aside) is not forwarded: the proxy answers it as the
assistant, as a whole completion or as a stream, in the shape the OpenAI SDK parses. This
module recognizes the command and writes the answer; the service performs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from proxy.core.messages import Message, role, text

Command = Literal["context", "compact", "clear"]
_COMMANDS: dict[str, Command] = {
    "/context": "context",
    "/compact": "compact",
    "/context clear": "clear",
}
_CATEGORIES = (
    ("system", "system and developer"),
    ("tools", "tool schemas"),
    ("summary", "summaries and markers"),
    ("messages", "messages"),
    ("tool_results", "tool results"),
    ("placeholders", "cleared results"),
)


def command_of(messages: Sequence[Message]) -> Command | None:
    """The command the last message gives, if it is a user message saying only that."""
    if not messages or role(messages[-1]) != "user":
        return None
    return _COMMANDS.get(" ".join(text(messages[-1]).split()))


def context_text(session: Mapping[str, Any], context: Mapping[str, Any]) -> str:
    """The `/context` answer: where the tokens go now, and what compaction did so far."""
    window, reserve = context["window"], context["output_reserved"]
    lines = [
        f"**Context**: {context['tokens']:,} of {window - reserve:,} prompt tokens "
        f"({context['pressure']:.0%} of the window less {reserve:,} reserved for the answer; "
        f"compaction at {context['trigger']:.0%}, down to {context['target']:.0%}).",
        "",
        "| category | tokens |",
        "| --- | ---: |",
    ]
    breakdown = context["breakdown"]
    lines += [f"| {label} | {breakdown[key]:,} |" for key, label in _CATEGORIES]
    lines += [
        "",
        f"Session `{session['id']}`: {session['turns']:,} turns, "
        f"{session['compactions']:,} compactions, {session['tokens_saved']:,} tokens saved "
        f"({session['tokens_forwarded']:,} forwarded of {session['tokens_sent']:,} sent).",
    ]
    return "\n".join(lines)


def compact_text(result: Mapping[str, Any]) -> str:
    """The `/compact` answer."""
    if not result["compacted"]:
        return "Nothing to compact: the conversation is all pinned or recent messages."
    waited = result.get("summary_wait_s") or 0
    summary = f" It waited {waited:.1f} s for the summary." if waited else ""
    return (
        f"Compacted ({result['strategy']}): {result['tokens_before']:,} → "
        f"{result['tokens_after']:,} tokens.{summary} The next request forwards the compacted "
        "history."
    )


def clear_text(dropped: int) -> str:
    """The `/context clear` answer."""
    if not dropped:
        return "Nothing to clear: this conversation has no compaction."
    plural = "s" if dropped != 1 else ""
    return (
        f"Cleared {dropped} compaction{plural}: the next request forwards the whole history "
        "(it is compacted again if it no longer fits)."
    )


def completion(content: str, model: str | None, *, created: int, id: str) -> dict[str, Any]:
    """A whole chat completion carrying `content` as the assistant's answer. The time and
    the id come from the caller: the core reads no clock and draws no random numbers."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model or "compaction-proxy",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _no_usage(),
    }


def completion_events(
    content: str, model: str | None, *, created: int, id: str, include_usage: bool
) -> bytes:
    """The same answer as a chat completion stream, `[DONE]` included."""
    base = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model or "compaction-proxy",
    }
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": ""},
        {"content": content},
        {},
    ]
    chunks = [
        {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None if delta else "stop"}],
        }
        for delta in deltas
    ]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _no_usage()})
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _no_usage() -> dict[str, int]:
    # Nothing was sent to a model: no tokens were used.
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
