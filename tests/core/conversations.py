"""Hypothesis strategies for random, well-formed conversations.

They mix what real agents send: system prompts (also mid-conversation), user turns, plain
replies, parallel tool calls with answers in any order, huge tool results, legacy function
calls and multimodal parts.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from proxy.core.messages import Message
from tests import builders

_ids = itertools.count()

words = st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=60)
big_words = st.integers(min_value=0, max_value=4000).map(lambda n: "data " * n)


@st.composite
def tool_exchange(draw: st.DrawFn) -> list[Message]:
    count = draw(st.integers(min_value=1, max_value=3))
    ids = [f"call_{next(_ids)}" for _ in range(count)]
    name = draw(st.sampled_from(["search", "read_file", "run_tests"]))
    answers = [builders.tool_result(i, draw(big_words | words)) for i in ids]
    order = draw(st.permutations(answers))
    return [builders.assistant_calls(*ids, name=name), *order]


def _single(builder: object) -> st.SearchStrategy[list[Message]]:
    return words.map(lambda text: [builder(text)])  # type: ignore[operator]


units = st.one_of(
    _single(builders.user),
    _single(builders.assistant),
    tool_exchange(),
    words.map(lambda text: [builders.image_user(text)]),
    st.just([builders.function_call(), builders.function_result()]),
    _single(builders.system),
)


@st.composite
def conversation(draw: st.DrawFn, max_units: int = 30) -> list[Message]:
    """A well-formed conversation: leading instructions, then a first user turn, then units."""
    head = draw(st.lists(st.sampled_from([builders.system(), builders.developer()]), max_size=2))
    body = draw(st.lists(units, max_size=max_units))
    return [*head, builders.user("the task"), *itertools.chain.from_iterable(body)]
