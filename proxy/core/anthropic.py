"""Messages API bodies (`POST /v1/messages`) as the chat messages the core compacts, and back.

The core knows one conversation model: chat messages cut into units (`proxy.core.units`).
`chat_view` reads a Messages body into that model and `messages_body` writes the messages
the core decided to forward back into a Messages body, as `proxy.core.responses` does for
the Responses API. The mapping keeps the API's rules inside the core's units:

- `system` (a string or text blocks) becomes the leading system message, marked `SYSTEM`
  ("_system"): counted and kept as the fixed head, like a chat system prompt. `tools` stay
  in the view as they are: the counter prices each as its compact JSON, a fixed cost.
- Consecutive assistant messages (the API merges them into one turn) become one assistant
  message: its `tool_use` blocks its `tool_calls`, every other block its content. A turn is
  one unit, so a `thinking` or `redacted_thinking` block never parts from what follows it.
- A user message's leading `tool_result` blocks become one `tool` message each, answering
  its call: with the assistant message before them, one tool exchange unit (parallel calls
  included). What follows them (text, images, documents) is one user message, a unit of its
  own. A `tool_result` after other blocks is left where it is: the API refuses it, so the
  core sees an unanswered call and leaves the conversation as it came (malformed input is
  the client's to fix).
- `role: "system"` messages inside `messages` (a beta Claude Code uses) stay system
  messages: instructions, never compacted.
- Anything else (a message that is no object, an unknown role, content that is neither a
  string nor a list) is a stray carried whole: the core then compacts nothing.

Content parts: a text block is its own chat part (`{"type": "text", "text": ...}` plus its
other fields), so the core reads its words; every other block is wrapped in a `BLOCK` part,
which the counter prices by `proxy.core.anthropic_count`. What a message was made of, where
its parts do not say it, rides along under private keys the core ignores (as `ITEMS` in
responses.py): `SOURCE` ("_source") holds an assistant turn's messages and a tool message's
`tool_result` block (its `content` left None: the message's content is it), `FIELDS`
("_fields") a message's fields other than `role` and `content`, if it has any. The blocks
are the client's own objects, never changed.

`cache_control` is taken out of every block the view carries. Clients move their breakpoint
every request (Claude Code marks the last block of the last message), so a message that
carried one would not be the same message on the next request, and no checkpoint would
match it; nor may a marker stored with a checkpoint come back on a later request. The view
keeps the request's own markers apart (`MARKS`), and `messages_body` puts each back on the
block it was on when that block is forwarded (the very block of this request, or the
block of a checkpoint's copy of its whole message: `proxy.core.anthropic_cache`).

`messages_body` writes what the core kept and enforces what the API requires:

- roles alternate: adjacent user (or assistant) content is merged into one message, as the
  API itself merges it, so a note the core placed as either role, or user content next to
  tool results, reads as the API would read it. A note (a summary or an omission marker,
  which the core may place as an assistant message where roles would not alternate) is
  always user text: in the assistant's voice the model would take it for its own words, and
  a trailing assistant message is a prefill. System messages and strays are no side: they
  are never merged across;
- the first message is a user's: when the core's result starts with an assistant turn, a
  user message saying earlier turns are not shown (`CONTINUED`) opens it;
- at most `MAX_BREAKPOINTS` blocks carry `cache_control` (tools, system, messages, in that
  order). Past four the earliest go: a later breakpoint caches the longer prefix, the one an
  agent's next request reads, and the client's newest one (on its last message) is the
  one that moves with the conversation; a marker that came back on an equal earlier block
  is also the earlier one;
- a `tool_result` stays right after its `tool_use`: units are kept or dropped whole.

Unchanged messages go back as they came (round trip without compaction: the same body, up
to the API's own merging of adjacent same-role messages). A message the core changed (a
trimmed tool result, a note merged into a user message) keeps its other fields and blocks.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core.anthropic_cache import Marks, limited
from proxy.core.anthropic_count import BLOCK
from proxy.core.messages import Message, tool_calls
from proxy.core.summary import note_of
from proxy.errors import InvalidRequestError

SYSTEM: Final = "_system"
"""The private key marking the system message that stands for the body's `system`."""
SOURCE: Final = "_source"
"""The private key under which a message carries the blocks or messages it was made of."""
FIELDS: Final = "_fields"
"""The private key for an original message's fields other than `role` and `content`."""
MARKS: Final = "_breakpoints"
"""The view's private field: the request's `cache_control` blocks (see the module doc)."""
PRIVATE: Final = frozenset({SYSTEM, SOURCE, FIELDS})
CONTINUED: Final = "[Earlier turns of this conversation are not shown here.]"
"""Opens a conversation the core's result would start with an assistant turn."""
PROVIDER_EDITS: Final = ("clear_tool_uses", "compact_")
"""`context_management` edits that clear or compact: the provider then edits the history."""

_SIDES: Final = ("user", "assistant")
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def chat_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion body a Messages body stands for (see the module's doc).

    Raises `InvalidRequestError` when `messages` is missing or not an array: there is no
    conversation to read.
    """
    given = body.get("messages")
    if not isinstance(given, list):
        what = "missing" if given is None else "not an array"
        raise InvalidRequestError(f"messages: Field required to be an array ({what}).")
    view = {k: v for k, v in body.items() if k not in ("system", "messages")}
    marks: list[list[Any]] = []
    messages: list[Message] = []
    system = body.get("system")
    if isinstance(system, str):
        messages.append({"role": "system", "content": system, SYSTEM: True})
    elif isinstance(system, list):
        blocks = [_strip(block, marks) for block in system]
        messages.append({"role": "system", "content": _parts(blocks), SYSTEM: True})
    elif system is not None:
        view["system"] = system  # not a string or blocks: carried along, never compacted
    messages += to_messages(given, marks)
    view["messages"] = messages
    if marks:
        view[MARKS] = marks
    return view


def to_messages(messages: Sequence[Any], marks: list[list[Any]] | None = None) -> list[Message]:
    """Chat messages for a Messages API `messages` array. `marks` collects the blocks that
    carried `cache_control`, as `[stripped, original, source]` (see `chat_view`)."""
    found = [] if marks is None else marks
    out: list[Message] = []
    turn: list[Any] = []
    for message in messages:
        if _role(message) == "assistant" and isinstance(message.get("content"), str | list):
            turn.append(_stripped(message, found))
            continue
        if turn:
            out.append(_assistant(turn))
            turn = []
        out += _others(message, found)
    if turn:
        out.append(_assistant(turn))
    return out


def _role(message: object) -> str | None:
    if isinstance(message, dict) and isinstance(message.get("role"), str):
        role: str = message["role"]
        return role
    return None


def _fields(message: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "content")}


def _with_fields(message: Message, original: Mapping[str, Any]) -> Message:
    fields = _fields(original)
    return {**message, FIELDS: fields} if fields else message


def _others(message: Any, marks: list[list[Any]]) -> list[Message]:
    """A user or system message, or a stray."""
    role = _role(message)
    content = message.get("content") if role is not None else None
    if role not in ("user", "system") or not isinstance(content, str | list):
        return [{"content": [{"type": BLOCK, "block": message}], SOURCE: message}]
    if isinstance(content, str):
        return [_with_fields({"role": role, "content": content}, message)]
    blocks = [_strip(block, marks) for block in content]
    answered = 0
    if role == "user":
        while answered < len(blocks) and _is_type(blocks[answered], "tool_result"):
            answered += 1
    out = [_tool(blocks[i], marks) for i in range(answered)]
    if answered < len(blocks) or not out:
        out.append({"role": role, "content": _parts(blocks[answered:])})
    out[0] = _with_fields(out[0], message)
    return out


def _tool(block: dict[str, Any], marks: list[list[Any]]) -> Message:
    source = {k: (None if k == "content" else v) for k, v in block.items()}
    for pair in marks:
        if pair[0] is block:
            pair[2] = source  # a result the core changes is rebuilt from its source
    content = block.get("content")
    chat = _parts(content) if isinstance(content, list) else content
    return {
        "role": "tool",
        "tool_call_id": block.get("tool_use_id"),
        "content": chat,
        SOURCE: source,
    }


def _assistant(turn: list[Any]) -> Message:
    return {**_derived(turn), SOURCE: turn}


def _derived(turn: Sequence[Mapping[str, Any]]) -> Message:
    """The chat message an assistant turn (its messages, stripped) stands for."""
    blocks = [block for message in turn for block in _as_blocks(message["content"])]
    calls = [_call(block) for block in blocks if _is_type(block, "tool_use")]
    content: Any = turn[0]["content"]
    if len(turn) > 1 or not isinstance(content, str):
        parts = _parts([block for block in blocks if not _is_type(block, "tool_use")])
        content = parts if parts or not calls else None
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def _call(block: Mapping[str, Any]) -> dict[str, Any]:
    arguments = _COMPACT.encode(block.get("input"))
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": arguments},
    }


def _is_type(block: object, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, list):
        return content
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [] if content is None else [content]


def _parts(blocks: Sequence[Any]) -> list[Any]:
    """Chat parts for blocks: a text block is one itself, any other is wrapped in `BLOCK`."""
    return [
        block if _is_type(block, "text") else {"type": BLOCK, "block": block} for block in blocks
    ]


def _block(part: Any) -> Any:
    """The block a chat part stands for (the inverse of `_parts`)."""
    return part["block"] if _is_type(part, BLOCK) and "block" in part else part


def _stripped(message: dict[str, Any], marks: list[list[Any]]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return message
    blocks = [_strip(block, marks) for block in content]
    same = all(new is old for new, old in zip(blocks, content, strict=True))
    return message if same else {**message, "content": blocks}


def _strip(block: Any, marks: list[list[Any]]) -> Any:
    """`block` without `cache_control` (a `tool_result`'s inner blocks too), recorded in
    `marks` when it had one; `block` itself, unchanged, when it had none."""
    if not isinstance(block, dict):
        return block
    inner = block.get("content") if block.get("type") == "tool_result" else None
    nested = [_unmarked(item) for item in inner] if isinstance(inner, list) else None
    renested = nested is not None and any(
        new is not old for new, old in zip(nested, inner or (), strict=False)
    )
    if "cache_control" not in block and not renested:
        return block
    stripped = {k: v for k, v in block.items() if k != "cache_control"}
    if renested:
        stripped["content"] = nested
    marks.append([stripped, block, None])
    return stripped


def _unmarked(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


# --- Writing back -----------------------------------------------------------------------------


def messages_body(view: Mapping[str, Any], messages: Sequence[Message]) -> dict[str, Any]:
    """The Messages body to send: `view`'s fields with `messages` as `system` and
    `messages` (the inverse of `chat_view`), the request's breakpoints on the blocks kept."""
    body = {k: v for k, v in view.items() if k not in ("messages", MARKS)}
    marks = Marks(view.get(MARKS, ()))
    rest: list[Message] = []
    for message in messages:
        if message.get(SYSTEM) is True and "system" not in body:
            body["system"] = _back(message.get("content"))
        else:
            rest.append(message)
    # The messages the core kept are the very dicts `chat_view` made: their blocks are
    # given back as they came without deriving each message again to find it unchanged.
    given = view.get("messages", ())
    kept = {id(message) for message in given}
    owners = [message for message in given if marks.holds(_carried(message))]
    body["messages"] = to_wire(marks.current(rest, owners), kept=kept, marks=marks)
    return limited(marks.restored(body))


def _carried(message: Message) -> Iterator[object]:
    """The blocks (and a tool message's source) a chat message `to_messages` made carries."""
    content = message.get("content")
    yield from map(_block, content if isinstance(content, list) else ())
    source = message.get(SOURCE)
    yield source
    for turn in source if isinstance(source, list) else ():
        yield from turn["content"] if isinstance(turn["content"], list) else ()


def to_wire(
    messages: Sequence[Message], *, kept: Collection[int] = (), marks: Marks | None = None
) -> list[Any]:
    """A Messages API `messages` array for chat messages made by `to_messages` or by the
    core: roles alternating, a user's first (see the module's doc).

    `kept`: the `id()`s of messages known to be exactly what `to_messages` made.
    """
    found = Marks(()) if marks is None else marks
    segments = [_segment(message, kept, found) for message in messages]
    return _user_first(_merged(segments))


@dataclass(frozen=True, slots=True)
class _Segment:
    """One chat message as Messages content, before adjacent ones of a role are merged."""

    role: str | None
    """"user", "assistant", "system", or None for a stray (`whole`, never merged)."""
    content: Any = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    whole: Any = None
    """The original message, to give back as it came when it stands alone."""


def _segment(message: Message, kept: Collection[int], marks: Marks) -> _Segment:
    role = message.get("role")
    source = message.get(SOURCE)
    given = message.get(FIELDS)
    fields = given if isinstance(given, dict) else {}
    if role == "tool":
        return _Segment("user", [_tool_result(message, marks)], fields)
    if role == "assistant" and isinstance(source, list) and source:
        return _turn(message, source, kept)
    if role == "assistant" and note_of(message) is None:
        return _Segment("assistant", _made_turn(message), fields)
    if role not in ("user", "assistant", "system") and source is not None:
        return _Segment(None, whole=source)
    # A note the core wrote is user text, whichever role it placed it in.
    return _Segment("system" if role == "system" else "user", _back(message.get("content")), fields)


def _public(message: Message) -> Message:
    return {k: v for k, v in message.items() if k not in PRIVATE}


def _turn(message: Message, source: list[Any], kept: Collection[int]) -> _Segment:
    """An assistant turn `to_messages` made: its messages as they came when unchanged."""
    fields = _fields(source[0])
    if id(message) in kept or _derived(source) == _public(message):
        if len(source) == 1:
            return _Segment("assistant", source[0]["content"], fields, whole=source[0])
        return _Segment("assistant", [b for m in source for b in _as_blocks(m["content"])], fields)
    # Changed (the core cuts only a turn whose content is a string): its blocks from the
    # new content, then its calls, each the original `tool_use` block.
    uses = {
        block.get("id"): block
        for m in source
        for block in _as_blocks(m["content"])
        if _is_type(block, "tool_use")
    }
    calls = [uses.get(call.get("id")) or _tool_use(call) for call in tool_calls(message)]
    content = message.get("content")
    if not calls and isinstance(content, str):
        return _Segment("assistant", content, fields)
    return _Segment("assistant", [*map(_block, _as_blocks(content)), *calls], fields)


def _made_turn(message: Message) -> Any:
    """An assistant message the core wrote (not a note): its text, then its calls."""
    calls = [_tool_use(call) for call in tool_calls(message)]
    content = message.get("content")
    if not calls and isinstance(content, str):
        return content
    return [*map(_block, _as_blocks(content)), *calls]


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name, arguments = function.get("name"), function.get("arguments")
    return {"type": "tool_use", "id": call.get("id"), "name": name, "input": _input(arguments)}


def _input(arguments: object) -> Any:
    """A call's `input` object from its JSON `arguments` (`{}` when they are no object)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_result(message: Message, marks: Marks) -> Any:
    content = message.get("content")
    back = _back(content)
    source = message.get(SOURCE)
    if isinstance(source, dict):
        # In the block's own key order, its content where it was.
        block = {k: (back if k == "content" else v) for k, v in source.items()}
        if "content" not in source and content is not None:
            block["content"] = back
        return marks.rebuilt(source, block)
    made = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
    return made if content is None else {**made, "content": back}


def _back(content: Any) -> Any:
    return [_block(part) for part in content] if isinstance(content, list) else content


def _merged(segments: Sequence[_Segment]) -> list[Any]:
    """One message per run of adjacent segments of one side (user or assistant)."""
    out: list[Any] = []
    run: list[_Segment] = []
    for segment in segments:
        if run and segment.role in _SIDES and segment.role == run[-1].role:
            run.append(segment)
            continue
        if run:
            out.append(_joined(run))
        run = [segment]
    if run:
        out.append(_joined(run))
    return out


def _joined(run: Sequence[_Segment]) -> Any:
    first = run[0]
    if len(run) == 1 and first.whole is not None:
        return first.whole
    if len(run) == 1:
        content = first.content
    else:
        content = [block for segment in run for block in _as_blocks(segment.content)]
    fields = {k: v for segment in run for k, v in segment.fields.items()}
    return {"role": first.role, **fields, "content": content}


def _user_first(messages: list[Any]) -> list[Any]:
    """`messages`, opened by a user message when the first turn is the assistant's."""
    for index, message in enumerate(messages):
        role = _role(message)
        if role == "user":
            return messages
        if role == "assistant":
            opening = {"role": "user", "content": [{"type": "text", "text": CONTINUED}]}
            return [*messages[:index], opening, *messages[index:]]
    return messages


# --- Around the conversation ------------------------------------------------------------------


def readable(messages: Sequence[Message]) -> list[Message]:
    """`messages` without the private keys: the chat view of a Messages session as an
    operator reads it (non-text blocks stay, as `BLOCK` parts)."""
    return [_public(m) if PRIVATE & m.keys() else m for m in messages]


def provider_compacts(body: Mapping[str, Any]) -> bool:
    """Whether the request asks the provider to edit its history (`context_management`
    with an edit that clears tool uses or compacts): the provider then decides what the
    model sees, and the proxy leaves the conversation to it. Clearing thinking removes
    nothing the proxy counts on (Claude Code sends it on every request, keeping all)."""
    management = body.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(edits, list):
        return False
    kinds = [edit.get("type") for edit in edits if isinstance(edit, dict)]
    return any(isinstance(kind, str) and kind.startswith(PROVIDER_EDITS) for kind in kinds)
