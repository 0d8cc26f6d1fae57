"""Calibration of estimates against reported usage, and where a window comes from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.calibration import MAX_FACTOR, MIN_FACTOR, updated_calibration


def test_first_sample_sets_the_factor() -> None:
    assert updated_calibration(None, estimated=1000, reported=1150) == pytest.approx(1.15)


def test_factor_moves_toward_new_samples() -> None:
    factor = 1.0
    for _ in range(30):
        factor = updated_calibration(factor, estimated=1000, reported=1200) or factor
    assert factor == pytest.approx(1.2, rel=0.01)


def test_useless_samples_change_nothing() -> None:
    assert updated_calibration(1.1, estimated=10, reported=30) == 1.1
    assert updated_calibration(None, estimated=1000, reported=0) is None


def test_silent_truncation_is_clamped() -> None:
    assert updated_calibration(None, estimated=100_000, reported=2048) == MIN_FACTOR


@given(
    st.none() | st.floats(min_value=MIN_FACTOR, max_value=MAX_FACTOR),
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**7),
)
def test_factor_stays_in_bounds(current: float | None, estimated: int, reported: int) -> None:
    factor = updated_calibration(current, estimated=estimated, reported=reported)
    assert factor is None or MIN_FACTOR <= factor <= MAX_FACTOR
