"""Messages API bodies and an `anthropic` client for the mock upstream's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message

from proxy.mock_upstream import MockUpstream
from tests.servers import serve

MODEL = "claude-sonnet-4-6"
VERSION = "2023-06-01"
READ_FILE = {
    "name": "read_file",
    "description": "Read a file of the repository.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
EPHEMERAL = {"type": "ephemeral"}
Block = dict[str, Any]
Body = dict[str, Any]


@asynccontextmanager
async def sdk(upstream: MockUpstream) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The official async client on the mock, served on loopback (no retries)."""
    async with (
        serve(upstream.app) as base_url,
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=base_url, max_retries=0) as client,
    ):
        yield client


@asynccontextmanager
async def raw(upstream: MockUpstream) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(upstream.app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield http


def headers(**extra: str) -> dict[str, str]:
    """What the SDK sends by default: a key and the API version."""
    return {"x-api-key": "sk-ant-test", "anthropic-version": VERSION, **extra}


def request(*messages: Block, **fields: Any) -> Body:
    return {"model": MODEL, "max_tokens": 1024, "messages": list(messages), **fields}


def user(*content: Block | str) -> Block:
    if len(content) == 1 and isinstance(content[0], str):
        return {"role": "user", "content": content[0]}
    return {"role": "user", "content": [_block(part) for part in content]}


def assistant(*content: Block | str) -> Block:
    return {"role": "assistant", "content": [_block(part) for part in content]}


def _block(part: Block | str) -> Block:
    return {"type": "text", "text": part} if isinstance(part, str) else part


def text(value: str, **fields: Any) -> Block:
    return {"type": "text", "text": value, **fields}


def tool_use(ident: str, path: str = "src/app.py") -> Block:
    return {"type": "tool_use", "id": ident, "name": "read_file", "input": {"path": path}}


def tool_result(ident: str, content: str = "import os\nimport sys") -> Block:
    return {"type": "tool_result", "tool_use_id": ident, "content": content}


def long_text(words: int, seed: str = "fact") -> str:
    return " ".join(f"{seed}{i} is recorded in notes/{seed}{i}.md" for i in range(words))


def echoed(message: Message) -> Block:
    """The assistant message as a client sends it back."""
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }


def results_for(message: Message, output: str = "import os") -> Block:
    """The user message answering every call of `message`."""
    calls = [block.id for block in message.content if block.type == "tool_use"]
    return {"role": "user", "content": [tool_result(ident, output) for ident in calls]}


def error_of(raised: pytest.ExceptionInfo[anthropic.APIStatusError]) -> Any:
    """The `error` object of a refusal's body."""
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    return body["error"]
