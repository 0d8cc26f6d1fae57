"""The summary layer's texts: the request to the summarizer, and the message that replaces
the condensed turns.

The summarizer (the "summary brain": the same upstream by default, or a cheaper model) is
asked in one of two forms:

- the prefix form (`prefix_request`, or `responses_prefix_request` for a conversation
  forwarded over the Responses API), when the brain is the conversation's own model and
  upstream: the conversation exactly as it was last forwarded, in the API it was forwarded
  by, through the end of the span, then one user message asking for the summary. The
  provider has just cached that prefix (as the conversation's), so it bills the summary's
  input mostly as cached tokens: coding agents that summarize this way read 87-92 % of it
  from the cache;
- the transcript form (`summary_request`): the span as plain text in a fresh prompt, for a
  brain of its own (another model or server caches none of the conversation), for a span
  summarized in parts, and when the prefix form is refused (a strict template). A plain
  transcript needs no valid tool-call pairing, and the model cannot mistake it for a
  conversation to answer.

The summary is rolling: a previous summary inside the span is folded into the new one
instead of being summarized as if it were dialogue.

The summary message that goes into the conversation says what it is (earlier turns were
condensed; nothing was lost on purpose) and carries the "context reminder": the tools the
request offers, so the model keeps using them after its own earlier calls are gone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.digests import digest
from proxy.core.messages import Message, has_function_call, role, text, tool_calls
from proxy.core.recall import reference
from proxy.core.responses import responses_body

SUMMARY_PREFIX = "[Earlier turns of this conversation were condensed"

# A note the proxy wrote: a summary, or an omission marker. It stands alone as a message, or
# was merged at the end of a user message (when no role could stand between its neighbours):
# either way it starts a paragraph.
_NOTE = re.compile(
    r"(?:\A|\n\n)(?=\[(?:Earlier turns of this conversation were condensed|"
    r"\d+ earlier messages omitted\]))"
)

# Closes a note that opens a user message (merged in front of it when no role could stand
# between the instructions and that message), so the note can be taken out again exactly.
NOTE_END = "[End of the condensed turns; the conversation continues.]"
_OPENING_NOTE_END = "\n\n" + NOTE_END

SECTIONS = (
    "Goal",
    "User constraints and preferences (verbatim)",
    "Decisions",
    "Facts and identifiers",
    "Files and artifacts",
    "Done",
    "Pending",
    "Errors",
    "Next step",
)

_INSTRUCTIONS = """\
You condense the earlier part of a conversation between a user and an AI assistant (which may \
use tools) so that the assistant can continue the work with only your summary in place of \
those turns. Write the summary for the assistant, in the conversation's language, under these \
headings, in this order, each followed by short bullet points ("- none" when empty):

{sections}

Rules:
- Quote the user's constraints and preferences word for word.
- Keep every identifier, path, URL, number with its unit, name and error message exactly.
- Prefer facts established by tool results over guesses; say what is uncertain.
- Do not answer or continue the conversation; only summarize it.
- Stay under {max_tokens} tokens."""


def is_summary(message: Message) -> bool:
    """Whether a message is a summary this proxy wrote (found again in a later request)."""
    return text(message).startswith(SUMMARY_PREFIX)


def marker(omitted: int, previous_note: str | None = None, recall: str | None = None) -> str:
    """The truncation marker; an earlier summary, if any, is kept after it. With a `recall`
    id, the marker says how to get the omitted messages back (`proxy.core.recall`)."""
    note = f"[{omitted} earlier messages omitted]"
    if recall:
        note += f" {reference(recall)} returns them word for word."
    summary = _summary_part(previous_note)
    return f"{note}\n\n{summary}" if summary else note


def _summary_part(note: str | None) -> str | None:
    if note is None or SUMMARY_PREFIX not in note:
        return None
    return note[note.index(SUMMARY_PREFIX) :]


# The count a note opens with: "[12 earlier messages omitted]", or a summary's header
# ("...condensed: 12 messages were replaced by this summary...").
_COUNT = re.compile(
    r"\[(\d+) earlier messages omitted\]|\[Earlier turns of this conversation were "
    r"condensed: (\d+) messages were replaced"
)


def stands_for(note: str) -> int:
    """How many of the client's messages `note` (one the proxy wrote) stands for."""
    found = _COUNT.match(note)
    return int(found[1] or found[2]) if found is not None else 0


def opening_note(note: str) -> str:
    """`note` as it opens a user message (see `NOTE_END`)."""
    return note + _OPENING_NOTE_END


def detach_note(message: Message) -> tuple[Message, str | None]:
    """`message` without the notes the proxy merged into it, and the newest (None if none)."""
    restored, notes = detach_notes(message)
    return restored, notes[-1] if notes else None


def _note_starts(content: str) -> Iterator[int]:
    """Where `_NOTE` matches in `content`, in order, jumping from one paragraph break to
    the next: a search tries every character, a quarter of a second on 10 MB."""
    if _NOTE.match(content):
        yield 0
    start = content.find("\n\n[")
    while start != -1:
        if _NOTE.match(content, start):
            yield start
        start = content.find("\n\n[", start + 1)


def _anyone(_: str) -> bool:
    return True


def detach_notes(
    message: Message, owned: Callable[[str], bool] = _anyone
) -> tuple[Message, list[str]]:
    """`message` without the notes the proxy merged into it, and those notes, oldest first.

    A note opens a user message (closed by `NOTE_END`) or is merged at its end; a message
    can carry both (an opening note, then a later one at its end), never more. `owned` says
    which texts are notes the proxy wrote: the text a note carries (a summary) may hold
    what looks like a note's start or end (a model echoing what it read), so each place
    where one could start or end is tried in turn until `owned` accepts what it delimits.
    """
    content = message.get("content")
    notes: list[str] = []
    if isinstance(content, str):
        if _NOTE.match(content):
            separator = _OPENING_NOTE_END + "\n\n"
            end = content.find(separator)
            while end != -1 and not owned(content[:end]):
                end = content.find(separator, end + 1)
            if end == -1:
                return message, []  # a standalone note (`note_of` reads it), or none of ours
            notes.append(content[:end])
            content = content[end + len(separator) :]
        start = next(
            (at for at in _note_starts(content) if owned(content[at:].removeprefix("\n\n"))), -1
        )
        if start != -1:
            notes.append(content[start:].removeprefix("\n\n"))
            content = content[:start]
    elif isinstance(content, list) and content:
        opening = _note_text(content[0])
        if opening is not None and opening.endswith(_OPENING_NOTE_END):
            note = opening.removesuffix(_OPENING_NOTE_END)
            if owned(note):
                notes.append(note)
                content = content[1:]
        closing = _note_text(content[-1]) if content else None
        if closing is not None and owned(closing):
            notes.append(closing)
            content = content[:-1]
    return ({**message, "content": content}, notes) if notes else (message, [])


def replace_note(message: Message, old: str, new: str) -> Message:
    """`message` with the note `old` it is (standalone) or carries (merged) replaced by
    `new`: where a note stands, a shortened one stands (`old` must be a note of its)."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": content.replace(old, new, 1)}
    if isinstance(content, list):
        forms = {old: new, opening_note(old): opening_note(new)}
        parts = [
            {**part, "text": forms[part["text"]]}
            if isinstance(part, dict) and part.get("text") in forms
            else part
            for part in content
        ]
        return {**message, "content": parts}
    return message


def _note_text(part: object) -> str | None:
    """The text of a content part that holds a note, if it is one."""
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        text_: str = part["text"]
        return text_ if _NOTE.match(text_) is not None else None
    return None


def note_of(message: Message) -> str | None:
    """The note a standalone proxy message carries (a summary or a marker), if it is one
    (a user message a note opens is not: `detach_note` takes that note out)."""
    body = text(message)
    if not _NOTE.match(body):
        return None
    if body.endswith(_OPENING_NOTE_END):
        # A note that opened an empty message (`merge_text`): nothing of the client's is left.
        return body.removesuffix(_OPENING_NOTE_END)
    return body if NOTE_END not in body else None


def note_digest(note: str) -> str:
    """The name of a note the proxy wrote (hex), by which it knows the note is its own.

    A note is recognised by its text's shape, and a model that sees the block in its
    context can write the same shape in its own answer (a small model imitating what it
    reads), which the client then sends back as history. Read as the proxy's, such an
    answer's "ledger" would replace what the user really said. So a compaction records the
    digests of the notes it leaves in the conversation (the checkpoint keeps them), and only
    a note so recorded is read as one: everything else is the client's text.
    """
    return digest(note).hex()


def notes_in(messages: Sequence[Message]) -> list[str]:
    """Every note in `messages` by its shape alone (standalone or merged into a message),
    in order: what a checkpoint written before notes were recorded holds."""
    found: list[str] = []
    for message in messages:
        standalone = note_of(message)
        found += [standalone] if standalone is not None else detach_notes(message)[1]
    return found


def summary_request(
    span: Sequence[Message], *, previous: str | None, model: str | None, max_tokens: int
) -> dict[str, Any]:
    """The chat completion body that asks the summarizer for a summary of `span`, folding
    in `previous` (the summary the span's turns were already condensed into, if any)."""
    transcript = "\n\n".join(render(m) for m in span)
    parts = []
    if previous:
        parts.append(FOLD_IN + previous)
    parts.append("The turns to summarize:\n\n" + transcript)
    sections = "\n".join(f"## {name}" for name in SECTIONS)
    body: dict[str, Any] = {
        "messages": [
            {
                "role": "system",
                "content": _INSTRUCTIONS.format(sections=sections, max_tokens=max_tokens),
            },
            {"role": "user", "content": "\n\n---\n\n".join(parts)},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if model:
        body["model"] = model
    return body


# The request fields that shape the prompt a provider caches, besides the messages: the model
# (each has its own cache), the tools (rendered ahead of the messages) and OpenAI's routing
# hint for its cache. The others are the summary's own (no stream, its own `max_tokens`, no
# tool calls), and `response_format` too: a summary is text under headings, whatever
# structured output the conversation asks for.
_CHAT_PREFIX_FIELDS = ("model", "tools", "functions", "prompt_cache_key")
# The same for a Responses API conversation (its chat view, `proxy.core.responses.chat_view`):
# `instructions` when it is no string (a string is the leading message), a stored `prompt`
# (its template opens the prompt), `reasoning` (a reasoning model's effort is rendered ahead
# of the conversation), and `include`, kept as the conversation sent it (it asks for the
# reasoning items' `encrypted_content` back, as the items sent back hold it). Not `text`
# (structured output, like chat's `response_format`), `truncation`, `store` or `stream`.
_RESPONSES_PREFIX_FIELDS = (
    "model",
    "instructions",
    "prompt",
    "tools",
    "reasoning",
    "include",
    "prompt_cache_key",
)

# What the closing message says of the span and of the earlier summary; the mock provider
# reads both to find the turns to summarize (`proxy.mock_upstream.summarizer`).
AFTER_TASK = (
    "Summarize the conversation above after its first user message, which stays in place as it is."
)
WHOLE = "Summarize the conversation above."
FOLD_IN = "The summary of the turns before these, to fold into yours:\n\n"
_CLOSING = (
    "{instructions}\n\n{scope} Answer with the summary alone: call no tool, and do not "
    "continue the conversation."
)
# Put between a conversation that ends on the user's turn and the closing user message: two
# user turns in a row are refused by strict chat templates (Mistral's), and what comes after
# the cached prefix costs the cache nothing.
_PAUSE = "(The conversation pauses here to be condensed.)"


@dataclass(frozen=True, slots=True)
class Prefix:
    """A conversation as it was last forwarded, through the end of a span to summarize: what
    the provider's prompt cache holds of it."""

    fields: Mapping[str, Any]
    """The request's fields that shape the cached prompt (`prefix_fields`)."""
    messages: tuple[Message, ...]
    tokens: int
    """Our count of `messages` and the tools."""
    after_task: bool
    """Whether the span follows a message that stays (the pinned task), not just the
    instructions."""


def prefix_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a request `body` (a chat body, or a Responses body's chat view) that
    its prompt's cached prefix depends on; each form of the request takes its API's own."""
    names = dict.fromkeys((*_CHAT_PREFIX_FIELDS, *_RESPONSES_PREFIX_FIELDS))
    return {name: body[name] for name in names if name in body}


def prefix_closing(prefix: Prefix, *, previous: str | None, max_tokens: int) -> str:
    """The text of the message that closes a summary request in the prefix form: the
    summarizer's instructions, the span it is to summarize (`AFTER_TASK` or `WHOLE`), and
    `previous` to fold in."""
    sections = "\n".join(f"## {name}" for name in SECTIONS)
    instructions = _INSTRUCTIONS.format(sections=sections, max_tokens=max_tokens)
    closing = _CLOSING.format(
        instructions=instructions, scope=AFTER_TASK if prefix.after_task else WHOLE
    )
    if previous:
        closing += "\n\n" + FOLD_IN + previous
    return closing


def prefix_messages(prefix: Prefix, closing: str) -> list[Message]:
    """`prefix`'s messages, then the closing user message (after a short assistant turn when
    the prefix ends on the user's, `_PAUSE`)."""
    pause = [{"role": "assistant", "content": _PAUSE}] if _ends_on_user(prefix.messages) else []
    return [*prefix.messages, *pause, {"role": "user", "content": closing}]


def prefix_request(prefix: Prefix, *, previous: str | None, max_tokens: int) -> dict[str, Any]:
    """The summary request in the prefix form: `prefix` as it was forwarded, then one user
    message asking for the summary (folding in `previous`), with no tool call allowed.

    `tool_choice` (or the legacy `function_call`) is "none" rather than the tools left out:
    the tools are part of the cached prefix, which the choice of tool is not. A prefix that
    ends on the user's turn gets a short assistant turn before the closing message (`_PAUSE`).
    """
    closing = prefix_closing(prefix, previous=previous, max_tokens=max_tokens)
    fields = {k: v for k, v in prefix.fields.items() if k in _CHAT_PREFIX_FIELDS}
    body: dict[str, Any] = {
        **fields,
        "messages": prefix_messages(prefix, closing),
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if prefix.fields.get("tools"):
        body["tool_choice"] = "none"
    if prefix.fields.get("functions"):
        body["function_call"] = "none"
    return body


def responses_prefix_request(
    prefix: Prefix, *, previous: str | None, max_tokens: int
) -> dict[str, Any]:
    """The summary request in the prefix form for a conversation forwarded over the
    Responses API (`prefix` is of its chat view), as a Responses API body.

    Its `instructions` and `input` are made by `responses_body` from the prefix's messages,
    as the conversation's forwarded body was from the same messages: the same items, the
    reasoning items with their `encrypted_content` included, in the same order. Then the
    closing message of `prefix_request` (after its pause, when one is due), as a message
    item. `tool_choice` is "none" as in chat; `max_output_tokens` is the summary's
    allowance; `store` is false: nobody continues from the summary's response. No
    `temperature`: reasoning models refuse one.
    """
    closing = prefix_closing(prefix, previous=previous, max_tokens=max_tokens)
    fields = {k: v for k, v in prefix.fields.items() if k in _RESPONSES_PREFIX_FIELDS}
    body = responses_body(fields, prefix_messages(prefix, closing))
    body |= {"max_output_tokens": max_tokens, "store": False}
    if prefix.fields.get("tools"):
        body["tool_choice"] = "none"
    return body


def _ends_on_user(messages: Sequence[Message]) -> bool:
    """Whether the last turn of `messages` is the user's, as chat templates alternate turns:
    instructions, tool results and the assistant's tool calls are no turn of their own."""
    for message in reversed(messages):
        name = role(message)
        if name == "user":
            return True
        if name == "assistant" and not (tool_calls(message) or has_function_call(message)):
            return False
    return False


def split_span(
    span: Sequence[Message], *, max_tokens: int, count: Callable[[Message], int]
) -> list[list[Message]]:
    """`span` in consecutive parts of at most `max_tokens` each, for a summarizer whose own
    window cannot take it whole; a message larger than that is a part of its own, cut to
    its head and tail (`_within`): whole, it would be refused as over the window, and the
    summary of the whole span lost (a client's compaction summarizes results no layer cut
    first: a 20k-token tool output in a 16k window)."""
    parts: list[list[Message]] = [[]]
    used = 0
    for message in span:
        tokens = count(message)
        if tokens > max_tokens:
            message = _within(message, tokens, max_tokens, count)
            tokens = count(message)
        if parts[-1] and used + tokens > max_tokens:
            parts.append([])
            used = 0
        parts[-1].append(message)
        used += tokens
    return [part for part in parts if part]


def _within(
    message: Message, tokens: int, max_tokens: int, count: Callable[[Message], int]
) -> Message:
    """`message` with its text cut from the middle to about `max_tokens` of its `tokens`
    (by its share of the characters, a tenth kept back), saying so where the cut is."""
    body = text(message)
    cut = f"\n\n[... {tokens - max_tokens} or more tokens cut from the middle for the summary"
    cut += " ...]\n\n"
    room = max(max_tokens * 9 // 10 - count({**message, "content": cut}), 0)
    keep = len(body) * room // tokens
    head = keep * 2 // 3
    tail = body[len(body) - (keep - head) :] if keep > head else ""
    return {**message, "content": body[:head] + cut + tail}


def render(message: Message) -> str:
    """One message as transcript text: `role: content`, with tool calls spelled out."""
    name = role(message) or "unknown"
    if name == "tool":
        return f"tool result [id {message.get('tool_call_id')}]: {text(message)}"
    lines = [f"{name}: {text(message)}"] if text(message) else []
    # Chat's function calls, custom (free-form) calls, and the legacy `function_call`.
    calls = [call.get("function") or call.get("custom") for call in tool_calls(message)]
    calls.append(message.get("function_call"))
    lines += [
        f"{name} called {call.get('name')}({call.get('arguments', call.get('input', ''))})"
        for call in calls
        if isinstance(call, dict)
    ]
    return "\n".join(lines) or f"{name}: (no text)"


DEFAULT_CACHED_PRICE = 0.1
"""A cached input token's price as a share of an uncached one (Anthropic's, OpenAI's for its
GPT-5 models, DeepSeek's), by which the prefix form of a summary request is weighed against
the transcript form (`context.summary_brain.cached_input_price` sets the upstream's)."""

TOOLS_REMINDER = "Tools you can call in this conversation: "
"""How a summary's last line, naming the tools the conversation offers, starts."""


def summary_text(
    summary: str, *, condensed: int, tools: Sequence[str], recall: str | None = None
) -> str:
    """The content of the message that replaces `condensed` messages with `summary`. With a
    `recall` id, it says how to get those messages back (`proxy.core.recall`)."""
    reminder = f"\n\n{TOOLS_REMINDER}{', '.join(tools)}." if tools else ""
    missing = "ask the user if something you need is missing"
    if recall:
        missing = (
            f"if something you need is missing, {reference(recall)} returns them word for word"
        )
    return (
        f"{SUMMARY_PREFIX}: {condensed} messages were replaced by this summary to keep the "
        f"conversation inside the model's context window. Continue from it; {missing}.]"
        f"\n\n{summary.strip() or '- none'}{reminder}"
    )


def offered_tools(body: Mapping[str, Any]) -> list[str]:
    """Names of the tools (and legacy functions) the request offers, in order."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
        elif _flat_tool_name(tool) is not None:
            names.append(tool["name"])
    for function in body.get("functions") or []:
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _flat_tool_name(tool: object) -> str | None:
    """A Responses API tool's name: its tools are flat (`{"type": "function", "name"}`)."""
    if isinstance(tool, dict) and tool.get("type") in ("function", "custom"):
        name = tool.get("name")
        return name if isinstance(name, str) else None
    return None


def completion_text(response: Mapping[str, Any]) -> str | None:
    """The text of a chat completion response's first choice, if it has any."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) and content.strip() else None
