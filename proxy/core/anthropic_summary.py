"""The proxy's summary requests for a conversation on the Messages API, as Messages bodies.

A provider that speaks only the Messages API (Anthropic, and the Anthropic-compatible
servers Claude Code is pointed at) has no chat completions endpoint: the summary brain that
is the conversation's own upstream is asked in the Messages API, in either form
(`proxy.core.summary`):

- the prefix form: the conversation's messages written back as they were forwarded
  (`proxy.core.anthropic.messages_body`, thinking blocks and signatures included), then the
  closing user message, which carries the one cache breakpoint: the provider reads the
  conversation from its prompt cache up to it. `tool_choice` is `none` (the tools stay: they
  are part of the cached prefix). No `thinking` and no `temperature`: a summary is plain text,
  and a thinking request would spend its budget before writing it;
- the transcript form: `summary_request`'s chat body with its system message as `system`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core.anthropic import messages_body
from proxy.core.anthropic_cache import limited
from proxy.core.summary import Prefix, prefix_closing, prefix_messages

EPHEMERAL: Final = {"type": "ephemeral"}
_PREFIX_FIELDS: Final = ("model", "tools", "system")
"""What of the conversation's chat view shapes its cached prompt besides the messages (a
`system` the view carried as it was, being no string or blocks)."""


def messages_prefix_request(
    prefix: Prefix, *, previous: str | None, max_tokens: int
) -> dict[str, Any]:
    """The summary request in the prefix form, as a Messages body (see the module's doc)."""
    closing = prefix_closing(prefix, previous=previous, max_tokens=max_tokens)
    fields = {k: v for k, v in prefix.fields.items() if k in _PREFIX_FIELDS}
    body = messages_body(fields, prefix_messages(prefix, closing))
    body["messages"][-1] = _marked(body["messages"][-1])
    body["max_tokens"] = max_tokens
    if prefix.fields.get("tools"):
        body["tool_choice"] = {"type": "none"}
    return limited(body)  # the closing's breakpoint is the newest: the earliest give way


def _marked(message: Mapping[str, Any]) -> dict[str, Any]:
    """`message` (the closing user message) with a cache breakpoint on its last block."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    return {**message, "content": blocks}


def messages_transcript_request(chat: Mapping[str, Any]) -> dict[str, Any]:
    """A transcript-form summary request (`proxy.core.summary.summary_request`'s chat body)
    as a Messages body: its system message as `system`, the rest as they are."""
    messages = chat["messages"]
    system = [m["content"] for m in messages if m["role"] == "system"]
    body = {k: v for k, v in chat.items() if k != "messages"}
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = [
        {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
    ]
    return body
