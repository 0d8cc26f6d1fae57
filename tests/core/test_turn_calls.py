"""A long single turn's folded rounds are listed in the block, call by call, through every fold.

opencode-style: one user message, then 25 rounds of tool calls under it, in a window that
cannot hold them even with every older result cut or left as a placeholder (a running turn's
rounds are cut before any is folded). Each request is the last one's forwarded messages and
the next round, as the checkpoint makes it. Before the block listed the calls, the rounds it
folded left nothing that said what was done, and an agent that judges its progress from its
history started over.
"""

from __future__ import annotations

import json

from proxy.core import artifacts, turn_calls
from proxy.core import statements as ledger
from proxy.core.budget import request_budget
from proxy.core.messages import Message, tool_calls
from proxy.core.plan import Compacted, NeedsSummary, Situation, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.summary import detach_notes, note_digest, notes_in
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.core.words import COUNTER, TOOLS

ROUNDS = 25


def tool_round(n: int, words: int = 700) -> list[Message]:
    call = assistant_calls(f"call_{n}", name="read", arguments={"path": f"src/module_{n}.py"})
    return [call, tool_result(f"call_{n}", " ".join(f"m{n}_{i}" for i in range(words)))]


def listed(result: Compacted) -> list[str]:
    ours = [note for note in notes_in(result.messages) if note_digest(note) in result.notes]
    if not ours:
        return []
    rest, _ = ledger.without_ledger(ours[-1])
    return turn_calls.without_calls(artifacts.without_trail(rest)[0])[1]


def test_every_call_of_the_turn_is_forwarded_or_listed_in_order_with_its_recall_id() -> None:
    budget = request_budget(1536, TOOLS, output_reserved=256, margin_share=0.03)
    messages = [system("You are opencode."), user("Refactor the parser; keep the tests green.")]
    notes: frozenset[str] = frozenset()
    folded = 0
    for n in range(ROUNDS):
        messages = [*messages, *tool_round(n)]
        # Truncation (no summary to fold them into): the rounds leave the conversation.
        policy = ContextPolicy(strategy="truncate")
        situation = Situation(messages, TOOLS, policy, budget, notes=notes, recall="s")
        plan = plan_compaction(situation, COUNTER)
        result = plan.complete("Reading modules.") if isinstance(plan, NeedsSummary) else plan
        if not isinstance(result, Compacted):
            continue
        messages, notes = list(result.messages), result.notes
        kept = {c["id"] for m in messages for c in tool_calls(m)}
        lines = listed(result)
        gone = [i for i in range(n + 1) if f"call_{i}" not in kept]
        # Each folded call, in the order made, by name and arguments, with its result's id.
        expected = [f'read({{"path": "src/module_{i}.py"}})' for i in gone]
        assert [line.split(": context_recall")[0] for line in lines] == expected, n
        assert all('context_recall(id="rc_' in line for line in lines)
        folded = max(folded, len(gone))
    assert folded >= 10  # the turn outgrew the window many times over
    # The ask in place, the block before it (opening it: roles alternate after the system).
    assert detach_notes(messages[1])[0] == user("Refactor the parser; keep the tests green.")


def test_a_call_line_shows_its_arguments_on_one_line_cut_when_long() -> None:
    long = {"path": "a.py", "content": "x\n" * 200}
    calls = [
        assistant_calls("c1", name="write", arguments=long),
        {"role": "assistant", "tool_calls": [{"id": "c2", "type": "function"}]},
        assistant_calls("c3", name="grep", arguments="def  parse"),
    ]
    lines = turn_calls.call_lines([*calls, tool_result("c1", "ok")], lambda _: None)
    assert lines[0].startswith('write({"path": "a.py", "content": "x\\nx\\n')
    assert lines[0].endswith(" ...)")
    assert len(lines[0]) < turn_calls.MAX_ARGUMENT_CHARS + 20
    assert lines[1] == 'grep("def parse")'
    assert json.dumps(long) not in lines[0]


def test_a_note_without_calls_reads_back_as_it_is() -> None:
    note = "[3 earlier messages omitted]\n\nSummary: nothing."
    assert turn_calls.with_calls(note, []) == note
    assert turn_calls.without_calls(note) == (note, [])
    listed = turn_calls.with_calls(note, ["read(a)", "read(b)"])
    assert turn_calls.without_calls(listed) == (note, ["read(a)", "read(b)"])


def test_the_calls_stay_listed_when_a_later_fold_takes_the_turns_before_the_running_one() -> None:
    # A second turn: once its oldest rounds are folded and listed, a later compaction takes
    # the pinned task and the first turn, older than the running turn. Its block folds the
    # earlier one, and the running turn's calls must come with it (they did not: the agent
    # read a block that listed nothing and started the turn over).
    budget = request_budget(2048, TOOLS, output_reserved=256, margin_share=0.03)
    first = [user("Migrate the billing jobs."), *tool_round(100, 300)]
    ask = user("Now do the same for the export jobs.")
    messages = [system("You are opencode."), *first, assistant("The jobs are migrated."), ask]
    notes: frozenset[str] = frozenset()
    steps: set[str] = set()
    for n in range(ROUNDS):
        messages = [*messages, *tool_round(n, 300)]
        policy = ContextPolicy(strategy="truncate")
        situation = Situation(messages, TOOLS, policy, budget, notes=notes, recall="s")
        result = plan_compaction(situation, COUNTER)
        if not isinstance(result, Compacted):
            continue
        messages, notes = list(result.messages), result.notes
        steps.update(result.steps)
        kept = {c["id"] for m in messages for c in tool_calls(m)}
        gone = [i for i in range(n + 1) if f"call_{i}" not in kept]
        expected = [f'read({{"path": "src/module_{i}.py"}})' for i in gone]
        assert [line.split(": context_recall")[0] for line in listed(result)] == expected, n
    assert "release_running" in steps
    assert any(detach_notes(m)[0] == ask for m in messages)  # the ask in place
