"""The fair share of the room that cut results keep (`proxy.core.plan.cuts.fair_share`), and
what the newest result keeps of it.

A running turn's results are cut the oldest first, each only as far as the target still
needs and none below its share: max-min fairness, so short results stay whole and give what
they leave to the long ones, and the newest, cut last, is never left a stub while older
ones keep more.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.messages import Message
from proxy.core.plan import plan_compaction
from proxy.core.plan.cuts import LEAST_CUT, WORTH_CUTTING, fair_share
from proxy.core.tool_results import is_cleared, is_trimmed, trim
from tests.builders import assistant_calls, system, tool_result, user
from tests.core.test_plan import run, situation, target_of, words
from tests.core.words import COUNTER


def test_short_messages_stay_whole_and_the_long_share_what_they_leave() -> None:
    assert fair_share([100, 500, 900], 900) == 400  # 100 whole; 800 shared by two
    assert fair_share([100, 200], 1000) == 200  # everything fits: the largest
    assert fair_share([300, 300], 100) == 50
    assert fair_share([300], -50) == 0  # no room at all
    assert fair_share([], 100) == 0


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=30), st.integers(-1000, 60_000))
def test_the_share_fills_the_room_and_no_more(sizes: list[int], room: int) -> None:
    share = fair_share(sizes, room)
    kept = sum(min(size, share) for size in sizes)
    assert kept <= max(room, 0) or share == max(sizes)
    if share < max(sizes):
        # One more token each for those cut would overflow the room.
        assert kept + sum(size > share for size in sizes) > room


def turn(sizes: list[int]) -> list[Message]:
    messages = [system(), user("Port the parser.")]
    for n, size in enumerate(sizes):
        messages += [assistant_calls(f"r{n}"), tool_result(f"r{n}", words(size, f"w{n}"))]
    return messages


def test_the_newest_result_keeps_at_least_its_share_while_older_ones_are_cut() -> None:
    messages = turn([700] * 6)
    asked = situation(messages, window=3000)
    result = run(plan_compaction(asked, COUNTER))
    assert result.tokens_after <= target_of(asked)
    sizes = [COUNTER.message(m) for m in result.messages[3::2]]
    cut = [m for m in result.messages[3::2] if is_trimmed(m) or is_cleared(m)]
    assert cut  # the oldest
    # The newest keeps no less than any older one, cut or not.
    assert sizes[-1] >= max(sizes[:-1])


def test_a_newest_result_whose_share_would_be_a_stub_stays_whole() -> None:
    # Seventy rounds fill the room with calls and placeholders alone: cutting the one the
    # model just asked for to its share would leave it a note and a line, and still miss
    # the target. It stays whole; the request lands above the target, within the window.
    messages = turn([400] * 70)
    asked = situation(messages, window=4000)
    result = run(plan_compaction(asked, COUNTER))
    assert result.messages[-1] == messages[-1]
    assert result.tokens_after > target_of(asked)
    assert result.fits
    older = result.messages[3:-1:2]
    assert all(is_cleared(m) for m in older)
    assert COUNTER.message(messages[-1]) > LEAST_CUT


def test_results_cut_earlier_are_cut_again_before_any_becomes_a_placeholder() -> None:
    # A long turn: the older results were cut by an earlier compaction to a share that was
    # larger then, each now just over a cut's least. Cut again, each would give only a few
    # lines, but together they are what stands between the request and the usable input:
    # they are cut again (to no less than the least), not cleared to placeholders, which
    # come only when the cuts do not fit.
    earlier = [
        trim(
            tool_result(f"r{n}", words(700, f"w{n}")),
            max_tokens=LEAST_CUT + 50,
            count=COUNTER.text,
            tool_name="read",
        )
        for n in range(12)
    ]
    messages = [system(), user("Port the parser.")]
    for n, cut in enumerate(earlier):
        messages += [assistant_calls(f"r{n}"), cut]
    messages += [assistant_calls("r12"), tool_result("r12", words(600, "w12"))]
    assert all(LEAST_CUT < COUNTER.message(m) <= WORTH_CUTTING for m in earlier)
    asked = situation(messages, window=2600)
    assert not asked.budget.fits(COUNTER.messages(messages))
    result = run(plan_compaction(asked, COUNTER))
    assert result.fits
    older = result.messages[3:-2:2]
    assert all(is_trimmed(m) and not is_cleared(m) for m in older)
    assert all(COUNTER.message(m) < COUNTER.message(e) for m, e in zip(older, earlier, strict=True))
    assert result.messages[-1] == messages[-1]
