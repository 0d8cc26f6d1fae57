"""Responses API `input` items as the chat messages the core compacts, and back, losslessly.

The core knows one conversation model: chat messages cut into units (`proxy.core.units`).
`to_messages` translates a Responses `input` into that model and `to_items` translates the
result back. Each chat message is made from a *group* of consecutive items:

- a user, system or developer message item: one chat message of that role;
- an assistant turn: the assistant message items, `function_call` and `custom_tool_call`
  items that follow each other with no user message or tool output between them, as one
  assistant message with `tool_calls` (id = `call_id`). One message per turn, because the
  provider rejects a call or a message sent without the reasoning item that preceded it in
  its turn ("... was provided without its required 'reasoning' item"), so the whole turn
  must be kept or dropped together;
- a `function_call_output` or `custom_tool_call_output`: one `tool` message answering its
  call (`tool_call_id` = `call_id`), so `units.py` keeps a call and its output in one unit;
- `reasoning` items join the group of the item after them: dropping that message drops them;
- every other item (built-in tool calls and their outputs, `mcp_*`, `item_reference`,
  unknown types) is opaque and joins the group *before* it, so a built-in call and its
  output (`computer_call` then `computer_call_output`) stay in one group; it joins the
  group after it only when a reasoning item waits for that group or nothing precedes it.

Every message carries its group's original items, untouched, under `ITEMS` ("_items"). The
core ignores that key: the token counter reads only `role`, `content`, `name`,
`tool_calls`, `function_call` and `refusal`; units, pins, summaries and the ledger read the
same few fields; digests hash it, which only keys caches by it. It never reaches a provider:
the Responses edge sends `to_items`'s result, never the messages.

What the provider reads must still be counted. Message parts become their chat equivalent
(`input_text`/`output_text` a `text` part, `input_image` an `image_url` part, `input_file`
a `file` part), so the counter prices them by its rules. Reasoning and opaque items have no
chat equivalent: each is appended to the content as an `ATTACHED` part holding the item,
which the counter prices as its compact JSON (an unknown part type). That errs high, above
all for `encrypted_content`, as the counter prefers; calibration corrects a steady bias.

A request is translated whole by `chat_view`: `instructions` (a string) becomes the leading
system message, marked `INSTRUCTIONS` ("_instructions"), so that it is counted and kept as
the fixed head like a chat system prompt; `input` becomes the messages after it; every other
field stays. `responses_body` is its inverse, for the messages the core decided to forward.

`to_items` gives back a message's original items, the same objects in the same order, when
the message is what `to_messages` made of them. A message the core changed (a trimmed tool
result, a merged note) keeps its group's other items and has its message or output item
rebuilt from the new content; a message the core made (a summary) becomes a message item.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from proxy.core.messages import Message

ITEMS: Final = "_items"
"""The private key under which a message carries the Responses items it was made from."""
ATTACHED: Final = "responses_item"
"""The content part type holding a reasoning or opaque item, so that it is counted."""
INSTRUCTIONS: Final = "_instructions"
"""The private key marking the system message that stands for `instructions`."""
SERVER_STATE_FIELDS: Final = ("previous_response_id", "conversation")
"""Fields that make the provider prepend history the proxy never sees."""

_CALLS: Final = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})


class _Kind(enum.Enum):
    MESSAGE = "message"  # a user, system or developer message (any role but assistant)
    ASSISTANT = "assistant"
    CALL = "call"
    OUTPUT = "output"
    REASONING = "reasoning"
    OPAQUE = "opaque"


def _kind(item: object) -> _Kind:
    if not isinstance(item, dict):
        return _Kind.OPAQUE
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        return _Kind.OPAQUE  # a type that is no name (a list, an object) is no known item
    if kind in (None, "message") and isinstance(item.get("role"), str):
        return _Kind.ASSISTANT if item["role"] == "assistant" else _Kind.MESSAGE
    if kind in _CALLS:
        return _Kind.CALL
    if kind in _OUTPUTS:
        return _Kind.OUTPUT
    return _Kind.REASONING if kind == "reasoning" else _Kind.OPAQUE


def chat_view(body: Mapping[str, Any], alone: Collection[int] = ()) -> dict[str, Any]:
    """The chat completion body a Responses API body stands for (see the module's doc);
    `alone`: the `id()`s of `input` items that stand alone (`to_messages`)."""
    view = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    instructions = body.get("instructions")
    messages: list[Message] = []
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions, INSTRUCTIONS: True})
    elif instructions is not None:
        view["instructions"] = instructions  # not a string: carried along, never compacted
    given = body.get("input")
    if isinstance(given, str | list):
        messages += to_messages(given, alone=alone)
    elif given is not None:
        view["input"] = given
    view["messages"] = messages
    return view


def responses_body(view: Mapping[str, Any], messages: Sequence[Message]) -> dict[str, Any]:
    """The Responses API body to send: `view`'s fields with `messages` as `instructions`
    and `input` (the inverse of `chat_view`)."""
    body = {k: v for k, v in view.items() if k != "messages"}
    rest: list[Message] = []
    for message in messages:
        if message.get(INSTRUCTIONS) is True and "instructions" not in body:
            body["instructions"] = message.get("content")
        else:
            rest.append(message)
    # The messages the core kept are the very dicts `chat_view` made: their items are given
    # back as they came without deriving each message again to find it unchanged.
    kept = {id(message) for message in view.get("messages", ())}
    body["input"] = to_items(rest, kept=kept)
    return body


def readable(messages: Sequence[Message]) -> list[Message]:
    """`messages` without the private keys (`ITEMS`, `INSTRUCTIONS`): the chat view of a
    Responses session as an operator reads it (reasoning and built-in items stay, as
    `ATTACHED` parts); chat messages come back as they are."""
    return [
        {k: v for k, v in m.items() if k not in (ITEMS, INSTRUCTIONS)}
        if ITEMS in m or INSTRUCTIONS in m
        else m
        for m in messages
    ]


def server_state(body: Mapping[str, Any]) -> bool:
    """Whether the provider holds part of the conversation (`previous_response_id`,
    `conversation`): the proxy cannot compact what it does not see."""
    return any(body.get(name) is not None for name in SERVER_STATE_FIELDS)


def to_messages(input: str | Sequence[Any], *, alone: Collection[int] = ()) -> list[Message]:
    """Chat messages for a Responses `input`, each carrying its items under `ITEMS`.

    A string is one user message (given back by `to_items` as `{"role": "user", ...}`).
    An item whose `id()` is in `alone` is a message of its own, which nothing after it
    joins (the proxy's compaction block on the assistant's side: the model's answer after
    it is another message, so the block reads back as the note it is).
    """
    if isinstance(input, str):
        return [_message([{"role": "user", "content": input}])]
    return [_message(group) for group in _groups(input, alone)]


def _groups(items: Sequence[Any], alone: Collection[int] = ()) -> list[list[Any]]:
    groups: list[list[Any]] = []
    pending: list[Any] = []  # reasoning (and what follows it) waiting for the next group
    turn_open = False  # the last group is an assistant turn that calls may still join
    for item in items:
        kind = _kind(item)
        if id(item) in alone:
            groups.append([*pending, item])
            pending, turn_open = [], False
        elif kind is _Kind.REASONING or (kind is _Kind.OPAQUE and (pending or not groups)):
            pending.append(item)
        elif kind is _Kind.OPAQUE:
            groups[-1].append(item)
        elif turn_open and kind in (_Kind.ASSISTANT, _Kind.CALL):
            groups[-1] += [*pending, item]
            pending = []
        else:
            groups.append([*pending, item])
            pending = []
            turn_open = kind in (_Kind.ASSISTANT, _Kind.CALL)
    if pending and groups:
        # Nothing follows: the items stay with what precedes them.
        groups[-1] += pending
    elif pending:
        groups.append(pending)
    return groups


def _message(group: list[Any]) -> Message:
    return {**_derive(group), ITEMS: group}


def _derive(group: Sequence[Any]) -> Message:
    """The chat message a group of items stands for (without `ITEMS`)."""
    kinds = [_kind(item) for item in group]
    attached = [
        {"type": ATTACHED, "item": item}
        for item, kind in zip(group, kinds, strict=True)
        if kind in (_Kind.REASONING, _Kind.OPAQUE)
    ]
    if _Kind.OUTPUT in kinds:
        output = group[kinds.index(_Kind.OUTPUT)]
        content = _with(_chat_content(output.get("output")), attached)
        return {"role": "tool", "tool_call_id": output.get("call_id"), "content": content}
    if _Kind.MESSAGE in kinds:
        item = group[kinds.index(_Kind.MESSAGE)]
        return {
            "role": item["role"],
            "content": _with(_chat_content(item.get("content")), attached),
        }
    if _Kind.ASSISTANT in kinds or _Kind.CALL in kinds:
        return _assistant(group, kinds, attached)
    return {"content": attached}  # no role: a stray, which the core never compacts


def _assistant(group: Sequence[Any], kinds: Sequence[_Kind], attached: list[Any]) -> Message:
    said = [
        item.get("content") for item, k in zip(group, kinds, strict=True) if k is _Kind.ASSISTANT
    ]
    content: Any = None
    if len(said) == 1 and not attached:
        content = _chat_content(said[0])
    elif said or attached:
        content = [part for text in said for part in _as_list(_chat_content(text))] + attached
    message: Message = {"role": "assistant", "content": content}
    calls = [_tool_call(item) for item, k in zip(group, kinds, strict=True) if k is _Kind.CALL]
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] == "function_call":
        function = {"name": item.get("name"), "arguments": item.get("arguments")}
        return {"id": item.get("call_id"), "type": "function", "function": function}
    custom = {"name": item.get("name"), "input": item.get("input")}
    return {"id": item.get("call_id"), "type": "custom", "custom": custom}


def _with(content: Any, attached: list[Any]) -> Any:
    return [*_as_list(content), *attached] if attached else content


def _as_list(content: Any) -> list[Any]:
    if isinstance(content, list):
        return content
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [] if content is None else [content]


def _chat_content(content: Any) -> Any:
    return [_chat_part(part) for part in content] if isinstance(content, list) else content


def _chat_part(part: Any) -> Any:
    """A Responses content part as the chat part the token counter knows how to price."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text")}
    if kind == "input_image":
        return {
            "type": "image_url",
            "image_url": {"url": part.get("image_url"), "detail": part.get("detail")},
        }
    if kind == "input_file":
        return {"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}
    return part


def to_items(messages: Sequence[Message], *, kept: Collection[int] = ()) -> list[Any]:
    """Responses `input` items for chat messages made by `to_messages` or by the core.

    `kept`: the `id()`s of messages known to be exactly what `to_messages` made (alive, and
    never changed in place: the core makes a new dict for every change).
    """
    return [item for message in messages for item in _items_of(message, kept)]


def _items_of(message: Message, kept: Collection[int]) -> list[Any]:
    group = message.get(ITEMS)
    if not isinstance(group, list):
        return _made(message)
    if id(message) in kept or _derive(group) == {k: v for k, v in message.items() if k != ITEMS}:
        return group
    return _changed(message, group)


def _made(message: Message) -> list[Any]:
    """Items for a message the core wrote: a summary, a marker, a note."""
    role = message.get("role")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": _output_back(message.get("content"), []),
            }
        ]
    name = role if isinstance(role, str) else "user"
    content = _content_back(message.get("content"), name, [], wrap=True)
    return [{"type": "message", "role": name, "content": content}]


def _changed(message: Message, group: list[Any]) -> list[Any]:
    """The group's items with its message or output item rebuilt from the changed message.

    Reasoning, opaque and call items are kept as they came. An assistant turn's changed
    text goes to its first message item (the others are left out: the text is one now),
    or to a new message item before its first call when it had none.
    """
    originals = _original_parts(group)
    content = message.get("content")
    items: list[Any] = []
    placed = False
    for item in group:
        kind = _kind(item)
        if kind is _Kind.OUTPUT:
            items.append({**item, "output": _output_back(content, originals)})
        elif kind in (_Kind.MESSAGE, _Kind.ASSISTANT) and not placed:
            wrap = not isinstance(item.get("content"), str)
            items.append(
                {**item, "content": _content_back(content, item["role"], originals, wrap=wrap)}
            )
            placed = True
        elif kind not in (_Kind.MESSAGE, _Kind.ASSISTANT):
            items.append(item)
    if not placed and message.get("role") == "assistant" and _kept_parts(content):
        new = {"type": "message", "role": "assistant"}
        new["content"] = _content_back(content, "assistant", originals, wrap=True)
        first_call = next(
            (i for i, item in enumerate(items) if _kind(item) is _Kind.CALL), len(items)
        )
        items.insert(first_call, new)
    return items


def _original_parts(group: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Each original content part with the chat part made of it, to give the original back."""
    pairs: list[tuple[Any, Any]] = []
    for item in group:
        kind = _kind(item)
        parts = item.get("output") if kind is _Kind.OUTPUT else None
        if kind in (_Kind.MESSAGE, _Kind.ASSISTANT):
            parts = item.get("content")
        if isinstance(parts, list):
            pairs += [(_chat_part(part), part) for part in parts]
    return pairs


def _kept_parts(content: Any) -> list[Any]:
    """The content's parts other than attached items."""
    return [
        part
        for part in _as_list(content)
        if not (isinstance(part, dict) and part.get("type") == ATTACHED)
    ]


def _output_back(content: Any, originals: list[tuple[Any, Any]]) -> Any:
    if isinstance(content, list):
        return [_part_back(part, "user", originals) for part in _kept_parts(content)]
    return content


def _content_back(content: Any, role: str, originals: list[tuple[Any, Any]], *, wrap: bool) -> Any:
    if isinstance(content, str) and not wrap:
        return content
    return [_part_back(part, role, originals) for part in _kept_parts(content)]


def _part_back(part: Any, role: str, originals: list[tuple[Any, Any]]) -> Any:
    """A chat part as a Responses part: the original part when it is unchanged."""
    for index, (chat, original) in enumerate(originals):
        if chat == part:
            del originals[index]
            return original
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        if role == "assistant":
            return {"type": "output_text", "text": part.get("text"), "annotations": []}
        return {"type": "input_text", "text": part.get("text")}
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        image = part["image_url"]
        return {
            "type": "input_image",
            "image_url": image.get("url"),
            "detail": image.get("detail") or "auto",
        }
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"type": "input_file", **part["file"]}
    return part
