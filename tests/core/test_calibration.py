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


def test_silent_truncation_teaches_nothing() -> None:
    # Ollama's num_ctx: the provider counted what it kept, not what was sent.
    assert updated_calibration(None, estimated=100_000, reported=2048) is None
    assert updated_calibration(1.1, estimated=100_000, reported=2048) == 1.1


def test_a_count_many_times_ours_teaches_nothing() -> None:
    assert updated_calibration(1.0, estimated=1000, reported=50_000) == 1.0


def test_the_bounds_themselves_are_plausible() -> None:
    assert updated_calibration(None, estimated=1000, reported=500) == MIN_FACTOR
    assert updated_calibration(None, estimated=1000, reported=3000) == MAX_FACTOR


@given(
    st.none() | st.floats(min_value=MIN_FACTOR, max_value=MAX_FACTOR),
    st.integers(min_value=64, max_value=10**7),
    st.floats(min_value=0.0, max_value=100.0),
)
def test_an_implausible_ratio_changes_nothing(
    current: float | None, estimated: int, ratio: float
) -> None:
    reported = round(estimated * ratio)
    if MIN_FACTOR <= reported / estimated <= MAX_FACTOR:
        assert updated_calibration(current, estimated=estimated, reported=reported) is not None
    else:
        assert updated_calibration(current, estimated=estimated, reported=reported) == current


@given(
    st.none() | st.floats(min_value=MIN_FACTOR, max_value=MAX_FACTOR),
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**7),
)
def test_factor_stays_in_bounds(current: float | None, estimated: int, reported: int) -> None:
    factor = updated_calibration(current, estimated=estimated, reported=reported)
    assert factor is None or MIN_FACTOR <= factor <= MAX_FACTOR
