"""The running turn stays whole, and the result the user asks about is cut, never cleared.

Seen with real clients through the proxy: a 70k-token JSON result followed by "which is
biggest?" was cleared to a one-line placeholder (`auto`) or dropped with its call
(`truncate`), so the model could not answer; with Codex's large fixed head the cut fell inside
the running turn and dropped the user message that started it; with the Agents SDK a cut hid
the running turn's first tool round and the agent ran it again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from proxy.core.messages import Message, role
from proxy.core.plan import Compacted, Unchanged, plan_compaction
from proxy.core.policy import STRATEGIES
from proxy.core.summary import note_of, notes_in, stands_for
from proxy.core.tool_results import is_cleared
from proxy.core.units import group_units, pins
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.test_plan import run, situation, target_of, words
from tests.core.words import COUNTER

FILES = [
    {"path": f"src/pkg{i % 40}/module_{i}.py", "size": (i * 7919) % 100_000, "owner": "team a"}
    for i in range(4000)
]


def listing() -> list[Message]:
    """The task, one tool call whose result is a JSON array of 4,000 files, the question."""
    return [
        system(),
        user("list every file in the repo with its size"),
        assistant_calls("c1", name="list_files"),
        tool_result("c1", json.dumps(FILES)),
        user("which is biggest?"),
    ]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_result_the_user_asks_about_is_cut_never_cleared(strategy: str) -> None:
    messages = listing()
    asked = situation(messages, window=16_000, strategy=strategy)
    result = run(plan_compaction(asked, COUNTER))
    assert result.messages[:3] == messages[:3]
    assert result.messages[-1] == messages[-1]
    content = str(result.messages[3]["content"])
    assert not is_cleared(result.messages[3])
    assert "showing " in content
    assert " of 4000 items" in content
    assert result.tokens_after <= target_of(asked)


def agent_turns(turns: int, rounds: int, size: int) -> list[Message]:
    """`turns` user turns, each answered by `rounds` tool rounds of `size` words and a reply."""
    messages = [system(words(50, "rule")), user("the task")]
    for turn in range(turns):
        if turn:
            messages.append(user(f"now step {turn}"))
        for n in range(rounds):
            call = f"t{turn}r{n}"
            messages += [assistant_calls(call), tool_result(call, words(size, f"out{turn}"))]
        messages.append(assistant(f"step {turn} done"))
    return messages


def test_the_window_never_starts_inside_the_running_turn_while_older_turns_can_go() -> None:
    finished = agent_turns(4, rounds=2, size=120)
    running = [user("now the last step"), assistant_calls("x1"), tool_result("x1", words(150))]
    messages = [*finished, *running, assistant_calls("x2"), tool_result("x2", words(150))]
    for strategy in STRATEGIES:
        result = run(plan_compaction(situation(messages, window=1400, strategy=strategy), COUNTER))
        start = result.messages.index(running[0])  # the question, forwarded in place
        # Both rounds of the running turn follow it: none was evicted, none cleared.
        after = result.messages[start + 1 :]
        assert [m.get("tool_call_id") for m in after if role(m) == "tool"] == ["x1", "x2"]
        assert not any(is_cleared(m) for m in after), strategy


def test_a_running_turn_too_big_for_the_window_has_its_results_cut_first() -> None:
    finished = agent_turns(2, rounds=1, size=60)
    running = [user("now the big step")]
    for n in range(4):
        running += [assistant_calls(f"b{n}"), tool_result(f"b{n}", words(400, f"big{n}"))]
    messages = [*finished, *running]
    asked = situation(messages, window=2000)
    result = run(plan_compaction(asked, COUNTER))
    assert isinstance(result, Compacted)
    assert running[0] in result.messages
    start = result.messages.index(running[0])
    kept = [m for m in result.messages[start:] if role(m) == "tool"]
    assert [m["tool_call_id"] for m in kept] == ["b0", "b1", "b2", "b3"]
    assert any("cut from the middle" in str(m["content"]) for m in kept)
    assert result.tokens_after <= target_of(asked)


def test_with_nothing_older_to_go_the_running_turn_is_windowed_by_tokens() -> None:
    # A single-turn agent (the task is the only user message): its old rounds must go.
    messages = agent_turns(1, rounds=12, size=100)
    units = group_units(messages)
    pinned = pins(messages, units, keep_recent=4, pin_first_user=True, bound=(300, COUNTER.message))
    assert pinned.running == 1
    assert pinned.recent > 2 * 6


def test_the_omission_note_counts_what_earlier_notes_stood_for() -> None:
    first = run(
        plan_compaction(situation(agent_turns(6, 1, 60), window=500, strategy="truncate"), COUNTER)
    )
    assert first.note is not None
    before = stands_for(first.note)
    grown = [*first.messages, *agent_turns(6, 1, 60)[2:]]
    again = run(
        plan_compaction(
            situation(grown, window=500, strategy="truncate", notes=first.notes), COUNTER
        )
    )
    assert again.note is not None
    clients = [m for m in grown if note_of(m) is None]
    forwarded = {id(m) for m in again.messages}  # the plan keeps the client's own objects
    gone = [m for m in clients if id(m) not in forwarded]
    assert stands_for(again.note) == before + len(gone)
    assert stands_for("no note") == 0


def test_a_running_turn_still_too_big_after_its_results_are_cut_is_windowed_like_the_rest() -> None:
    # Eighty rounds: over the usable input with every older result cut, and with every one
    # a placeholder too. Only then are its oldest rounds folded.
    finished = agent_turns(2, rounds=1, size=60)
    running = [user("now the long step")]
    for n in range(80):
        running += [assistant_calls(f"l{n}"), tool_result(f"l{n}", words(70, f"long{n}"))]
    running[-2:-2] = [assistant_calls("ok"), tool_result("ok", "ok")]  # kept: no smaller
    messages = [*finished, *running]
    asked = situation(messages, window=2000)
    result = run(plan_compaction(asked, COUNTER))
    assert "clear_recent" in result.steps
    assert "release_running" in result.steps
    assert result.tokens_after <= target_of(asked)
    assert result.messages[-2:] == messages[-2:]  # the newest round, whole


def _long_step(rounds: int) -> list[Message]:
    """Two finished turns, then a running turn of `rounds` rounds of ~170-token results."""
    finished = agent_turns(2, rounds=1, size=60)
    running = [user("now the long step")]
    for n in range(rounds):
        running += [assistant_calls(f"l{n}"), tool_result(f"l{n}", words(130, f"long{n}"))]
    return [*finished, *running]


def test_a_running_turn_that_fits_once_its_results_are_cut_keeps_every_round() -> None:
    # Over the usable input, but within it once compacted: the turn's rounds are what must
    # stay, so every call is forwarded (folded, an agent that cannot read them back runs them
    # again), the older results cut or left as placeholders, and the request lands at the
    # target or, with what must stay above it, as near it as that lets.
    messages = _long_step(13)
    asked = situation(messages, window=2000)
    assert not asked.budget.fits(COUNTER.messages(messages))
    result = run(plan_compaction(asked, COUNTER))
    assert "release_running" not in result.steps
    assert result.tokens_after > target_of(asked) - 130  # not below it by a whole result
    assert result.fits
    calls = [m for m in result.messages if m.get("tool_calls")]
    assert len(calls) == 13
    assert result.messages[-2:] == messages[-2:]  # the newest round, whole


@pytest.mark.parametrize("strategy", ["truncate", "summarize"])
def test_a_request_that_fits_waits_while_what_must_stay_leaves_little_to_remove(
    strategy: str,
) -> None:
    # Within the usable input, over the trigger: its finished turns are all a compaction could
    # remove, a few percent of it, and the next request would compact again. It is forwarded
    # as sent (no summary asked for), and compacted once it no longer fits.
    messages = _long_step(12)
    asked = situation(messages, window=2000, strategy=strategy)
    assert asked.budget.fits(COUNTER.messages(messages))
    assert plan_compaction(asked, COUNTER) == Unchanged("saves_too_little", 1988)
    forced = run(plan_compaction(replace(asked, force=True), COUNTER))
    assert forced.tokens_after > target_of(asked)  # landed short of the target
    grown = situation(_long_step(13), window=2000, strategy=strategy)
    assert run(plan_compaction(grown, COUNTER)).fits


class Overshooting:
    """Our counter, but every cut message counts 10 tokens more than its size: each cut
    lands over the size asked for, however often it is made again smaller."""

    def message(self, message: Message) -> int:
        return COUNTER.message(message) + self.extra([message])

    def messages(self, messages: Sequence[Message]) -> int:
        return COUNTER.messages(messages) + self.extra(messages)

    def tools(self, body: Mapping[str, Any]) -> int:
        return COUNTER.tools(body)

    def text(self, text: str) -> int:
        return COUNTER.text(text)

    @staticmethod
    def extra(messages: Sequence[Message]) -> int:
        return 10 * sum("cut from the middle" in str(m.get("content")) for m in messages)


def test_cuts_that_keep_overshooting_still_land_the_running_turn() -> None:
    finished = agent_turns(2, rounds=1, size=60)
    running = [user("now the big step")]
    for n in range(4):
        running += [assistant_calls(f"b{n}"), tool_result(f"b{n}", words(400, f"big{n}"))]
    asked = situation([*finished, *running], window=2000)
    result = run(plan_compaction(asked, Overshooting()))
    assert "trim_recent" in result.steps
    assert running[0] in result.messages
    assert result.tokens_after <= target_of(asked)


def test_a_value_the_user_replaced_since_is_not_in_the_block() -> None:
    # "$500" leaves with the old turns, "$700" is still in the window: the block carries no
    # stale value, neither in its ledger nor in the facts the summary lost.
    messages = [system(), user("the task"), user("Budget: $500 for the cloud bill.")]
    messages += agent_turns(4, rounds=1, size=80)[2:]
    messages += [user("Budget: $700 for the cloud bill."), assistant("noted " + words(120))]
    messages += [user("go on")]
    # An extractive summary quotes the old line word for word: that line goes too.
    quoting = "- Budget: $500 for the cloud bill.\n- the agent read four files"
    result = run(plan_compaction(situation(messages, window=700, keep_recent=4), COUNTER), quoting)
    block = next(str(m["content"]) for m in result.messages if note_of(m))
    assert "Budget: $700 for the cloud bill." in str(result.messages)
    assert "$500" not in block
    assert "- the agent read four files" in block


def test_a_released_task_does_not_bring_back_a_value_the_user_replaced_since() -> None:
    # The summary layer folds "$700" into the block; the task, released to land, said "$500"
    # before it: folded after the block, its value would replace the newer one.
    def rounds(tag: str) -> list[Message]:
        calls = [
            (assistant_calls(f"{tag}{n}"), tool_result(f"{tag}{n}", words(80, tag)))
            for n in range(3)
        ]
        return [message for pair in calls for message in pair]

    task = user("Budget: $500 for the cloud bill. " + words(300, "context"))
    messages = [system(), task, *rounds("a"), assistant("ok")]
    messages += [user("Budget: $700 for the cloud bill."), *rounds("b"), assistant("ok")]
    messages += [user("go on"), *rounds("c")]
    result = run(plan_compaction(situation(messages, window=1200), COUNTER))
    assert "release_task" in result.steps
    block = "\n".join(notes_in(result.messages))
    assert "- Budget: $700 for the cloud bill." in block
    assert "$500" not in block


@pytest.mark.parametrize("rounds", [2, 40])
def test_a_running_turn_right_after_the_task_keeps_its_user_message_as_a_message(
    rounds: int,
) -> None:
    """Found by tests/core/test_plan_floors.py: with the running turn's user message right
    after the pinned task, no window widened for it, and its rounds' truncation took the
    message too, its words only a ledger bullet "in those turns", as if past. Its rounds are
    cut before any is folded: two rounds fit once cut, every call in place; forty do not fit
    the window even cut, and the oldest are folded into the block before the ask."""
    ask = user("Never open port 1 on the bastion.")
    messages = [system(), user("The task: fix it."), ask]
    for n in range(rounds):
        messages += [assistant_calls(f"c{n}"), tool_result(f"c{n}", words(2500))]
    result = run(plan_compaction(situation(messages, window=2048, keep_recent=1), COUNTER))
    users = [m for m in result.messages if role(m) == "user"]
    assert users[-1] == ask  # in place, as sent, the last of the user's words
    calls = [m for m in result.messages if role(m) == "assistant" and m.get("tool_calls")]
    if rounds == 2:
        assert len(calls) == rounds
        assert "trim_recent" in result.steps
        assert not notes_in(result.messages)
    else:
        assert "release_running" in result.steps
        assert note_of(result.messages[result.messages.index(ask) - 1]) is not None  # the block


def test_an_agent_s_first_turn_keeps_every_round_while_they_fit_at_their_least() -> None:
    """Found by the long single turn of the bench (opencode's): an agent's first turn starts
    at the pinned task, and no window was widened for it, so its rounds were cleared and
    folded like history, the agent ran them again and never finished. They are what must
    stay: the older results cut or left as placeholders, the newest whole, every call in
    place, and nothing folded while the request fits."""
    messages = [system(), user("Migrate the billing jobs to the new queue client.")]
    for n in range(50):
        call = assistant_calls(f"r{n}", name="read", arguments={"filePath": f"src/m{n}.py"})
        messages += [call, tool_result(f"r{n}", f"src/m{n}.py " + words(600, f"line{n}"))]
    result = run(plan_compaction(situation(messages, window=6000), COUNTER))
    assert "release_running" not in result.steps
    calls = [m for m in result.messages if m.get("tool_calls")]
    assert len(calls) == 50
    assert result.tokens_after <= target_of(situation(messages, window=6000))
    assert not notes_in(result.messages)
    assert result.messages[-1] == messages[-1]  # the newest, whole
    assert any(is_cleared(m) for m in result.messages)  # the oldest as placeholders
    assert result.fits
