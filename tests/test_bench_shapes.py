"""Issue 38's judges (`bench/shapes.py`) and targets (`bench/client_targets.py`) on requests and
cells made by hand: each finds what it must, and says which request showed it."""

from __future__ import annotations

import math

from bench import forwarded, shapes
from bench.cases.matrix_shapes import _pinned_before_block
from bench.client_targets import CLIENT_TARGETS
from bench.matrix_checks import MatrixTarget
from bench.measures import CellResult
from proxy.core.messages import Message
from proxy.core.statements import LEDGER_HEADING
from proxy.core.tool_results import clear

FILES = (
    "I have *added these files to the chat* so you can go ahead and edit them.\n\na.py\n```\nx\n```"
)
BLOCK = f"[3 earlier messages omitted]\n\n{LEDGER_HEADING}\n"


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def _block(*entries: str) -> Message:
    return _user(BLOCK + "\n".join(f"- {entry}" for entry in entries))


def _target(short: str) -> MatrixTarget:
    return next(target for target in CLIENT_TARGETS if target.short == short)


def test_the_running_ask_must_be_whole_in_a_user_message() -> None:
    texts = ["Book an economy seat. Use card 4417."]
    requests = [[_user(texts[0])], [_user("Book an economy seat."), _user("Use card 4417.")]]
    tally = shapes.running_verbatim(requests, [(0, 0), (0, 0)], texts)
    assert (tally.held, tally.judged) == (1, 2)
    assert tally.details == ("request 2 (turn 1, 0 rounds sent): the user message is not whole",)


def test_a_working_set_is_judged_whole_where_it_fits_and_every_flip_is_counted() -> None:
    cut = FILES[:-8]  # its end cut off
    requests = [
        [_user(FILES), _user("ask")],
        [_user(cut), _user("ask")],
        [_block("a.py was sent"), _user("ask")],
        [_user(FILES), _user("ask")],
    ]
    located = [(0, 0)] * 4
    whole, forms = shapes.working_set(requests, located, [FILES], [True])
    assert (whole.held, whole.judged) == (2, 4)
    assert (forms.held, forms.judged) == (0, 3)
    assert "whole then cut" in forms.details[0]
    assert "cut then gone" in forms.details[1]  # the block does not quote the files' first line
    unfit, _ = shapes.working_set(requests, located, [FILES], [False])
    assert unfit.judged == 0  # a request that cannot hold it is not judged for it


def test_the_ledger_order_and_its_paste_lines_are_read_from_the_block() -> None:
    keys = ["eu-west-3", "PAY-7731", "8443"]
    paste = "2026-11-20T00:00:01.000Z ingest-3 INFO queue=events job=0a1b2c3d took_ms=12 job done"
    requests = [
        [_block("Deploy to eu-west-3.", "Track PAY-7731."), _user("x")],
        [_block("Track PAY-7731.", "Deploy to eu-west-3.", paste), _user("x")],
        [_user("nothing compacted")],
    ]
    order = shapes.ledger_order(requests, keys)
    assert (order.held, order.judged) == (1, 2)
    assert order.details == ("request 2: statements 2, 1",)
    free = shapes.paste_free(requests, [f"{paste}\nmore lines"])
    assert (free.held, free.judged) == (1, 2)  # a request with no block is not judged
    assert free.details[0].startswith("request 2: 1 paste lines")


def test_the_newest_result_may_be_cut_only_above_the_target() -> None:
    result = {"role": "tool", "tool_call_id": "c1", "content": "cut"}
    whole = {"role": "tool", "tool_call_id": "c1", "content": "the whole result"}
    requests = [[_user("x"), whole], [_user("x"), result], [_user("x"), result], [result]]
    pressures = {0: 0.3, 1: 0.4, 2: 0.9, 3: 0.49}

    def pressure(index: int, more: int) -> float:
        return pressures[index] + more / 100  # each token the cut took: 0.01 more

    def count(text: str) -> int:
        return len(text.split())

    outputs = {"c1": "the whole result"}
    tally = shapes.newest_whole(requests, outputs, pressure, lambda _: 0.5, count)
    # The third is above the target, the fourth only with its result whole: neither judged.
    assert (tally.held, tally.judged) == (1, 2)
    assert "request 2:" in tally.details[0]
    assert "0.420 with it whole" in tally.details[0]


def test_a_folded_round_must_be_named_by_its_tool_and_arguments() -> None:
    args = {
        "c1": ("read", '{"filePath": "src/api/parse.py"}'),
        "c2": ("bash", '{"command": "pytest -q", "description": "Run the tests"}'),
    }
    call = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    kept: list[Message] = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    named = [_block("The turn so far: read src/api/parse.py"), _user("go"), *kept]
    unnamed = [_block("Some rounds were folded."), _user("go"), *kept]
    tally = shapes.calls_named([named, unnamed], [(0, 2), (0, 2)], [["c1", "c2"]], args)
    assert (tally.held, tally.judged) == (1, 2)
    assert "1 of 1 folded rounds not named, e.g. read" in tally.details[0]
    # A round the client's own compaction took out before the request is the client's to name.
    theirs = shapes.calls_named(
        [named, unnamed], [(0, 2), (0, 2)], [["c1", "c2"]], args, condensed_at={"c1": 1}
    )
    assert (theirs.held, theirs.judged) == (2, 2)


def test_every_earlier_sentence_must_be_somewhere_in_the_request() -> None:
    said = [("Send it to Maria Chen.", "Flag it as urgent."), ("Book the flight.",)]
    requests = [
        [_user("Send it to Maria Chen. Flag it as urgent.")],
        [_block("Send it to Maria Chen."), _user("Book the flight.")],
    ]
    tally = shapes.earlier_said(requests, [(0, 0), (1, 0)], said)
    assert (tally.held, tally.judged) == (0, 1)  # the first turn has nothing earlier
    assert '1 of 2 missing, e.g. "Flag it as urgent."' in tally.details[0]


def _cell(workload: str, **fields: object) -> CellResult:
    cell = CellResult(8_192, workload, "poor", 1.0, 0.45)
    for name, value in fields.items():
        setattr(cell, name, value)
    return cell


def test_an_aider_landing_is_judged_against_what_had_to_stay_within_a_unit() -> None:
    check = _target("landing-unit").check
    near = _cell(
        "aider", applied=["none", "summarize"], pressures=[0.9, 0.78], stated=[math.nan] * 2,
        floors=[0.76, 0.76], unit_share=0.05,
    )  # fmt: skip
    assert check(near)[0] is True
    far = _cell(
        "aider", applied=["summarize"], pressures=[0.25], stated=[0.45], floors=[0.76],
        unit_share=0.05,
    )  # fmt: skip
    ok, numbers = check(far)
    assert ok is False
    assert "request 1 at 0.250 for 0.760" in numbers


def test_repeated_calls_unfinished_turns_and_uncached_summaries_miss() -> None:
    repeat = _target("no-repeat").check
    assert repeat(_cell("long-turn", model_calls=52, planned_calls=52, user_turns=2))[0]
    assert not repeat(_cell("long-turn", model_calls=60, planned_calls=52, user_turns=2))[0]
    finished = _target("long-finishes").check
    assert not finished(_cell("long-turn", user_turns=2, unfinished=1))[0]
    cached = _target("summary-cache").check
    assert cached(_cell("fixed-heavy-pastes"))[0] is None  # no summary: not measured
    cell = _cell("fixed-heavy-pastes", summary_prompt_tokens=1_000, summary_cached_tokens=520)
    assert cached(cell) == (False, "52.0% (520 of 1,000 tokens, 0 summaries)")


def test_a_running_turn_s_result_may_be_a_placeholder_only_where_its_cuts_do_not_fit() -> None:
    texts = ["Migrate the jobs."]
    calls = [
        {"role": "assistant", "tool_calls": [{"id": c, "type": "function", "function": {}}]}
        for c in ("c1", "c2")
    ]
    result: Message = {"role": "tool", "tool_call_id": "c1", "content": "x " * 400}
    cleared = clear(result, "read", 400, recall="rc_aaaaaaaaaa")
    newest: Message = {"role": "tool", "tool_call_id": "c2", "content": "y"}
    request = [_user(texts[0]), calls[0], cleared, calls[1], newest]
    for clears, held in (([False], 0), ([True], 1), ((), 0)):
        _, tally = forwarded.running_turn([request], texts, [["c1", "c2"]], clears)
        assert (tally.held, tally.judged) == (held, 1), clears


def test_a_compacting_client_s_first_message_counts_as_pinned_only_before_the_block() -> None:
    # After a client's compaction the first user message it gave back is the one the proxy
    # pins, whichever turn said it: the floor counts it where it stands apart, before the
    # block (counted as the first turn's ask alone, 7 of 16 landings read as above it).
    note = {"role": "assistant", "content": BLOCK + "- Use card 4417."}
    kept = _user("Here is the log of turn 4.")
    ask = _user("Here is the log of turn 6.")
    assert _pinned_before_block([kept, note, ask])
    assert not _pinned_before_block([note, kept, ask])
    assert not _pinned_before_block([_block("Use card 4417."), ask])
    assert not _pinned_before_block([{"role": "system", "content": "x"}])
