"""Calibration: learning how far our token estimates are from the provider's counts.

Our tokenizer is not the provider's (another model family, hidden template tokens, images
counted differently), so every response's `usage.prompt_tokens` is compared with our
estimate of the very payload that was sent, and a per-model factor follows the ratio as a
moving average. Estimates are multiplied by it (`Budget.calibration`).

The factor is clamped: a provider that silently truncates the prompt (Ollama's `num_ctx`,
LM Studio's rolling window) reports far fewer tokens than were sent, and learning that would
make the proxy believe the window is emptier than it is.
"""

from __future__ import annotations

MIN_FACTOR = 0.5
MAX_FACTOR = 3.0
# Weight of the newest sample: a few responses move the factor, one outlier does not.
WEIGHT = 0.3
# Tiny prompts say little about the ratio (fixed template tokens dominate them).
MIN_SAMPLE_TOKENS = 64


def updated_calibration(current: float | None, *, estimated: int, reported: int) -> float | None:
    """The factor after one response; `current` unchanged when the sample says nothing."""
    if estimated < MIN_SAMPLE_TOKENS or reported <= 0:
        return current
    ratio = min(max(reported / estimated, MIN_FACTOR), MAX_FACTOR)
    if current is None:
        return ratio
    return current + WEIGHT * (ratio - current)


def resolve_window(
    *,
    configured: int | None,
    known: int | None,
    reported: int | None,
    learned: int | None,
    default: int,
) -> tuple[int, str]:
    """The model's window and where it came from.

    The first of: the `models:` entry, the table of well-known models, the upstream's
    `/v1/models`, the `context.context_window` default. A window learned from an overflow
    error caps whichever it is: the provider saying "the maximum context length is N" is
    harder evidence than any table (a deployment may serve a model with a smaller window).
    """
    candidates = ((configured, "configured"), (known, "known model"), (reported, "upstream"))
    window, source = next(((w, s) for w, s in candidates if w), (default, "default"))
    if learned and learned < window:
        return learned, "learned from an overflow error"
    return window, source
