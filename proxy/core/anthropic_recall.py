"""The rounds of a recall on the Messages API: the proxy's `tool_use` blocks read out of an
answer, the next round asked, and the client given one message (`proxy.core.recall_rounds`
does the same for chat completions and the Responses API).

The proxy's calls are `tool_use` blocks named `context_recall`. The next round carries the
whole assistant turn as the model wrote it (thinking blocks and their signatures first, byte
for byte: the API verifies them, and a tool-use loop's turn must open with its thinking),
then a user message of `tool_result` blocks, one per call, in the calls' order: the API pairs
every `tool_use` with a result at the start of the next user message.

The client gets one message: every round's blocks in the order the model wrote them, less
the proxy's calls and the thinking that led only to them. A run of thinking blocks goes with
the block that follows it: to the client before its next block that is not the proxy's call
(so a message that ends in the client's calls still opens with its thinking, as the API
requires when it comes back), nowhere when only the proxy's calls followed and the rounds went
on (it reasoned about the proxy's tool, which the client must never see). `stop_reason` is
`end_turn` when only the proxy's calls made it `tool_use`; the usage is every round's added
up. An answer that calls the client's tools too goes back with the proxy's calls taken out
(the rounds stop: the client must run its own).

A stream is rewritten event by event (`MessagesStream`): the first round's `message_start`
opens the client's message, the later rounds' are dropped; each content block relayed gets
the next index the client sees (a thinking block's events are held until the next block
starts, as above; the proxy's calls get no index, and none of their events is relayed); one
`message_delta` (with the summed usage) and one `message_stop` close it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core.anthropic_usage import PROMPT_PARTS
from proxy.core.recall import argument_id, argument_query, is_ours
from proxy.core.recall_rounds import Call, summed

JSON = dict[str, Any]

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
THINKING: Final = frozenset({"thinking", "redacted_thinking"})


def _is_use(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _ours(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use" and is_ours(block)


def _call(block: Mapping[str, Any], arguments: str | None = None) -> Call:
    """The call a `tool_use` block makes (`arguments`: its input's JSON as streamed)."""
    given = _COMPACT.encode(block.get("input")) if arguments is None else arguments
    ident = block.get("id")
    return Call(ident if isinstance(ident, str) else "", argument_id(given), argument_query(given))


def messages_calls(answer: Mapping[str, Any]) -> tuple[list[Call], bool]:
    """The proxy's calls in a message's content, and whether it calls the client's too."""
    content = answer.get("content")
    if not isinstance(content, list):
        return [], False
    ours = [_call(block) for block in content if _ours(block)]
    theirs = any(_is_use(block) and not _ours(block) for block in content)
    return ours, theirs


def messages_continued(
    body: Mapping[str, Any], content: Sequence[Any], results: Sequence[tuple[Call, str]]
) -> JSON:
    """`body` asked again with the round's assistant turn (every block as it came) and a
    user message answering the proxy's calls."""
    turn = {"role": "assistant", "content": list(content)}
    answers = [
        {"type": "tool_result", "tool_use_id": call.call_id, "content": text}
        for call, text in results
    ]
    messages = [*body.get("messages", []), turn, {"role": "user", "content": answers}]
    return {**body, "messages": messages}


def earlier_content(content: Sequence[Any]) -> list[Any]:
    """What a round whose calls were all the proxy's leaves for the client: its blocks, less
    the proxy's calls and the thinking that led only to them."""
    return _kept(content, last=False)


def _kept(content: Sequence[Any], *, last: bool) -> list[Any]:
    """`content` without the proxy's calls; a run of thinking blocks kept when a block of the
    client's follows it (or, `last`, when nothing else does: no round follows)."""
    out: list[Any] = []
    held: list[Any] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") in THINKING:
            held.append(block)
        elif not _ours(block):
            out += [*held, block]
            held = []
    return [*out, *held] if last else out


def messages_final(
    answer: Mapping[str, Any], earlier: Sequence[Any], usages: Sequence[Mapping[str, Any] | None]
) -> JSON:
    """The message the client gets: the earlier rounds' blocks, then the last one's, without
    the proxy's calls, with every round's usage."""
    final = copy.deepcopy(dict(answer))
    content = final.get("content")
    if isinstance(content, list):
        final["content"] = [*earlier, *_kept(content, last=True)]
        if final.get("stop_reason") == "tool_use" and not any(map(_is_use, final["content"])):
            final["stop_reason"] = "end_turn"
    usage = summed(usages)
    if usage is not None:
        final["usage"] = usage
    return final


@dataclass(slots=True)
class MessagesStream:
    """Rewrites a Messages API stream over its rounds, as `ChatStream` does a chat one
    (`feed` each event's JSON, then `end_round`, and `finish` once no round follows)."""

    response_id: str | None = None
    """The first round's message id: the later rounds continue its message."""
    _round: int = 0
    _next: int = 0
    _indexes: dict[int, int] = field(default_factory=dict)
    """Upstream block index -> the client's, for the blocks relayed."""
    _ours: list[int] = field(default_factory=list)
    """The upstream indexes of this round's calls of the proxy's."""
    _held: list[int] = field(default_factory=list)
    """The thinking blocks held until the next block starts, in order."""
    _held_events: list[JSON] = field(default_factory=list)
    _blocks: dict[int, JSON] = field(default_factory=dict)
    """This round's blocks as they are built (for the next round's assistant turn)."""
    _inputs: dict[int, str] = field(default_factory=dict)
    """The `input_json_delta` pieces of this round's tool blocks, by index."""
    _theirs: bool = False
    _delta: JSON | None = None
    _stop: JSON | None = None
    _usage: list[Mapping[str, Any] | None] = field(default_factory=list)
    _round_usage: JSON | None = None
    _undo: tuple[Any, ...] | None = None

    def feed(self, event: JSON) -> list[JSON]:
        """The events to relay for this one."""
        kind = event.get("type")
        if kind == "message_start":
            return self._started(event)
        if kind == "message_delta":
            self._delta = event
            self._add_usage(event.get("usage"))
            return []
        if kind == "message_stop":
            self._stop = event
            return []
        index = event.get("index")
        if not isinstance(index, int):
            return [event]  # a ping, an error
        if kind == "content_block_start":
            return self._opened(index, event)
        block = self._blocks.get(index)
        if kind == "content_block_delta" and block is not None:
            self._build(index, block, event.get("delta"))
        elif kind == "content_block_stop" and index in self._inputs and block is not None:
            block["input"] = _parsed(self._inputs[index], block.get("input"))
        if index in self._held:
            self._held_events.append(event)
            return []
        client = self._indexes.get(index)  # None: the proxy's call (or a block never opened)
        return [] if client is None else [{**event, "index": client}]

    def _started(self, event: JSON) -> list[JSON]:
        message = event.get("message")
        message = message if isinstance(message, dict) else {}
        self._add_usage(message.get("usage"))
        if self._round:
            return []  # the later rounds continue the first one's message
        if isinstance(message.get("id"), str):
            self.response_id = message["id"]
        return [event]

    def _add_usage(self, usage: object) -> None:
        """A round's usage: `message_start`'s, then `message_delta`'s totals over it."""
        if isinstance(usage, dict):
            given = {k: v for k, v in usage.items() if v is not None}
            self._round_usage = {**(self._round_usage or {}), **given}

    def _opened(self, index: int, event: JSON) -> list[JSON]:
        given = event.get("content_block")
        block = copy.deepcopy(given) if isinstance(given, dict) else {}
        self._blocks[index] = block
        if block.get("type") in ("tool_use", "server_tool_use"):
            self._inputs[index] = ""
        if _ours(block):
            self._ours.append(index)
            return []  # what it held waits for the next block
        if block.get("type") in THINKING:
            self._held.append(index)
            self._held_events.append(event)
            return []
        self._theirs = self._theirs or _is_use(block)
        return [*self._released(), *self._relayed(index, [event])]

    def _released(self) -> list[JSON]:
        """The held thinking blocks' events, relayed: what followed them is the client's."""
        held, events = self._held, self._held_events
        self._held, self._held_events = [], []
        out: list[JSON] = []
        for index in held:
            out += self._relayed(index, [e for e in events if e.get("index") == index])
        return out

    def _relayed(self, index: int, events: list[JSON]) -> list[JSON]:
        client = self._indexes[index] = self._next
        self._next += 1
        return [{**event, "index": client} for event in events]

    def _build(self, index: int, block: JSON, delta: object) -> None:
        """`block` with one more delta: the turn the next round carries is the one the
        model wrote, signatures included."""
        if not isinstance(delta, dict):
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            signature = str(block.get("signature") or "") + str(delta.get("signature", ""))
            block["signature"] = signature
        elif kind == "input_json_delta" and index in self._inputs:
            self._inputs[index] += str(delta.get("partial_json", ""))
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]

    def end_round(self) -> tuple[list[Call], bool]:
        """The round's proxy calls and whether it called the client's tools too."""
        ours = [_call(self._blocks[i], self._inputs.get(i) or None) for i in self._ours]
        return ours, self._theirs

    def continued(self, body: Mapping[str, Any], results: Sequence[tuple[Call, str]]) -> JSON:
        """`body` asked again after this round: its turn, the proxy's calls answered (the
        thinking still held led only to them: it is not relayed)."""
        content = [self._blocks[i] for i in sorted(self._blocks)]
        asked = messages_continued(body, content, results)
        self._undo = (
            self._indexes, self._ours, self._held, self._held_events, self._blocks,
            self._inputs, self._delta, self._stop, self._round_usage,
        )  # fmt: skip
        self._usage.append(self._round_usage)
        self._round += 1
        self._indexes, self._ours, self._held, self._held_events = {}, [], [], []
        self._blocks, self._inputs = {}, {}
        self._delta, self._stop, self._round_usage = None, None, None
        return asked

    def refused(self) -> None:
        """The round `continued` asked for was refused: this one is the last, and its held
        events close the client's stream."""
        if self._undo is not None:
            (
                self._indexes, self._ours, self._held, self._held_events, self._blocks,
                self._inputs, self._delta, self._stop, self._round_usage,
            ) = self._undo  # fmt: skip
            self._usage.pop()
            self._round -= 1
            self._undo = None

    def finish(self, *, with_usage: bool = True) -> list[JSON]:
        """The events that close the client's stream: thinking still held, the last round's
        `message_delta` (`end_turn` when only the proxy's calls made it `tool_use`; after
        several rounds, their usage added up) and `message_stop`. `with_usage` is chat's
        option: a Messages stream always states its usage."""
        out = self._released()
        if self._delta is not None:
            delta = dict(self._delta)
            stopped = delta.get("delta")
            reason = stopped.get("stop_reason") if isinstance(stopped, dict) else None
            if isinstance(stopped, dict) and reason == "tool_use" and not self._theirs:
                delta["delta"] = {**stopped, "stop_reason": "end_turn"}
            usage = self.usage
            if self._usage and usage is not None:
                stated = delta.get("usage")
                stated = stated if isinstance(stated, dict) else {}
                # The client's message started with the first round's input counts: every
                # count is stated again, as the totals of all the rounds.
                extra = [k for k in PROMPT_PARTS if k in usage and k not in stated]
                delta["usage"] = {k: usage.get(k, stated.get(k)) for k in [*stated, *extra]}
            out.append(delta)
        if self._stop is not None:
            out.append(self._stop)
        return out

    @property
    def usage(self) -> JSON | None:
        """The usage of every round so far."""
        return summed([*self._usage, self._round_usage])

    @property
    def first_usage(self) -> Mapping[str, Any] | None:
        """The first round's usage (what the request as estimated cost)."""
        return self._usage[0] if self._usage else self._round_usage


def _parsed(arguments: str, given: object) -> object:
    """A streamed tool block's input: its pieces' JSON (what the block started with when
    none came; the text itself, wrapped, when they are no JSON)."""
    if not arguments:
        return given if given is not None else {}
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return {"arguments": arguments}
