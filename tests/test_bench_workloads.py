"""Issue 38's workloads plant what their judges check: a working set that changes every turn,
one fact a turn beside a paste, long turns with calls of their own, a schema-heavy head that
still leaves room for what the user said, a fixed-heavy head with pastes."""

from __future__ import annotations

import itertools

import pytest

from bench.cases.matrix import fixed_share
from bench.cases.matrix_clients import cell_budget
from bench.workloads import BUILDERS, FACTS, Plan
from bench.workloads.clients import AIDER_FILES, FILES_HEADER, LONG_ROUNDS
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.policy import ContextPolicy
from proxy.core.room import in_room
from proxy.core.statements import LEDGER_HEADING
from proxy.core.tokens import O200K_BASE, TokenCounter


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders(names=(O200K_BASE,))


@pytest.fixture(scope="module")
def counter(encoders: Encoders) -> TokenCounter:
    return TokenCounter(encoders.by_name[O200K_BASE])


def test_aider_resends_its_files_whole_each_turn_and_the_edits_show_in_the_next(
    counter: TokenCounter,
) -> None:
    built = BUILDERS["aider"](Plan(3 * 16_384, 40, window=16_384), counter)
    sets = [turn.working_set for turn in built.turns]
    assert all(s.startswith(FILES_HEADER) and all(p in s for p in AIDER_FILES) for s in sets)
    assert all(a != b for a, b in itertools.pairwise(sets))  # one edit a turn
    assert 0.4 <= counter.text(sets[0]) / 16_384 <= 0.55
    # Each answer's replacement is in the next turn's files message, not in this one's.
    for turn, answer, after in zip(built.turns, built.script.answers, sets[1:], strict=False):
        new = answer.split("=" * 7 + "\n")[1].split("\n" + ">" * 7)[0]
        assert new in after
        assert new not in turn.working_set
    assert built.preamble
    assert built.working_reply
    assert not built.tools


def test_a_paste_per_turn_plants_one_fact_a_turn_and_no_checked_value_in_a_paste(
    counter: TokenCounter,
) -> None:
    built = BUILDERS["paste-per-turn"](Plan(2 * 8_192, 120, window=8_192), counter)
    assert len(built.turns) > len(FACTS)
    per_turn = [sum(f.text in turn.text for f in FACTS) for turn in built.turns]
    assert per_turn[0] == 0
    assert max(per_turn) == 1
    assert sum(per_turn) == len(FACTS)
    for turn, paste in zip(built.turns, built.pastes, strict=True):
        assert paste in turn.text
        assert 550 <= counter.text(paste) <= 700
        assert not any(fact.key in paste for fact in FACTS)


def test_a_long_turn_runs_25_rounds_twice_each_call_its_own(counter: TokenCounter) -> None:
    built = BUILDERS["long-turn"](Plan(3 * 8_192, 120, window=8_192), counter)
    assert [len(turn.tool_tokens) for turn in built.turns] == [LONG_ROUNDS, LONG_ROUNDS]
    assert sum(built.turns[1].tool_tokens) > 1.5 * 8_192  # the turn outgrows the window
    calls = built.script.calls[: 2 * LONG_ROUNDS]
    assert len(set(calls)) == len(calls)
    assert built.name_calls


def test_the_schema_heavy_head_takes_most_of_a_6k_window_and_leaves_room_for_the_ledger(
    counter: TokenCounter,
) -> None:
    built = BUILDERS["schema-heavy"](Plan(6_144, 120, window=6_144), counter)
    assert 0.85 <= fixed_share(built, 6_144, counter) <= 0.9
    for turn in built.turns:
        assert turn.text == " ".join(turn.sentences)
    # What the last request must hold fits the window: the head, every earlier sentence as a
    # ledger bullet, and the last turn's ask, call and result.
    said = [s for turn in built.turns[:-1] for s in turn.sentences]
    ledger = f"[9 earlier messages omitted]\n\n{LEDGER_HEADING}\n" + "\n".join(
        f"- {s}" for s in said
    )
    name, arguments = built.script.calls[len(built.turns) - 1]
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}
    messages = [
        {"role": "system", "content": built.system},
        {"role": "user", "content": ledger},
        {"role": "user", "content": built.turns[-1].text},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": built.turns[-1].texts[0]},
    ]
    tokens = counter.request({"messages": messages, "tools": list(built.tools)})
    assert tokens * 1.1 <= 6_144 - 1_536 - 185  # the usable input, in the provider's count


def test_the_fixed_heavy_agent_with_pastes_has_its_head_and_pastes(counter: TokenCounter) -> None:
    built = BUILDERS["fixed-heavy-pastes"](Plan(3 * 16_384, 120, window=16_384), counter)
    head = counter.request(
        {"messages": [{"role": "system", "content": built.system}], "tools": list(built.tools)}
    )
    assert len(built.tools) == 8
    assert 4_400 <= head <= 5_000  # 4k of instructions, the rest the tools
    assert all(2_400 <= counter.text(paste) <= 2_700 for paste in built.pastes)
    assert all(len(turn.tool_tokens) == 2 for turn in built.turns)
    # One compaction a turn can do (3 requests per compaction): the head and a whole turn
    # (its ask with the paste, both results) stay under the trigger.
    budget = cell_budget(16_384)
    trigger = in_room(ContextPolicy().compression_trigger, budget.pressure(head))
    turn = max(counter.text(t.text) + sum(t.tool_tokens) for t in built.turns)
    assert budget.pressure(head + turn) < trigger
