"""Hypothesis strategies for chat completion bodies: JSON the proxy must answer without a 5xx.

Values are drawn as Python data with `Raw` leaves for what Python's `json` would not write:
nesting thousands of levels deep, integers of thousands of digits, `NaN`. `encode` writes a
value as JSON text, escaping strings (a lone surrogate becomes `\\ud800`, which is valid JSON
but no Unicode) or writing them as UTF-8 (a lone surrogate is then an invalid byte sequence).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st


class Raw(str):
    """JSON text written as it is, where Python's `json` cannot write the value."""

    __slots__ = ()


def encode(value: object, *, ascii_only: bool = True) -> bytes:
    """`value` as a JSON body: escaped ASCII, or UTF-8 with lone surrogates passed through."""
    return _text(value, ascii_only).encode("utf-8", "surrogatepass")


def _text(value: object, ascii_only: bool) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        items = (
            f"{_text(key, ascii_only)}:{_text(item, ascii_only)}" for key, item in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(item, ascii_only) for item in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


# Text as clients send it, and as they should not: every code point category, lone
# surrogates included, plus strings that have tripped parsers and tokenizers.
TRICKY = [
    "\ud800",
    "\udfff",
    "a\udc00b",
    "\x00",
    "\ufeff",
    "\u202e",
    "\u2028",
    "\U0001d54f\U0001f642",
    "<|endoftext|>",
]
odd_text = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(TRICKY)


def deep(depth: st.SearchStrategy[int]) -> st.SearchStrategy[Raw]:
    """Arrays or objects nested `depth` levels around a string."""

    def nest(levels: int, as_object: bool) -> Raw:
        if as_object:
            return Raw('{"k":' * levels + '"x"' + "}" * levels)
        return Raw("[" * levels + '"x"' + "]" * levels)

    return st.builds(nest, depth, st.booleans())


# Around each limit: the proxy's (254), orjson's parser (1,024), Python's stack (about 1,000).
DEPTHS = st.sampled_from([2, 64, 128, 200, 253, 254, 255, 256, 600, 999, 1000, 1024, 1025, 3000])
deep_values = deep(DEPTHS | st.integers(1, 1100))

# Around each integer limit: orjson's 64 bits (19-20 digits), Python's 4,300 digits.
DIGITS = st.sampled_from([18, 19, 20, 21, 40, 4299, 4300, 4301, 6000])
huge_numbers = st.builds(
    lambda digits, sign: Raw(sign + "9" * digits), DIGITS, st.sampled_from(["", "-"])
)
odd_numbers = huge_numbers | st.sampled_from(
    [Raw(token) for token in ["NaN", "Infinity", "-Infinity", "1e400", "-1e-400", "-0", "1E+2"]]
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text | odd_numbers,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=8,
)
"""Any JSON value, odd leaves included; nested a few levels."""

anything = json_values | deep_values


def _part() -> st.SearchStrategy[Any]:
    text_part = st.fixed_dictionaries(
        {"type": st.just("text")}, optional={"text": odd_text | anything}
    )
    image_part = st.fixed_dictionaries(
        {"type": st.just("image_url")},
        optional={
            "image_url": st.fixed_dictionaries(
                {},
                optional={
                    "url": odd_text | st.just("data:image/png;base64,iVBORw0KGgo="),
                    "detail": anything,
                },
            )
            | anything
        },
    )
    odd_part = st.fixed_dictionaries(
        {"type": odd_text | anything}, optional={"input_audio": anything}
    )
    return text_part | image_part | odd_part | anything


def _tool_call() -> st.SearchStrategy[Any]:
    function = st.fixed_dictionaries(
        {}, optional={"name": odd_text | anything, "arguments": odd_text | anything}
    )
    call = st.fixed_dictionaries(
        {},
        optional={
            "id": odd_text | anything,
            "type": st.just("function") | anything,
            "function": function | anything,
        },
    )
    return call | anything


ROLES = st.sampled_from(
    ["system", "developer", "user", "assistant", "tool", "function", "", "USER"]
)

_known_fields = st.fixed_dictionaries(
    {},
    optional={
        "role": ROLES | anything,
        "content": odd_text | st.none() | st.lists(_part(), max_size=4) | anything,
        "tool_calls": st.lists(_tool_call(), max_size=3) | anything,
        "tool_call_id": odd_text | anything,
        "name": odd_text | anything,
        "function_call": _tool_call(),
    },
)
messages = st.builds(
    lambda known, unknown: {**unknown, **known},
    _known_fields,
    st.dictionaries(odd_text, anything, max_size=2),
)
"""One chat message: every field optional, each of the right type or of any other, and
fields no one knows."""


def _tool() -> st.SearchStrategy[Any]:
    parameters = json_values | deep_values | st.just({"type": "object", "properties": {}})
    function = st.fixed_dictionaries(
        {},
        optional={"name": odd_text | anything, "description": odd_text, "parameters": parameters},
    )
    return (
        st.fixed_dictionaries(
            {}, optional={"type": st.just("function") | anything, "function": function}
        )
        | anything
    )


MODELS = st.sampled_from(["gpt-4o-mini", "gpt-4o", "o3-mini", "claude-3-5-sonnet", ""])

chat_bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, max_size=5) | anything},
    optional={
        "model": MODELS | odd_text | anything,
        "stream": st.booleans() | anything,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": anything})
        | anything,
        "tools": st.lists(_tool(), max_size=3) | anything,
        "functions": st.lists(_tool(), max_size=2) | anything,
        "tool_choice": st.sampled_from(["auto", "none", "required"]) | anything,
        "max_tokens": st.integers() | odd_numbers | anything,
        "max_completion_tokens": st.integers() | odd_numbers | anything,
        "response_format": st.fixed_dictionaries(
            {"type": st.just("json_schema")}, optional={"json_schema": anything}
        )
        | anything,
        "n": anything,
        "user": odd_text | anything,
        "metadata": anything,
    },
)
"""Bodies shaped like chat completions, with any field of the wrong type or an odd value."""


def _responses_part() -> st.SearchStrategy[Any]:
    kinds = st.sampled_from(["input_text", "output_text", "input_image", "input_file", "refusal"])
    return (
        st.fixed_dictionaries(
            {"type": kinds | anything},
            optional={
                "text": odd_text | anything,
                "image_url": odd_text | anything,
                "detail": anything,
                "file_id": odd_text,
                "annotations": anything,
            },
        )
        | anything
    )


ITEM_TYPES = st.sampled_from(
    [
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "reasoning",
        "web_search_call",
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "mcp_call",
        "item_reference",
        "brand_new_item",
    ]
)
CALL_IDS = st.sampled_from(["call_1", "call_2", "call_3"]) | odd_text | anything
_long_text = st.integers(1, 60).map(lambda n: "the tool printed a line of output " * n)
"""Text long enough that a few items fill a small window and compaction runs."""

items = (
    st.builds(
        lambda known, unknown: {**unknown, **known},
        st.fixed_dictionaries(
            {},
            optional={
                "type": ITEM_TYPES | anything,
                "role": ROLES | anything,
                "content": odd_text
                | _long_text
                | st.lists(_responses_part(), max_size=3)
                | anything,
                "call_id": CALL_IDS,
                "name": odd_text | anything,
                "arguments": odd_text | anything,
                "input": odd_text | anything,
                "output": odd_text
                | _long_text
                | st.lists(_responses_part(), max_size=2)
                | anything,
                "id": odd_text | anything,
                "summary": st.lists(anything, max_size=2) | anything,
                "encrypted_content": odd_text | anything,
            },
        ),
        st.dictionaries(odd_text, anything, max_size=2),
    )
    | anything
)
"""One Responses API input item: every field optional, of the right type or any other."""

responses_bodies = st.fixed_dictionaries(
    {"input": st.lists(items, max_size=8) | odd_text | anything},
    optional={
        "model": MODELS | odd_text | anything,
        "instructions": odd_text | anything,
        "stream": st.booleans() | anything,
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["function", "custom", "web_search"]) | anything},
                optional={"name": odd_text | anything, "parameters": anything},
            ),
            max_size=3,
        )
        | anything,
        "max_output_tokens": st.integers() | odd_numbers | anything,
        "previous_response_id": st.none() | odd_text | anything,
        "conversation": st.none() | anything,
        "include": st.just(["reasoning.encrypted_content"]) | anything,
        "store": st.booleans() | anything,
        "truncation": st.sampled_from(["auto", "disabled"]) | anything,
    },
)
"""Bodies shaped like Responses API requests, with any field of the wrong type."""


_plain_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=6,
)
"""Odd JSON values (NaN and the infinities included) within the codec's limits, so that the
bodies made of them are served and compacted rather than refused."""


@st.composite
def _agent_turn(draw: st.DrawFn) -> list[Any]:
    """A user message, then calls with outputs, reasoning and built-in items, the way agents
    send them, with long text and odd extra fields here and there."""
    turn: list[Any] = [{"role": draw(ROLES), "content": draw(_long_text | odd_text)}]
    for _ in range(draw(st.integers(0, 3))):
        call_id = draw(st.sampled_from(["call_1", "call_2", "call_3", "call_4"]))
        if draw(st.booleans()):
            summary = draw(st.lists(st.just({"type": "summary_text", "text": "hm"}), max_size=1))
            turn.append({"type": "reasoning", "id": "rs_1", "summary": summary,
                         "encrypted_content": draw(odd_text)})  # fmt: skip
        kind = draw(st.sampled_from(["function_call", "custom_tool_call"]))
        arguments = draw(odd_text | _plain_values)
        turn.append({"type": kind, "call_id": call_id, "name": draw(odd_text),
                     "arguments": arguments, "input": draw(odd_text)})  # fmt: skip
        if draw(st.booleans()):
            turn.append(draw(st.sampled_from([{"type": "web_search_call", "id": "ws"},
                                              {"type": "item_reference", "id": "x"}])))  # fmt: skip
        output = draw(_long_text | st.lists(_responses_part(), max_size=2) | _plain_values)
        turn.append({"type": f"{kind}_output", "call_id": call_id, "output": output})
    if draw(st.booleans()):
        turn.append({"type": "message", "role": "assistant", "content": draw(_long_text)})
    return [
        {**item, **draw(st.dictionaries(odd_text, _plain_values, max_size=1))}
        if isinstance(item, dict)
        else item
        for item in turn
    ]


responses_conversations = st.fixed_dictionaries(
    {
        "input": st.lists(_agent_turn(), min_size=1, max_size=6).map(
            lambda turns: [item for turn in turns for item in turn]
        )
    },
    optional={
        "model": st.sampled_from(["gpt-4o-mini", "o3-mini", "gpt-5-codex"]),
        "instructions": odd_text | _long_text,
        "stream": st.booleans(),
        "max_output_tokens": st.integers(-5, 50) | _plain_values,
        "include": st.just(["reasoning.encrypted_content"]),
        "store": st.booleans(),
    },
)
"""Responses API conversations long enough to be compacted in a small window."""
