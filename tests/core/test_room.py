"""The room a fixed head leaves: the levels are shares of it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.budget import Budget
from proxy.core.room import MAX_FIXED_SHARE, fixed_share, in_room

BUDGET = Budget(context_window=10_000, output_reserve=0)


def test_with_no_head_the_levels_are_the_policy_s() -> None:
    assert in_room(0.45, 0.0) == 0.45
    assert fixed_share(BUDGET, 0) == 0.0


def test_a_head_of_seventy_percent_leaves_the_levels_in_its_room() -> None:
    fixed = fixed_share(BUDGET, 7_000)
    assert fixed == pytest.approx(0.7)
    assert in_room(0.45, fixed) == pytest.approx(0.835)
    assert in_room(0.85, fixed) == pytest.approx(0.955)


def test_a_head_above_the_cap_counts_as_the_cap() -> None:
    assert fixed_share(BUDGET, 9_900) == MAX_FIXED_SHARE
    assert fixed_share(BUDGET, 20_000) == MAX_FIXED_SHARE


@given(
    st.floats(min_value=0, max_value=MAX_FIXED_SHARE),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
)
def test_levels_keep_their_order_and_stay_within_the_room(
    fixed: float, low: float, high: float
) -> None:
    low, high = sorted((low, high))
    assert fixed <= in_room(low, fixed) <= in_room(high, fixed) <= 1.0 + 1e-12
