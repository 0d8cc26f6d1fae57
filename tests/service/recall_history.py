"""The conversation the recall round tests send: an agent read six config files, the first
holding a word no later message repeats, and the user asks about them. Its first request is
compacted (the old tool results cleared, each placeholder naming an id); the tests read the
ids from what was forwarded and script the model's next answers with them."""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from proxy.mock_upstream import MockUpstream, Reply, ToolCall
from tests.service.agent_run import TOOLS

WINDOW = 4000
CONTEXT = {"output_reserved": 400, "keep_recent": 4}
RECALL_ID = re.compile(r'context_recall\(id="(rc_[a-z2-7]{10})"\)')
HIDDEN = "lemon-harbour"


def history(question: str = "Which port does the service use?") -> list[Any]:
    messages: list[Any] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read the config files one by one."},
    ]
    for n in range(6):
        call = f"call_{n}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"etc/part_{n}.conf"}),
                        },
                    }
                ],
            }
        )
        lines = [f"option_{i} = some value for part {n} line {i}" for i in range(60)]
        if n == 0:
            lines.insert(3, f"secret_word = {HIDDEN}")
        messages.append({"role": "tool", "tool_call_id": call, "content": "\n".join(lines)})
    messages.append({"role": "assistant", "content": "All files read."})
    messages.append({"role": "user", "content": question})
    return messages


def recall(rid: str, call_id: str = "call_r1") -> ToolCall:
    """The model's call of `context_recall` for `rid`."""
    return ToolCall("context_recall", json.dumps({"id": rid}), id=call_id)


def forwarded_ids(upstream: MockUpstream, index: int = -1) -> list[str]:
    """The recall ids request `index` named, in order."""
    return RECALL_ID.findall(
        json.dumps(upstream.requests[index].json(), ensure_ascii=False).replace('\\"', '"')
    )


def offered_tools(upstream: MockUpstream, index: int) -> list[str]:
    """The names of the tools request `index` offered."""
    body = upstream.requests[index].json()
    return [t.get("function", t).get("name") for t in body.get("tools", [])]


async def compacted_ids(
    sdk: openai.AsyncOpenAI, provider: MockUpstream, messages: list[Any] | None = None
) -> list[str]:
    """Send `messages` (the history by default) once, so that it is compacted, and return the
    ids its placeholders name."""
    provider.queue(Reply(content="Port 8080."))
    await sdk.chat.completions.create(
        model="mock-model", messages=messages or history(), tools=TOOLS
    )
    ids = forwarded_ids(provider)
    assert ids, "the first request was not compacted with recall ids"
    assert "context_recall" in offered_tools(provider, -1)
    return ids
