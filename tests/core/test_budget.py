"""The token budget: window less output reserve, calibration, pressure and its inverse."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.budget import Budget, output_reserve, request_budget


def test_available_is_the_window_less_the_reserve() -> None:
    assert Budget(context_window=128_000, output_reserve=4096).available == 123_904


def test_available_never_drops_below_one() -> None:
    assert Budget(context_window=8192, output_reserve=10_000).available == 1


def test_estimate_applies_calibration_rounding_up() -> None:
    assert Budget(1000, 0).estimate(333) == 333
    assert Budget(1000, 0, calibration=1.1).estimate(100) == 110  # not 111 from float noise
    assert Budget(1000, 0, calibration=1.1).estimate(101) == 112
    assert Budget(1000, 0, calibration=0.5).estimate(3) == 2


def test_pressure_is_the_share_of_available() -> None:
    budget = Budget(context_window=1100, output_reserve=100, calibration=1.2)
    assert budget.pressure(0) == 0.0
    assert budget.pressure(500) == 0.6
    assert budget.pressure(1000) == 1.2


def test_fits_within_a_share() -> None:
    budget = Budget(context_window=1100, output_reserve=100)
    assert budget.fits(1000)
    assert not budget.fits(1001)
    assert budget.fits(750, share=0.75)
    assert not budget.fits(751, share=0.75)


def test_tokens_at_is_the_largest_count_that_fits() -> None:
    budget = Budget(context_window=1100, output_reserve=100, calibration=1.1)
    assert budget.tokens_at(0.5) == 454  # 454 * 1.1 = 499.4 -> 500; 455 -> 501
    assert budget.tokens_at(0.0) == 0
    assert budget.tokens_at(-1.0) == 0


@pytest.mark.parametrize("share", [math.inf, -math.inf, math.nan])
def test_tokens_at_refuses_a_share_that_is_not_finite(share: float) -> None:
    with pytest.raises(ValueError, match="share must be finite"):
        Budget(1000, 0).tokens_at(share)


@given(
    window=st.integers(min_value=1, max_value=2_000_000),
    reserve=st.integers(min_value=0, max_value=200_000),
    calibration=st.floats(min_value=0.1, max_value=10.0),
    share=st.floats(min_value=0.0, max_value=2.0),
)
def test_tokens_at_inverts_pressure(
    window: int, reserve: int, calibration: float, share: float
) -> None:
    budget = Budget(window, reserve, calibration)
    tokens = budget.tokens_at(share)
    assert budget.fits(tokens, share)
    assert budget.pressure(tokens) <= share
    assert not budget.fits(tokens + 1, share)


@pytest.mark.parametrize(
    ("window", "calibration", "share"),
    [(8_734_051_499_811, 0.17, 1.0), (376_842, 0.14, 0.29)],  # float noise either side
)
def test_tokens_at_corrects_float_noise(window: int, calibration: float, share: float) -> None:
    budget = Budget(window, 0, calibration)
    tokens = budget.tokens_at(share)
    assert budget.fits(tokens, share)
    assert not budget.fits(tokens + 1, share)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"context_window": 0, "output_reserve": 0}, "context_window must be at least 1"),
        ({"context_window": 10, "output_reserve": -1}, "output_reserve must not be negative"),
        ({"context_window": 10, "output_reserve": 0, "calibration": 0.0}, "calibration"),
        ({"context_window": 10, "output_reserve": 0, "calibration": -1.0}, "calibration"),
        ({"context_window": 10, "output_reserve": 0, "calibration": math.nan}, "calibration"),
        ({"context_window": 10, "output_reserve": 0, "calibration": math.inf}, "calibration"),
    ],
)
def test_invalid_budgets_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Budget(**fields)


@pytest.mark.parametrize(
    ("body", "reserve"),
    [
        ({}, 4096),
        ({"max_completion_tokens": 1000}, 1000),
        ({"max_tokens": 500}, 500),
        ({"max_completion_tokens": 1000, "max_tokens": 500}, 1000),  # the newer name wins
        ({"max_completion_tokens": 0, "max_tokens": 500}, 500),  # invalid: the next one
        ({"max_completion_tokens": -5, "max_tokens": 500}, 500),
        ({"max_completion_tokens": True, "max_tokens": 500}, 500),  # JSON true is no count
        ({"max_completion_tokens": "1000", "max_tokens": 500}, 500),
        ({"max_completion_tokens": 1000.0, "max_tokens": 500}, 500),
        ({"max_completion_tokens": None, "max_tokens": 500}, 500),
        ({"max_tokens": True}, 4096),
        ({"max_tokens": False}, 4096),
        ({"max_tokens": 0}, 4096),
        ({"max_tokens": -1}, 4096),
        ({"max_tokens": "500"}, 4096),
    ],
)
def test_output_reserve(body: dict[str, Any], reserve: int) -> None:
    assert output_reserve(body, default=4096) == reserve


def test_the_default_reserve_takes_at_most_a_quarter_of_the_window() -> None:
    small = request_budget(4096, {}, output_reserved=4096, margin_share=0.03)
    assert (small.output_reserve, small.margin, small.stated_output) == (1024, 123, 0)
    assert small.available == 4096 - 1024 - 123
    stated = request_budget(4096, {"max_tokens": 3000}, output_reserved=4096, margin_share=0.03)
    assert (stated.output_reserve, stated.stated_output) == (3000, 3000)
    huge = request_budget(4096, {"max_tokens": 9000}, output_reserved=0, margin_share=0.03)
    assert huge.output_reserve == 4095
    assert huge.available == 1


def test_beyond_the_window_only_when_the_margin_cannot_explain_it() -> None:
    budget = Budget(1000, 100, margin=30, stated_output=100)
    assert not budget.beyond_window(900 + 30)
    assert budget.beyond_window(900 + 31)
    with pytest.raises(ValueError, match="must not be negative"):
        Budget(1000, 100, margin=-1)
