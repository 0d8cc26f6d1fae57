"""What a user pasted is found by its shape, cut like a tool result, and never read as words.

The invariants, over random messages that mix the user's sentences with every kind of paste:
the user's words are all prose and no paste line is; a cut keeps every word and changes no
statement; a cut paste is still a paste, and is never cut again.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.core import pastes
from proxy.core.statements import PASTE, message_statements
from tests.builders import user
from tests.core.client_shapes import SENTENCES
from tests.core.words import COUNTER

RID = "rc_abcdefghij"
COUNT = COUNTER.text


def log(lines: int, seed: int = 0) -> str:
    return "\n".join(
        f"2026-11-30 12:{n // 60:02d}:{n % 60:02d} worker-{(n + seed) % 7} dropped {n * 3}"
        f" deliveries from queue q{n}"
        for n in range(lines)
    )


def test_a_log_beside_the_user_s_words_is_a_paste_and_the_words_are_prose() -> None:
    body = f"The budget is $500. Look at this log:\n\n{log(40)}\n\nNever restart worker-3."
    (span,) = pastes.spans(body)
    assert span.lines == 40
    assert body[span.start : span.end] == log(40)
    words = "The budget is $500. Look at this log: Never restart worker-3."
    assert pastes.prose(body).split() == words.split(" ")


def test_each_kind_of_bulk_is_found() -> None:
    fenced = "```python\n" + "\n".join(f"x_{n} = {n}" for n in range(5)) + "\n```"
    listing = "\n".join(f"- worker-{n} dropped {n * 7} deliveries" for n in range(8))
    levels = "\n".join(f"ERROR 12:00:{n:02d} the relay refused a delivery" for n in range(8))
    code = "\n".join(
        ["def load(path):", "    with open(path) as f:", "        return f.read()"] * 4
    )
    blob = json.dumps({"items": [{"id": n, "name": f"item-{n}"} for n in range(20)]})
    for bulk in (fenced, listing, levels, code, blob, "A" * 2_000):
        body = f"Please look.\n{bulk}\nThanks."
        assert len(pastes.spans(body)) == 1, bulk[:40]
        assert pastes.prose(body).split() == ["Please", "look.", "Thanks."], bulk[:40]


def test_the_user_s_own_lists_and_short_snippets_are_words() -> None:
    rules = "\n".join(
        [
            *("Rules:", "- never open port 22", "- always use tabs", "- the budget is $5"),
            *(
                "- deploy to eu-west-1",
                "- use ticket OPS-12",
                "- no em-dashes",
                "- reply in French",
            ),
        ]
    )
    steps = "\n".join(f"{n}. Step {n}: do thing {n} now." for n in range(1, 10))
    labelled = "\n".join(f"Step {n}: check module {n} and fix what fails." for n in range(9))
    command = "Run this:\n```\nmake deploy ENV=prod\n```\nthen tell me."
    prose = " ".join(s.format(n=n) for n, s in enumerate(SENTENCES * 5))
    for body in (rules, steps, labelled, command, prose):
        assert pastes.spans(body) == (), body[:40]


def test_a_cut_paste_keeps_the_words_names_its_size_and_id_and_is_not_cut_again() -> None:
    body = f"The budget is $500. Look at this log:\n\n{log(40)}\n\nNever restart worker-3."
    cut = pastes.cut(body, 120, COUNT, RID)
    assert COUNT(cut) < COUNT(body)
    assert cut.startswith("The budget is $500. Look at this log:\n\n2026-11-30 12:00:00")
    assert cut.endswith("from queue q39\n\nNever restart worker-3.")
    assert f'context_recall(id="{RID}") returns the whole message' in cut
    assert pastes.is_cut(cut)
    assert pastes.recall_of(cut) == RID
    assert pastes.cut(cut, 60, COUNT, RID) == cut
    line = pastes.ledger_line(cut, RID)
    assert line == pastes.ledger_line(body, RID)
    assert line is not None
    assert line.startswith('[pasted: 40 lines starting "2026-11-30')


def test_a_message_s_statements_are_its_words_and_one_line_for_its_pastes() -> None:
    body = f"Never restart worker-3.\n\n{log(40)}\n\nUse ticket OPS-7.\n```\n{log(9, 1)}\n```"
    said = message_statements(user(body), False)
    assert [s.text for s in said[:2]] == ["Never restart worker-3.", "Use ticket OPS-7."]
    assert said[2].rank == PASTE
    assert said[2].text.startswith("[pasted: 2 pastes, 49 lines")
    assert len(said) == 3


# --- Properties ---------------------------------------------------------------------------

sentences = st.sampled_from(SENTENCES).flatmap(
    lambda s: st.integers(1, 99).map(lambda n: s.format(n=n))
)


@st.composite
def bulk(draw: st.DrawFn) -> str:
    lines = draw(st.integers(8, 80))
    seed = draw(st.integers(0, 6))
    kind = draw(st.sampled_from(["log", "fenced", "json", "listing"]))
    if kind == "log":
        return log(lines, seed)
    if kind == "fenced":
        return (
            "```\n"
            + "\n".join(f"    value_{n} = compute({n}, {seed})" for n in range(lines))
            + "\n```"
        )
    if kind == "json":
        return json.dumps([{"id": n, "status": "ok", "seed": seed} for n in range(lines)])
    return "\n".join(f"- shard-{n} holds {n * seed} keys on host db-{seed}" for n in range(lines))


@st.composite
def message(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """A message body, its sentences and its pastes."""
    parts = draw(
        st.lists(
            st.one_of(sentences.map(lambda s: ("s", s)), bulk().map(lambda b: ("b", b))),
            min_size=1,
            max_size=6,
        )
    )
    body = "\n\n".join(part for _, part in parts)
    return body, [p for k, p in parts if k == "s"], [p for k, p in parts if k == "b"]


@given(message())
def test_the_words_are_prose_and_no_paste_line_is(found: tuple[str, list[str], list[str]]) -> None:
    body, said, pasted = found
    prose = pastes.prose(body).split("\n")
    assert all(sentence in prose for sentence in said)
    pasted_lines = {line for paste in pasted for line in paste.split("\n")} - set(said)
    assert not pasted_lines & set(prose)
    assert len(pastes.spans(body)) <= len(pasted)


@given(message(), st.integers(0, 400))
def test_a_cut_keeps_every_statement_and_is_final(
    found: tuple[str, list[str], list[str]], size: int
) -> None:
    body = found[0]
    cut = pastes.cut(body, size, COUNT, RID)
    assert COUNT(cut) <= COUNT(body)
    assert pastes.prose(cut) == pastes.prose(body)
    assert message_statements(user(cut), False) == message_statements(user(body), False)
    if cut != body:
        assert pastes.is_cut(cut)
        assert pastes.cut(cut, size // 2, COUNT, RID) == cut


@given(st.lists(message(), min_size=1, max_size=3), st.integers(0, 600))
def test_a_message_in_text_parts_is_cut_part_by_part_as_it_would_be_whole(
    found: list[tuple[str, list[str], list[str]]], size: int
) -> None:
    """A Messages or Responses user message is text parts: each keeps its words, none grows,
    together they take no more than the parts did, and a cut part is final."""
    bodies = [body for body, _, _ in found]
    cut = pastes.cut_texts(bodies, size, COUNT, RID)
    assert len(cut) == len(bodies)
    assert sum(map(COUNT, cut)) <= sum(map(COUNT, bodies))
    for before, after in zip(bodies, cut, strict=True):
        assert COUNT(after) <= COUNT(before)
        assert pastes.prose(after) == pastes.prose(before)
    if cut != bodies:
        assert any(map(pastes.is_cut, cut))
        assert pastes.cut_texts(cut, size // 2, COUNT, RID) == cut
    alone = pastes.cut(bodies[0], size, COUNT, RID)
    assert pastes.cut_texts(bodies[:1], size, COUNT, RID) == [alone]


def test_json_too_short_or_inside_a_sentence_is_words() -> None:
    long = json.dumps({"region": "eu-west-1", "ids": list(range(80))})
    for body in ('{"region": "eu-west-1"} is the config.', f"{long} is what the API returned."):
        assert pastes.spans(body) == (), body[:40]


def test_a_code_run_ends_at_a_fence_and_at_words_and_holds_its_blank_lines() -> None:
    code = "\n".join(
        ["def load(path):", "", "    with open(path) as f:", "        return f.read()"] * 3
    )
    fence = "```\n" + "\n".join(f"step_{n} = run({n})" for n in range(5)) + "\n```"
    words = "This is why.\nIt reads the file.\nThen it stops.\nNothing else."
    (run, fenced) = pastes.spans(f"{code}\n{fence}")
    assert run.lines == 12
    assert fenced.lines == 7
    (ended,) = pastes.spans(f"{code}\n{words}")
    assert ended.lines == 12


def test_a_paste_whose_lines_all_fit_is_left_whole() -> None:
    # A cut is asked for only when a paste is over its share; should every line fit after
    # all (the fences counted apart), the paste is kept as it was.
    piece = "```\nstep = run(1)\n```"
    assert pastes._cut_span(piece, 100, COUNT, RID) == piece
