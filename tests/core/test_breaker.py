"""The summarizer's circuit breaker: closed, open for a cool-off, half-open, closed again."""

from __future__ import annotations

from proxy.core.breaker import Breaker


def test_opens_after_the_threshold_of_failures_in_a_row() -> None:
    breaker = Breaker(threshold=3, cool_off_s=60)
    breaker = breaker.failed(0).failed(1)
    assert (breaker.state(1), breaker.allows(1)) == ("closed", True)
    breaker = breaker.failed(2)
    assert (breaker.state(2), breaker.allows(2)) == ("open", False)
    assert breaker.state(61.9) == "open"


def test_tries_again_after_the_cool_off_and_a_success_closes_it() -> None:
    breaker = Breaker(threshold=1, cool_off_s=10).failed(0)
    assert (breaker.state(10), breaker.allows(10)) == ("half_open", True)
    again = breaker.failed(10)
    assert again.state(15) == "open"
    closed = again.succeeded()
    assert (closed.state(15), closed.failures, closed.open_until) == ("closed", 0, None)


def test_a_success_between_failures_resets_the_count() -> None:
    breaker = Breaker(threshold=2).failed(0).succeeded().failed(1)
    assert breaker.state(1) == "closed"
