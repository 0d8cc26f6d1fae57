"""Thinking signatures byte-identical: what the mock issued against what it received.

Anthropic signs each `thinking` block; a block that comes back altered in any byte is
refused, and one dropped from its turn (while the turn stays) breaks the model's reasoning
in a tool loop. The mock's strictness checks a signature against its block's own text, which
a block from another turn would pass (the mock's thinking texts repeat). This judge is the
exact one: `Issued` wraps the mock's app and reads every Messages answer it gives, whole or
streamed, and `judge` finds, for each assistant turn a forwarded request carries, the answer
that turn came from (by its `tool_use` ids, or its text) and compares the thinking blocks
field by field: the same blocks, in the same order, every field the same string.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bench.measures import Tally

THINKING: Final = frozenset({"thinking", "redacted_thinking"})
_DETAILS: Final = 3
"""Misses described in a tally, at most."""


class Issued:
    """An ASGI wrapper of the mock that keeps each `POST .../messages` answer's content."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.contents: list[list[Any]] = []
        """The content blocks of every message the mock answered with, in order."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope.get("type") != "http" or not path.endswith("/messages"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def keep(message: Message) -> None:
            if message.get("type") == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                if not message.get("more_body"):
                    self._read(b"".join(chunks))
            await send(message)

        await self.app(scope, receive, keep)

    def _read(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        content = _streamed(text) if text.lstrip().startswith("event:") else _whole(text)
        if content is not None:
            self.contents.append(content)


def _whole(text: str) -> list[Any] | None:
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        return None
    content = message.get("content") if isinstance(message, dict) else None
    return content if message.get("type") == "message" and isinstance(content, list) else None


def _streamed(text: str) -> list[Any] | None:
    """The content a Messages event stream adds up to (None: it carried no message)."""
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, str] = {}
    started = False
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line.removeprefix("data:"))
        kind, index = event.get("type"), event.get("index", 0)
        if kind == "message_start":
            started = True
        elif kind == "content_block_start":
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta":
            _add(blocks[index], inputs, index, event["delta"])
    for index, partial in inputs.items():
        blocks[index]["input"] = json.loads(partial) if partial else {}
    return [blocks[i] for i in sorted(blocks)] if started else None


def _add(block: dict[str, Any], inputs: dict[int, str], index: int, delta: Any) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta["text"]
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta["signature"]
    elif kind == "input_json_delta":
        inputs[index] = inputs.get(index, "") + delta["partial_json"]


def turn_key(content: Sequence[Any]) -> str:
    """What names an assistant turn whatever became of its thinking: its calls' ids, else
    its text."""
    ids = [b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    if ids:
        return "calls:" + ",".join(str(i) for i in ids)
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "text:" + "\n".join(str(t) for t in texts)


def thinking_of(content: Sequence[Any]) -> list[str]:
    """A turn's thinking blocks, each as its fields' canonical JSON (`cache_control`, a
    marker the client may move, apart)."""
    return [
        json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True)
        for b in content
        if isinstance(b, dict) and b.get("type") in THINKING
    ]


def judge(contents: Sequence[Sequence[Any]], bodies: Sequence[Any]) -> Tally:
    """Of the assistant turns the forwarded `bodies` carry whose answer (in `contents`, what
    the mock issued) opened with thinking, those whose thinking came back identical."""
    issued: dict[str, list[list[str]]] = {}
    for content in contents:
        issued.setdefault(turn_key(content), []).append(thinking_of(content))
    held, judged, details = 0, 0, list[str]()
    for number, body in enumerate(bodies):
        for index, message in enumerate(body.get("messages") or []):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            blocks = message.get("content")
            if not isinstance(blocks, list):
                continue
            sent, options = thinking_of(blocks), issued.get(turn_key(blocks), [])
            if not sent and not any(options):
                continue  # a turn that never thought (or the proxy's own text)
            judged += 1
            if sent in options:
                held += 1
            elif len(details) < _DETAILS:
                what = "dropped" if not sent else ("altered" if options else "never issued")
                details.append(f"request {number + 1}, messages.{index}: thinking {what}")
    return Tally(held, judged, tuple(details))
