"""The rounds of a recall: reading the proxy's calls out of an answer, asking again, and
giving the client one answer as if there had been one round.

When an answer calls `context_recall` (`proxy.core.recall`) and nothing else, the proxy
answers the calls and asks again with the call and its results appended; the client gets
the last answer only, with the usage of every round summed and any text written before a
call kept in front of it. When the answer also calls the client's own tools, the proxy's
calls are taken out and the client's returned. Pure functions on the wire's JSON; the loop
that sends is the service's (`proxy.service.recalls`).

Streams are rewritten event by event (`ChatStream`, `ResponsesStream`): the proxy's call
never reaches the client, the client's calls keep consecutive indexes, and the rounds after
the first continue the first one's response (its id, one finish, one usage, one `[DONE]`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import jsoncodec
from proxy.core.recall import TOOL, argument_id, argument_query, is_ours

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """One `context_recall` call of an answer: its call id and the recall id it asks for."""

    call_id: str
    rid: str | None
    query: str | None = None


def summed(usages: Sequence[Mapping[str, Any] | None]) -> JSON | None:
    """The usage of several rounds as one: every number added up, nested ones too (cached
    tokens, reasoning tokens); None when no round reported any."""
    found = [u for u in usages if isinstance(u, Mapping)]
    if not found:
        return None
    total: JSON = {}
    for usage in found:
        _add(total, usage)
    return total


def _add(total: JSON, usage: Mapping[str, Any]) -> None:
    for key, value in usage.items():
        if isinstance(value, bool):
            total.setdefault(key, value)
        elif isinstance(value, int | float):
            before = total.get(key)
            total[key] = (before if isinstance(before, int | float) else 0) + value
        elif isinstance(value, Mapping):
            inner = total.get(key)
            if not isinstance(inner, dict):
                inner = total[key] = {}  # a round that reported it null had nothing to add
            _add(inner, value)
        else:
            total.setdefault(key, value)


# --- Chat completions ------------------------------------------------------------------------


def chat_message(answer: Mapping[str, Any]) -> JSON | None:
    """The first choice's message of a chat completion, if it has one."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def chat_calls(answer: Mapping[str, Any]) -> tuple[list[Call], bool]:
    """The proxy's calls in a chat completion, and whether it calls the client's tools too."""
    message = chat_message(answer)
    calls = message.get("tool_calls") if message else None
    if not isinstance(calls, list):
        return [], False
    ours = [_chat_call(c) for c in calls if isinstance(c, dict) and is_ours(c)]
    theirs = any(isinstance(c, dict) and not is_ours(c) for c in calls)
    return ours, theirs


def _chat_call(call: Mapping[str, Any]) -> Call:
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    call_id = call.get("id")
    return Call(
        call_id if isinstance(call_id, str) else "",
        argument_id(arguments),
        argument_query(arguments),
    )


def chat_continued(
    body: Mapping[str, Any], answer: Mapping[str, Any], results: Sequence[tuple[Call, str]]
) -> JSON:
    """`body` asked again with the answer's message (its proxy's calls) and their results."""
    message = dict(chat_message(answer) or {"role": "assistant"})
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict) and is_ours(c)]
    asked = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
    asked["role"] = "assistant"
    asked["tool_calls"] = calls
    asked.setdefault("content", None)
    answers = [{"role": "tool", "tool_call_id": c.call_id, "content": text} for c, text in results]
    return {**body, "messages": [*body.get("messages", []), asked, *answers]}


def chat_final(
    answer: Mapping[str, Any], earlier: Sequence[str], usages: Sequence[Mapping[str, Any] | None]
) -> JSON:
    """The answer the client gets: the last round's, without the proxy's calls (its
    `finish_reason` is then "stop" unless the client's calls remain), the text earlier rounds
    wrote in front of its own, and the usage of every round."""
    final = copy.deepcopy(dict(answer))
    message = chat_message(final)
    if message is not None:
        calls = [c for c in message.get("tool_calls") or [] if not is_ours(c)]
        if calls:
            message["tool_calls"] = calls
        else:
            message.pop("tool_calls", None)
            choice = final["choices"][0]
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        before = "".join(earlier)
        if before:
            content = message.get("content")
            message["content"] = before + (content if isinstance(content, str) else "")
    usage = summed(usages)
    if usage is not None:
        final["usage"] = usage
    return final


def chat_text(answer: Mapping[str, Any]) -> str:
    """The text a chat answer wrote (in front of its calls)."""
    message = chat_message(answer)
    content = message.get("content") if message else None
    return content if isinstance(content, str) else ""


@dataclass(slots=True)
class ChatStream:
    """Rewrites a chat completion stream over its rounds (`feed` each event's JSON, then
    `end_round`, and `finish` once no round follows)."""

    response_id: str | None = None
    """The first round's id: the later rounds continue its response."""
    _ours: dict[int, JSON] = field(default_factory=dict)
    _theirs: dict[int, int] = field(default_factory=dict)
    """The client's calls of this round: upstream index -> the index the client sees."""
    _next_index: int = 0
    _text: list[str] = field(default_factory=list)
    _finish: JSON | None = None
    _usage: list[Mapping[str, Any] | None] = field(default_factory=list)
    _round_usage: Mapping[str, Any] | None = None
    _undo: tuple[Any, ...] | None = None
    """The round's state as `continued` found it, for `refused` to bring back."""
    _frame: JSON = field(default_factory=dict)
    """The first chunk's `created` and `model`, for a usage chunk made up at the end."""

    def feed(self, chunk: JSON) -> list[JSON]:
        """The chunks to relay for this one: none when it carried the proxy's call only, or
        what is held back to the end (the finish, the usage)."""
        out = self._fed(chunk)
        return [] if out is None else [out]

    def _fed(self, chunk: JSON) -> JSON | None:
        """What to relay for `chunk`: `chunk` itself when it goes on unchanged (most of a
        stream: its text, the relay then sends the provider's own bytes)."""
        usage = chunk.get("usage")
        chunk = self._framed(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return None if isinstance(usage, dict) else chunk
        first = choices[0]
        if (
            isinstance(first, dict)
            and isinstance(first.get("delta"), dict)
            and "tool_calls" not in first["delta"]
            and not first.get("finish_reason")
        ):
            if isinstance(first["delta"].get("content"), str):
                self._text.append(first["delta"]["content"])
            return chunk  # text, or a role: nothing to take out or hold
        choice = dict(first) if isinstance(first, dict) else {}
        delta = dict(choice.get("delta") or {})
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            kept = [c for c in (self._call(c) for c in calls) if c is not None]
            if kept:
                delta["tool_calls"] = kept
            else:
                delta.pop("tool_calls")
        finished = choice.get("finish_reason")
        if finished:
            # Held to the end (a later round may finish instead); what it carried goes now.
            self._finish = {**chunk, "choices": [{**choice, "delta": {}}, *choices[1:]]}
            choice["finish_reason"] = None
            if not _says_something(delta):
                return None
        choice["delta"] = delta
        if isinstance(calls, list) and not _says_something(delta):
            return None  # it carried the proxy's call only
        return {**chunk, "choices": [choice, *choices[1:]]}

    def _framed(self, chunk: JSON) -> JSON:
        """`chunk` as part of the first round's response, its usage kept for the end."""
        if not self._frame:
            self._frame = {k: chunk[k] for k in ("created", "model") if k in chunk}
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        elif self.response_id is not None and "id" in chunk and chunk["id"] != self.response_id:
            chunk = {**chunk, "id": self.response_id}
        if isinstance(chunk.get("usage"), dict):
            self._round_usage = chunk["usage"]
            chunk = {**chunk, "usage": None}
        return chunk

    def _call(self, call: object) -> JSON | None:
        """A tool-call delta as the client sees it, or None when it is the proxy's."""
        if not isinstance(call, dict):
            return None
        index = call.get("index")
        if not isinstance(index, int):
            # Gemini's OpenAI-compatible API sends no index: a delta with an id opens the next
            # call, one without continues the last one opened.
            last = max([*self._ours, *self._theirs], default=-1)
            index = last + 1 if call.get("id") or last < 0 else last
            call = {**call, "index": index}
        if index in self._ours:
            _append_arguments(self._ours[index], call)
            return None
        if index not in self._theirs:
            if is_ours(call):
                self._ours[index] = {
                    "id": call.get("id", ""),
                    "type": "function",
                    "function": {"name": TOOL, "arguments": ""},
                }
                _append_arguments(self._ours[index], call)
                return None
            self._theirs[index] = self._next_index
            self._next_index += 1
        return {**call, "index": self._theirs[index]}

    def end_round(self) -> tuple[list[Call], bool]:
        """The round's proxy calls and whether it called the client's tools too; the next
        round (if any) starts with no calls seen."""
        ours = [_chat_call(self._ours[i]) for i in sorted(self._ours)]
        return ours, bool(self._theirs)

    def continued(self, body: Mapping[str, Any], results: Sequence[tuple[Call, str]]) -> JSON:
        """`body` asked again after this round: its text and the proxy's calls, answered."""
        calls = [self._ours[i] for i in sorted(self._ours)]
        message = {"role": "assistant", "content": "".join(self._text) or None, "tool_calls": calls}
        answers = [{"role": "tool", "tool_call_id": c.call_id, "content": t} for c, t in results]
        self._undo = (self._ours, self._theirs, self._text, self._finish, self._round_usage)
        self._usage.append(self._round_usage)
        self._ours, self._theirs, self._text = {}, {}, []
        self._finish, self._round_usage = None, None
        return {**body, "messages": [*body.get("messages", []), message, *answers]}

    def refused(self) -> None:
        """The round `continued` asked for was refused: this one is the last, and its held
        finish and usage close the client's stream."""
        if self._undo is not None:
            self._ours, self._theirs, self._text, self._finish, self._round_usage = self._undo
            self._usage.pop()
            self._undo = None

    def finish(self, *, with_usage: bool) -> list[JSON]:
        """The chunks that close the client's stream: the last finish (as "stop" when only
        the proxy's calls were left to finish it) and, when the client asked for it, one usage
        chunk for every round."""
        out: list[JSON] = []
        if self._finish is not None:
            finish = self._finish
            choice = dict(finish["choices"][0])
            if choice.get("finish_reason") == "tool_calls" and not self._theirs:
                choice["finish_reason"] = "stop"
            out.append({**finish, "choices": [choice, *finish["choices"][1:]]})
        usage = summed([*self._usage, self._round_usage])
        if with_usage and usage is not None:
            out.append(
                {
                    "id": self.response_id,
                    "object": "chat.completion.chunk",
                    "created": self._frame.get("created", 0),
                    "model": self._frame.get("model", ""),
                    "choices": [],
                    "usage": usage,
                }
            )
        return out

    @property
    def usage(self) -> JSON | None:
        """The usage of every round so far."""
        return summed([*self._usage, self._round_usage])

    @property
    def first_usage(self) -> Mapping[str, Any] | None:
        """The first round's usage (what the request as estimated cost)."""
        return self._usage[0] if self._usage else self._round_usage


def _says_something(delta: Mapping[str, Any]) -> bool:
    return any(value not in (None, "", []) for value in delta.values())


def _append_arguments(call: JSON, delta: Mapping[str, Any]) -> None:
    if isinstance(delta.get("id"), str) and not call.get("id"):
        call["id"] = delta["id"]
    function = delta.get("function")
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        call["function"]["arguments"] += function["arguments"]


# --- The Responses API -----------------------------------------------------------------------


def responses_calls(answer: Mapping[str, Any]) -> tuple[list[Call], bool]:
    """The proxy's calls in a response's output, and whether it calls the client's too."""
    output = answer.get("output")
    if not isinstance(output, list):
        return [], False
    calls = [i for i in output if isinstance(i, dict) and i.get("type") == "function_call"]
    ours = [_item_call(i) for i in calls if is_ours(i)]
    theirs = any(
        isinstance(i, dict) and i.get("type") in _CLIENT_CALLS and not is_ours(i) for i in output
    )
    return ours, theirs


# Output items the client must act on (a provider's own tools, such as `web_search_call`, it
# ran itself).
_CLIENT_CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_approval_request",
    }
)


def _item_call(item: Mapping[str, Any]) -> Call:
    call_id = item.get("call_id")
    arguments = item.get("arguments")
    return Call(
        call_id if isinstance(call_id, str) else "",
        argument_id(arguments),
        argument_query(arguments),
    )


def responses_continued(
    body: Mapping[str, Any], output: Sequence[Any], results: Sequence[tuple[Call, str]]
) -> JSON:
    """`body` asked again with this round's output (reasoning items and their encrypted
    content included, as the provider requires them before the call) and the results."""
    given = body.get("input")
    items: list[Any] = (
        [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    )
    carried = [_as_input(i) for i in output if isinstance(i, dict)]
    outputs = [
        {"type": "function_call_output", "call_id": c.call_id, "output": text}
        for c, text in results
    ]
    return {**body, "input": [*items, *carried, *outputs]}


def _as_input(item: Mapping[str, Any]) -> JSON:
    """An output item as the next request's input: the same item, less what only an output
    reports (its status)."""
    return {k: v for k, v in item.items() if k != "status" or item.get("type") != "reasoning"}


def responses_final(
    answer: Mapping[str, Any],
    earlier: Sequence[Any],
    usages: Sequence[Mapping[str, Any] | None],
) -> JSON:
    """The response the client gets: the last round's output, after the messages earlier
    rounds wrote (their reasoning and the proxy's calls left out: a reasoning item must be
    followed by what it reasoned for), without the proxy's calls, with every round's usage."""
    final = without_our_tool(copy.deepcopy(dict(answer)))
    output = final.get("output")
    if isinstance(output, list):
        kept = [i for i in output if not (isinstance(i, dict) and is_ours(i))]
        if len(kept) < len(output):
            kept = _without_orphan_reasoning(kept)
        final["output"] = [*earlier, *kept]
    usage = summed(usages)
    if usage is not None:
        final["usage"] = usage
    return final


def without_our_tool(response: Mapping[str, Any]) -> JSON:
    """A Responses API response object without the proxy's tool in the `tools` it echoes
    (the client offered only its own)."""
    tools = response.get("tools")
    if not isinstance(tools, list):
        return dict(response)
    return {**response, "tools": [t for t in tools if not (isinstance(t, dict) and is_ours(t))]}


def earlier_output(output: Sequence[Any]) -> list[Any]:
    """What a round whose calls were all the proxy's leaves for the client: its messages."""
    return [i for i in output if isinstance(i, dict) and i.get("type") == "message"]


def _without_orphan_reasoning(items: list[Any]) -> list[Any]:
    """`items` without a trailing reasoning item (its call was the proxy's, taken out)."""
    while items and isinstance(items[-1], dict) and items[-1].get("type") == "reasoning":
        items = items[:-1]
    return items


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (orjson's: a streamed answer's every event is written again)."""
    return jsoncodec.dumps(value)


@dataclass(slots=True)
class ResponsesStream:
    """Rewrites a Responses API stream over its rounds, as `ChatStream` does a chat one.

    Output items get the indexes the client sees (the proxy's calls have none); a reasoning
    item is held until the item it reasoned for begins (it goes with the proxy's call, or is
    relayed before the client's item); sequence numbers run on across the rounds; the later
    rounds' opening events are dropped, and one `response.completed` closes the stream, with
    the items the client got and every round's usage.
    """

    response_id: str | None = None
    _round: int = 0
    _sequence: int = 0
    _next: int = 0
    _indexes: dict[int, int | None] = field(default_factory=dict)
    """Upstream output index -> the client's (None: the proxy's call, or held)."""
    _held: list[JSON] = field(default_factory=list)
    _held_index: int | None = None
    _output: list[JSON] = field(default_factory=list)
    """This round's output items (for the next round's input)."""
    _ours: list[JSON] = field(default_factory=list)
    _theirs: bool = False
    _relayed: dict[int, JSON] = field(default_factory=dict)
    """The items the client got, by its index."""
    _completed: JSON | None = None
    _usage: list[Mapping[str, Any] | None] = field(default_factory=list)
    _round_usage: Mapping[str, Any] | None = None
    _undo: tuple[Any, ...] | None = None

    def feed(self, event: JSON) -> list[JSON]:
        """The events to relay for this one."""
        kind = event.get("type")
        if kind in _OPENING:
            return self._opening(event)
        if kind in _CLOSING:
            self._completed = event
            return []
        index = event.get("output_index")
        if not isinstance(index, int):
            return [self._numbered(event)]
        if kind == "response.output_item.added":
            return self._added(index, event)
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self._output.append(event["item"])
        if index == self._held_index:
            self._held.append(event)
            return []
        client = self._indexes.get(index)
        if client is None:
            if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
                self._ours.append(event["item"])
            return []
        if kind == "response.output_item.done":
            self._relayed[client] = event["item"]
        return [self._numbered({**event, "output_index": client})]

    def _opening(self, event: JSON) -> list[JSON]:
        """The first round's opening events; the later rounds' are dropped (they continue
        the first one's response)."""
        if self._round:
            return []
        response = event.get("response")
        if self.response_id is None and isinstance(response, dict):
            self.response_id = response.get("id")
        return [self._numbered(event)]

    def _added(self, index: int, event: JSON) -> list[JSON]:
        item = event.get("item")
        item = item if isinstance(item, dict) else {}
        if is_ours(item):
            self._indexes[index] = None
            self._held, self._held_index = [], None  # its reasoning goes with it
            return []
        out = self._released()
        if item.get("type") == "reasoning":
            self._indexes[index] = None
            self._held, self._held_index = [event], index
            return out
        self._theirs = self._theirs or item.get("type") in _CLIENT_CALLS
        return [*out, *self._relay(index, [event])]

    def _released(self) -> list[JSON]:
        """The held reasoning item's events, relayed: what followed it is not the proxy's."""
        if self._held_index is None:
            return []
        index, held = self._held_index, self._held
        self._held, self._held_index = [], None
        return self._relay(index, held)

    def _relay(self, index: int, events: list[JSON]) -> list[JSON]:
        client = self._indexes[index] = self._next
        self._next += 1
        out = []
        for event in events:
            if event.get("type") == "response.output_item.done":
                self._relayed[client] = event["item"]
            out.append(self._numbered({**event, "output_index": client}))
        return out

    def _numbered(self, event: JSON) -> JSON:
        numbered = {**event}
        if "sequence_number" in event:
            numbered["sequence_number"] = self._sequence
            self._sequence += 1
        response = event.get("response")
        if isinstance(response, dict):
            response = without_our_tool(response)
            if self.response_id is not None:
                response = {**response, "id": self.response_id}
            numbered["response"] = response
        return numbered

    def end_round(self) -> tuple[list[Call], bool]:
        """The round's proxy calls and whether it called the client's tools too."""
        if isinstance(self._completed, dict):
            response = self._completed.get("response")
            usage = response.get("usage") if isinstance(response, dict) else None
            self._round_usage = usage if isinstance(usage, dict) else None
        return [_item_call(i) for i in self._ours], self._theirs

    def continued(self, body: Mapping[str, Any], results: Sequence[tuple[Call, str]]) -> JSON:
        """`body` asked again after this round: its output, the proxy's calls answered."""
        asked = responses_continued(body, self._output, results)
        self._undo = (
            self._indexes, self._output, self._ours, self._held, self._held_index,
            self._completed, self._round_usage,
        )  # fmt: skip
        self._usage.append(self._round_usage)
        self._round += 1
        self._indexes, self._output, self._ours = {}, [], []
        self._held, self._held_index = [], None
        self._completed, self._round_usage = None, None
        return asked

    def refused(self) -> None:
        """The round `continued` asked for was refused: this one is the last, and its held
        `response.completed` closes the client's stream."""
        if self._undo is not None:
            (
                self._indexes, self._output, self._ours, self._held, self._held_index,
                self._completed, self._round_usage,
            ) = self._undo  # fmt: skip
            self._usage.pop()
            self._round -= 1
            self._undo = None

    def finish(self, *, with_usage: bool = True) -> list[JSON]:
        """The events that close the client's stream: a reasoning item still held, then the
        one `response.completed`, with the items the client got and every round's usage."""
        out = self._released()
        if self._completed is None:
            return out
        completed = dict(self._completed)
        response = completed.get("response")
        if isinstance(response, dict):
            response = {**response, "output": [self._relayed[i] for i in sorted(self._relayed)]}
            usage = self.usage
            if usage is not None:
                response["usage"] = usage
            completed["response"] = response
        return [*out, self._numbered(completed)]

    @property
    def usage(self) -> JSON | None:
        return summed([*self._usage, self._round_usage])

    @property
    def first_usage(self) -> Mapping[str, Any] | None:
        return self._usage[0] if self._usage else self._round_usage


_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_CLOSING = frozenset({"response.completed", "response.incomplete", "response.failed"})
