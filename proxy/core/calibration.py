"""Calibration: learning how far our token estimates are from the provider's counts.

Our tokenizer is not the provider's (another model family, hidden template tokens, images
counted differently), so every response's `usage.prompt_tokens` is compared with our
estimate of the very payload that was sent, and a per-model factor follows the ratio as a
moving average. Estimates are multiplied by it (`Budget.calibration`).

Only plausible samples count: a ratio outside [MIN_FACTOR, MAX_FACTOR] is not a tokenizer's
difference but a count of something else. A provider that silently truncates the prompt
(Ollama's `num_ctx`, LM Studio's rolling window) reports far fewer tokens than were sent, and
learning that would make the proxy believe the window is emptier than it is; a count many
times ours would make it compact a conversation that fits. Such a sample changes nothing
(clamping it instead would still drag the factor to the bound over a few responses).
"""

from __future__ import annotations

MIN_FACTOR = 0.5
MAX_FACTOR = 3.0
# Weight of the newest sample: a few responses move the factor, one outlier does not.
WEIGHT = 0.3
# Tiny prompts say little about the ratio (fixed template tokens dominate them).
MIN_SAMPLE_TOKENS = 64


def updated_calibration(current: float | None, *, estimated: int, reported: int) -> float | None:
    """The factor after one response; `current` unchanged when the sample says nothing or
    is implausible (its ratio outside [MIN_FACTOR, MAX_FACTOR])."""
    if estimated < MIN_SAMPLE_TOKENS or reported <= 0:
        return current
    ratio = reported / estimated
    if not MIN_FACTOR <= ratio <= MAX_FACTOR:
        return current
    if current is None:
        return ratio
    return current + WEIGHT * (ratio - current)
