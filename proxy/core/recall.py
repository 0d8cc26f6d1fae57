"""Reversible compaction: the model can ask for what a compaction removed (`context_recall`).

A compaction replaces old tool results with placeholders and old turns with one note; the
originals stay in the proxy's archive. With recall on, every placeholder, cut result and note
names the id of what it stands for (`context_recall(id="rc_...")`), and the forwarded request
offers one more function tool, `context_recall`, which the proxy answers itself from the
archive: the model gets the original back without the client ever seeing the tool. Re-running
a tool is often impossible (the file changed, the command had side effects, the search was
paid for); with recall, masking an old observation loses nothing.

This module is the pure part: the ids, the tool, when it is offered, how a call is read from
an answer and what its result says. The loop that answers the calls is the service's
(`proxy.service.recalls`).

- An id is `rc_` and ten base32 characters of a digest of the conversation's scope (tenant
  and session) and the content of what it stands for: stable (the same compaction gives the
  same bytes, which keeps the provider's prompt cache warm), opaque, and meaningless in any
  other conversation (the store resolves ids per session).
- The tool is offered whenever the forwarded conversation names an id and the client's
  request allows the model to choose a tool: once a compaction named one, every later
  request of the conversation holds it (in a placeholder or in the note that replaced it),
  so the tool stays in the frozen prefix and the provider's cache is not broken again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from proxy.core.digests import digest
from proxy.core.messages import Message, role, text, tool_calls

TOOL = "context_recall"
_ID_CHARS = 10
_ID = re.compile(r'context_recall\(id="(rc_[a-z2-7]{10})"\)')
_BARE_ID = re.compile(r"rc_[a-z2-7]{10}")
_DESCRIPTION = (
    "Returns, word for word, what a note replaced to save context (a tool result, or earlier "
    "turns with the turns older notes replaced). Pass the id the note names. With a query, "
    "only the lines that mention it are returned."
)
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The id a note names (rc_...)."},
        "query": {"type": "string", "description": "Optional words to look for."},
    },
    "required": ["id"],
    "additionalProperties": False,
}


def recall_id(scope: str, messages: Sequence[Message]) -> str:
    """The id of `messages` (what one placeholder or note stands for) in the conversation
    `scope` names."""
    hasher = hashlib.blake2b(digest_size=10)
    hasher.update(scope.encode("utf-8", "surrogatepass"))
    for message in messages:
        hasher.update(b"\0" + digest(message))  # the archive's content address
    return "rc_" + base64.b32encode(hasher.digest()).decode().lower()[:_ID_CHARS]


def reference(rid: str) -> str:
    """How a placeholder or a note names `rid` (the call the model makes to get it back)."""
    return f'{TOOL}(id="{rid}")'


def ids_in(body: str) -> list[str]:
    """The recall ids `body` names, in order."""
    return _ID.findall(body) if TOOL in body else []


def named(messages: Iterable[Message]) -> bool:
    """Whether any of `messages` names a recall id (a compaction with recall replaced some
    of the conversation): the tool is then offered."""
    return any(TOOL in text(message) and ids_in(text(message)) for message in messages)


def may_offer(body: Mapping[str, Any]) -> bool:
    """Whether the client's request lets the model call a tool of the proxy's: it offers
    tools, and `tool_choice` is neither "none" nor one named function (the client's choice
    is never changed, and a forced function must stay the only one called)."""
    if not body.get("tools"):
        return False
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        # The Messages API's `{"type": "auto"}` and `{"type": "any"}` leave the model its
        # choice; any other object names one function, or restricts the model to some of the
        # client's tools (or to none: `{"type": "none"}`).
        return choice.get("type") in ("auto", "any")
    return choice in (None, "auto", "required")


def tool(responses: bool, *, anthropic: bool = False) -> dict[str, Any]:
    """The `context_recall` tool in the shape of the request's API (`anthropic`: the
    Messages API's, a flat tool with an `input_schema`)."""
    if anthropic:
        return {"name": TOOL, "description": _DESCRIPTION, "input_schema": _PARAMETERS}
    if responses:
        return {
            "type": "function",
            "name": TOOL,
            "description": _DESCRIPTION,
            "parameters": _PARAMETERS,
            "strict": False,
        }
    return {
        "type": "function",
        "function": {"name": TOOL, "description": _DESCRIPTION, "parameters": _PARAMETERS},
    }


def with_tool(
    body: Mapping[str, Any], *, responses: bool, anthropic: bool = False
) -> dict[str, Any]:
    """`body` offering `context_recall` after the client's tools (once: a client that named
    a tool so is left as it is).

    Last, so that the client's tools keep their bytes and places: a provider renders the
    tools first (the Messages API before `system`), and a breakpoint the client set on its
    last tool still closes the same prefix. The tool's own bytes never change, and once a
    compaction named an id every later request offers it, so what follows is stable too."""
    tools = list(body.get("tools") or [])
    if any(_tool_name(t) == TOOL for t in tools):
        return dict(body)
    return {**body, "tools": [*tools, tool(responses, anthropic=anthropic)]}


def without_tool(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with the proxy's `context_recall` taken out again (the last round may not
    recall any more)."""
    tools = [t for t in body.get("tools") or [] if _tool_name(t) != TOOL]
    return {**body, "tools": tools}


def _tool_name(tool: object) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else None


def is_ours(call: Mapping[str, Any]) -> bool:
    """Whether a chat tool call (a Responses `function_call` item, a Messages `tool_use`
    block) calls `context_recall`."""
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else call.get("name")
    return name == TOOL


def argument_id(arguments: object) -> str | None:
    """The `id` a call's arguments (a JSON string) ask for; None when they name none."""
    if not isinstance(arguments, str):
        return None
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        bare = _BARE_ID.search(arguments)  # broken JSON that still names an id
        return bare.group() if bare else None
    rid = value.get("id") if isinstance(value, dict) else None
    if not isinstance(rid, str):
        return None
    # The id alone, also when the model passed the whole reference a note shows.
    found = _BARE_ID.search(rid)
    return found.group() if found else (rid.strip() or None)


def argument_query(arguments: object) -> str | None:
    """The `query` a call's arguments give, if any."""
    if not isinstance(arguments, str):
        return None
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    query = value.get("query") if isinstance(value, dict) else None
    return query.strip() or None if isinstance(query, str) else None


def transcript(messages: Sequence[Message]) -> str:
    """What a recall of `messages` returns: one message's text as it was; several as a
    transcript, each under its role (and the calls an assistant made, with their arguments)."""
    if len(messages) == 1 and not tool_calls(messages[0]):
        return text(messages[0])
    return "\n\n".join(_rendered(message) for message in messages)


def _rendered(message: Message) -> str:
    """One message of a transcript: its role, its text, the calls it made."""
    header = f"[{role(message) or 'message'}]"
    calls = [
        f"{(c.get('function') or {}).get('name', '?')}"
        f"({(c.get('function') or {}).get('arguments', '')})"
        for c in tool_calls(message)
    ]
    body = text(message)
    if calls:
        body = "\n".join(filter(None, [body, *(f"-> called {c}" for c in calls)]))
    return f"{header}\n{body}"


def excerpts(
    messages: Sequence[Message], query: str, *, max_tokens: int, count: Callable[[str], int]
) -> str | None:
    """The lines of `messages` that mention `query` (any of its words, ignoring case), two
    lines either side, under their message's header; the newest first when they do not all
    fit in `max_tokens` (a later value replaces an earlier one). None when none mentions it."""
    terms = [t for t in query.lower().split() if t][:8]
    if not terms:
        return None
    found = [
        (index, block)
        for index, message in enumerate(messages)
        if (block := _excerpt(_rendered(message).splitlines(), terms)) is not None
    ]
    if not found:
        return None
    chosen: list[tuple[int, str]] = []
    used = 0
    for index, block in reversed(found):
        cost = count(block)
        if chosen and used + cost > max_tokens:
            break
        chosen.append((index, block))
        used += cost
    chosen.reverse()
    note = f"[The parts of the recalled content ({len(messages)} messages) that mention {query!r}"
    if len(chosen) < len(found):
        note += f"; the newest {len(chosen)} of {len(found)}"
    return note + ":]\n\n" + "\n\n".join(block for _, block in chosen)


def _excerpt(lines: Sequence[str], terms: Sequence[str]) -> str | None:
    """One message's lines that name any of `terms`, two either side, under its header
    (line 0, which no query matches: "user" names no message by its role); `...` where
    lines were left out."""
    hits = [i for i, line in enumerate(lines) if i and any(t in line.lower() for t in terms)]
    if not hits:
        return None
    kept = sorted({k for i in hits for k in range(max(i - 2, 1), min(i + 3, len(lines)))})
    shown, last = [lines[0]], 0
    for k in kept:
        if k > last + 1:
            shown.append("...")
        shown.append(lines[k])
        last = k
    if last < len(lines) - 1:
        shown.append("...")
    return "\n".join(shown)


def answer(
    rid: str | None,
    found: Sequence[Message] | None,
    *,
    max_tokens: int,
    count: Callable[[str], int],
    query: str | None = None,
) -> str:
    """The tool result a recall of `rid` gets: the original text (or, with a `query`, the
    lines that mention it), cut to its head and tail when it is over `max_tokens` (with a note
    saying so); or what is wrong with the call."""
    if rid is None:
        return f'{TOOL} needs the id a note names, as in {TOOL}(id="rc_...").'
    if found is None:
        return (
            f"No content is stored under the id {rid!r} in this conversation (unknown, "
            "expired, or from another conversation). Use an id a note of this conversation "
            "names."
        )
    if not found:
        return f"The content of {rid} has expired from the proxy's archive."
    prefix = ""
    if query:
        matched = excerpts(found, query, max_tokens=max_tokens, count=count)
        if matched is not None:
            # The newest block is kept even alone over the cap (a log whose every line
            # matches): cut then, or the round's request would not fit the window.
            size = count(matched)
            return matched if size <= max_tokens else _cut(matched, size, max_tokens, False)
        prefix = f"[Nothing in it mentions {query!r}; here it is whole.]\n\n"
    body = prefix + transcript(found)
    total = count(body)
    if total <= max_tokens:
        return body
    return _cut(body, total, max_tokens, query is None)


UNAVAILABLE = (
    "The proxy's archive cannot be reached right now, so this content is unavailable. "
    "Continue with what the conversation holds, or call the original tool again if it is "
    "safe to."
)


def _cut(body: str, total: int, max_tokens: int, searchable: bool = True) -> str:
    """`body` cut to its head and tail within about `max_tokens`, with a note between them
    (saying how to search the whole, when the call gave no query)."""
    keep = int(len(body) * max(max_tokens - 80, 16) / max(total, 1))
    head = int(keep * 0.6)
    tail = keep - head
    cut = total - max_tokens
    search = " Call it again with a query to get the lines that mention it." if searchable else ""
    return (
        f"{body[:head]}\n\n[... about {cut} tokens cut from the middle of the recalled "
        f"content: it is larger than this request may hold.{search} ...]\n\n"
        f"{body[len(body) - tail :] if tail else ''}"
    )
