"""The token budget of one request: how much of the model's window its prompt may use.

This module owns the arithmetic between a raw token count (from `proxy.core.tokens`) and
the window: the output reserved out of it, the safety margin for our estimate's error, the
calibration that scales our count to the provider's, and the pressure that compaction
triggers and targets are expressed in.

The usable input is `U = window - output reserve - margin`; pressure is a share of U, so a
trigger of 0.85 means "85 % of what the prompt may use", whatever the window. The output
reserve is what the request asks for (`max_completion_tokens`, `max_tokens`); a request that
asks for nothing reserves the configured `output_reserved`, but never more than a quarter of
the window: 4,096 tokens of a 4,096-token window would leave the prompt nothing.

Words matter here: `context_window` is the model's whole window (prompt and output
together). `max_tokens` in the OpenAI API is the *output* limit, which is why it appears only
as one source of the output reserve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Newer OpenAI models take `max_completion_tokens`; `max_tokens` is its deprecated older name
# that other OpenAI-compatible servers still use. A request that sets both means the first.
# The Responses API calls it `max_output_tokens` (its requests keep their fields in the chat
# view the core reads).
_OUTPUT_LIMIT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


@dataclass(frozen=True, slots=True)
class Budget:
    """A model's window less the output reserved out of it, and our count's calibration.

    `calibration` multiplies our raw counts to estimate the provider's (learned from
    `usage.prompt_tokens`: 1.1 means the provider counts 10% more than we do). Raises
    `ValueError` for a window below 1, a negative reserve, or a calibration that is not a
    positive finite number.
    """

    context_window: int
    output_reserve: int
    calibration: float = 1.0
    margin: int = 0
    """Tokens kept free for the error of our estimate (in the provider's tokens)."""
    stated_output: int = 0
    """The output the request itself asks for (0 when it asks for none): the provider
    rejects a prompt that leaves less than this of the window, whatever we reserve."""

    def __post_init__(self) -> None:
        if self.context_window < 1:
            raise ValueError(f"context_window must be at least 1, not {self.context_window}")
        if self.output_reserve < 0:
            raise ValueError(f"output_reserve must not be negative, not {self.output_reserve}")
        if not (math.isfinite(self.calibration) and self.calibration > 0):
            raise ValueError(f"calibration must be positive and finite, not {self.calibration}")
        if self.margin < 0 or self.stated_output < 0:
            raise ValueError("margin and stated_output must not be negative")

    @property
    def available(self) -> int:
        """The usable input U: the window less the output reserve and the margin (at least 1)."""
        return max(1, self.context_window - self.output_reserve - self.margin)

    def beyond_window(self, raw_tokens: int) -> bool:
        """Whether a prompt of `raw_tokens` is over the provider's own limit even if our
        estimate is off by the whole margin: the provider would certainly reject it."""
        return self.estimate(raw_tokens) - self.margin > self.context_window - self.stated_output

    def estimate(self, raw_tokens: int) -> int:
        """The provider's likely count for `raw_tokens` of ours (rounded up)."""
        # Rounding first drops float noise: 100 * 1.1 is 110.00000000000001, which is 110.
        return math.ceil(round(raw_tokens * self.calibration, 6))

    def pressure(self, raw_tokens: int) -> float:
        """The share of the available window a prompt of `raw_tokens` fills (1.0 = full)."""
        return self.estimate(raw_tokens) / self.available

    def fits(self, raw_tokens: int, share: float = 1.0) -> bool:
        """Whether a prompt of `raw_tokens` stays within `share` of the available window."""
        return self.estimate(raw_tokens) <= self.available * share

    def tokens_at(self, share: float) -> int:
        """The most raw tokens that fit within `share` of the available window (at least 0).

        The inverse of `pressure`, for compaction targets: `fits(tokens_at(s), s)` holds and
        `fits(tokens_at(s) + 1, s)` does not. Raises `ValueError` if `share` is not finite.
        """
        if not math.isfinite(share):
            raise ValueError(f"share must be finite, not {share}")
        limit = self.available * share
        # `estimate` rounds up, so a count fits when count x calibration is within the whole
        # tokens of the limit. Float rounding can still put the quotient a token or so off
        # either side of the boundary (for windows of trillions, past the 6-digit rounding).
        tokens = max(0, math.floor(math.floor(limit) / self.calibration))
        while tokens > 0 and self.estimate(tokens) > limit:
            tokens -= 1
        while self.estimate(tokens + 1) <= limit:
            tokens += 1
        return tokens


# The default reserve never takes more than this share of the window.
MAX_DEFAULT_RESERVE_SHARE = 0.25


def output_reserve(body: Mapping[str, Any], default: int) -> int:
    """The output a request reserves: `max_completion_tokens`, else `max_tokens`, else `default`.

    Only positive integers count (not booleans, floats or strings).
    """
    return stated_output(body) or default


def stated_output(body: Mapping[str, Any]) -> int:
    """The output the request asks for: `max_completion_tokens`, else `max_tokens`; 0 if none."""
    for field in _OUTPUT_LIMIT_FIELDS:
        value = body.get(field)
        # `type(...) is int` rather than isinstance: JSON `true` is a bool, and bool is an int.
        if type(value) is int and value > 0:
            return value
    return 0


def request_budget(
    window: int,
    body: Mapping[str, Any],
    *,
    output_reserved: int,
    margin_share: float,
    calibration: float = 1.0,
) -> Budget:
    """The budget of one request to a model with `window` tokens.

    The reserve is what the request states, else `output_reserved` capped at a quarter of
    the window; the margin is `margin_share` of the window. Every caller (the request path,
    `inspect`, the operator's reports) builds its budget here, so they all agree.
    """
    stated = min(stated_output(body), window - 1)
    default = min(output_reserved, int(window * MAX_DEFAULT_RESERVE_SHARE))
    reserve = stated or default
    margin = min(math.ceil(window * margin_share), max(window - reserve - 1, 0))
    return Budget(window, reserve, calibration, margin=margin, stated_output=stated)
