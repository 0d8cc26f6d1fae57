"""Properties of the Messages API's recall rounds: whatever blocks the rounds hold, the client
gets the same message streamed as whole, with consecutive indexes, none of the proxy's calls,
and every block it does get byte for byte as the model wrote it; each round after the first
carries the turn before it whole."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.anthropic_recall import (
    MessagesStream,
    earlier_content,
    messages_calls,
    messages_final,
)
from proxy.core.recall import TOOL
from proxy.mock_upstream.messages_stream import events
from tests.core.test_anthropic_recall import USAGE_1, USAGE_2, message, rebuilt

_ids = itertools.count()
JSON = dict[str, Any]


def _thinking() -> JSON:
    n = next(_ids)
    return {"type": "thinking", "thinking": f"step {n} " * 3, "signature": f"sig{n}=="}


def _use(name: str) -> JSON:
    n = next(_ids)
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {"id": "rc_abcdefghij"}}


blocks = st.one_of(
    st.builds(_thinking),
    st.builds(lambda: {"type": "redacted_thinking", "data": f"ZGF0YQ{next(_ids)}"}),
    st.sampled_from(["Looking.", "It is 42.", ""]).map(lambda t: {"type": "text", "text": t}),
    st.builds(_use, st.just(TOOL)),
    st.builds(_use, st.just("read_file")),
)
rounds = st.lists(st.lists(blocks, min_size=1, max_size=5), min_size=1, max_size=3)


@given(rounds)
def test_the_stream_and_the_whole_answer_give_the_client_the_same_message(
    contents: list[list[JSON]],
) -> None:
    # The rounds go on while a round calls the proxy's tool and nothing of the client's.
    played: list[list[JSON]] = []
    for content in contents:
        played.append(content)
        calls, theirs = messages_calls({"content": content})
        if not calls or theirs:
            break
    answers = [message(*c, usage=USAGE_1 if n == 0 else USAGE_2) for n, c in enumerate(played)]
    stream = MessagesStream()
    relayed: list[JSON] = []
    body: JSON = {"messages": [{"role": "user", "content": "q"}]}
    for number, answer in enumerate(answers):
        relayed += [out for event in events(answer) for out in stream.feed(event)]
        calls, _ = stream.end_round()
        if number + 1 < len(answers):
            body = stream.continued(body, [(call, "found") for call in calls])
            turn, results = body["messages"][-2:]
            assert turn == {"role": "assistant", "content": answer["content"]}
            assert [r["tool_use_id"] for r in results["content"]] == [c.call_id for c in calls]
    relayed += stream.finish()
    earlier = [b for answer in answers[:-1] for b in earlier_content(answer["content"])]
    whole = messages_final(answers[-1], earlier, [a["usage"] for a in answers])
    streamed = rebuilt(relayed)  # asserts the indexes are consecutive
    assert streamed == whole["content"]
    assert not any(b["type"] == "tool_use" and b["name"] == TOOL for b in streamed)
    written = [b for answer in answers for b in answer["content"]]
    assert all(any(b == w for w in written) for b in streamed)
    [delta] = [event for event in relayed if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == whole["stop_reason"]
    assert {k: delta["usage"][k] for k in whole["usage"]} == whole["usage"]
