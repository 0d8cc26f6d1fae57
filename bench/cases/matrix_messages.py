"""The matrix's client over Anthropic's Messages API (`MessagesClient`, see `matrix_clients`).

`client.messages.create` with the official `anthropic` SDK, as Claude Code and the Anthropic
SDK send it: the system prompt is `system` (one text block), tools in Anthropic's form
(`input_schema`), the model's content blocks sent back as they came (its signed `thinking`
blocks included, when the cell enables thinking), tool results `tool_result` blocks in the
next user message (a turn's results in one message: roles alternate), a `cache_control`
breakpoint on the system block and on the last block of the last message, moved every
request as Claude Code moves it; `max_tokens` is the output the other APIs' cells reserve by
default, so the budgets agree.
"""

from __future__ import annotations

import json
from typing import Any, Final

from bench.cases.matrix_clients import Call, MatrixClient
from proxy.core import anthropic as anthropic_view
from proxy.core.budget import MAX_DEFAULT_RESERVE_SHARE
from proxy.core.messages import Message, role
from proxy.core.policy import ContextPolicy
from proxy.core.summary import note_of
from proxy.mock_upstream import messages_prompt_tokens

CLAUDE_MODEL: Final = "claude-sonnet-4-6"
"""The model the Messages client asks for, as Claude Code names it: a Claude model, which the
proxy counts approximately and whose window its table says is 200k (the cell's proxy
configures the cell's window for it: `bench/cases/matrix.py`)."""
THINKING_BUDGET: Final = 1_024
"""`thinking.budget_tokens` of a cell that enables thinking: the API's minimum."""
EPHEMERAL: Final = {"type": "ephemeral"}


def anthropic_tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Chat's tool schemas in the Messages API's form: `parameters` as `input_schema`."""
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "input_schema": tool["function"].get("parameters", {"type": "object"}),
        }
        for tool in tools
    ]


def output_reserve(window: int) -> int:
    """The `max_tokens` the Messages client asks for: the output the proxy reserves by
    default for a request of the other APIs' clients (which state none) at `window`."""
    return min(ContextPolicy().output_reserved, int(window * MAX_DEFAULT_RESERVE_SHARE))


def _unmarked(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


class MessagesClient(MatrixClient):
    """The workload over `POST /v1/messages` with the `anthropic` SDK, thinking enabled
    when the cell says so (`CellResult.thinking`)."""

    api = "messages"
    path = "/messages"

    def _head(self) -> None:
        pass  # the system prompt is each request's `system`

    def _user(self, text: str) -> Any:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    def _assistant(self, text: str) -> Any:
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}

    def _result(self, call: Call, output: str) -> Any:
        # One message per result here; `_sent` merges a turn's results into one.
        result = {"type": "tool_result", "tool_use_id": call.id, "content": output}
        return {"role": "user", "content": [result]}

    def _sent(self) -> list[Any]:
        """The history as the client sends it: consecutive messages of one role merged (a
        model call's results in one user message), the breakpoint on the last block."""
        sent: list[Any] = []
        for message in self.outgoing():
            if sent and sent[-1]["role"] == message["role"]:
                sent[-1] = {**sent[-1], "content": [*sent[-1]["content"], *message["content"]]}
            else:
                sent.append(message)
        if sent:
            last = sent[-1]
            content = [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]
            sent[-1] = {**last, "content": content}
        return sent

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": CLAUDE_MODEL,
            "max_tokens": output_reserve(self.cell.window),
            "system": [{"type": "text", "text": self.workload.system, "cache_control": EPHEMERAL}],
            "messages": self._sent(),
        }
        if self.workload.tools:
            body["tools"] = anthropic_tools(self.workload.tools)
        if self.cell.thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": THINKING_BUDGET}
        return body

    async def _complete(self) -> list[Call]:
        body = self._body()
        if self.stream:
            async with self.sdk.messages.stream(**body) as stream:
                self._answered(stream.response.headers)
                message = await stream.get_final_message()
            content = [block.model_dump(exclude_none=True) for block in message.content]
        else:
            raw = await self.sdk.messages.with_raw_response.create(**body)
            self._answered(raw.headers)
            content = json.loads(await raw.read())["content"]  # the blocks as they came
        self.history.append({"role": "assistant", "content": content})
        return [
            Call(block["id"], block["name"], json.dumps(block.get("input", {})))
            for block in content
            if block.get("type") == "tool_use"
        ]

    def _final(self) -> str:
        last = self.history[-1] if self.history else {}
        if last.get("role") != "assistant":
            return ""
        return "".join(b.get("text", "") for b in last["content"] if b.get("type") == "text")

    def history_tokens(self) -> int:
        # As the provider counts the blocks, with our tokenizer.
        return messages_prompt_tokens(self._body(), self.counter)

    def body_tokens(self, body: Any) -> int:
        return messages_prompt_tokens(body, self.counter)

    @staticmethod
    def conversation(body: Any) -> list[Any]:
        # Without the breakpoint the client moves every request: it marks a place in the
        # prompt and is no part of it (the provider's cache reads past it).
        return [
            {**m, "content": [_unmarked(b) for b in m["content"]]}
            if isinstance(m.get("content"), list)
            else m
            for m in body["messages"]
        ]

    @staticmethod
    def seen(body: Any) -> str:
        return json.dumps([body.get("system"), body["messages"]], ensure_ascii=False)

    @staticmethod
    def messages(body: Any) -> list[Message]:
        messages: list[Message] = anthropic_view.chat_view(body)["messages"]
        return [part for message in messages for part in _unmerged(message)]


def _unmerged(message: Message) -> list[Message]:
    """A forwarded user message as the proxy's messages were before the API's alternation
    merged them (`messages_body`): split around each text part that is a note of the
    proxy's (the block between the pinned task and the running turn's ask), so the checks
    read the task, the block and the ask each as its own message, as over chat."""
    content = message.get("content")
    if role(message) != "user" or not isinstance(content, list) or len(content) < 2:
        return [message]
    runs: list[list[Any]] = [[]]
    for part in content:
        if note_of({"role": "user", "content": [part]}) is not None:
            runs += [[part], []]
        else:
            runs[-1].append(part)
    return [{**message, "content": run} for run in runs if run]
