"""Lessons: which window an overflow error may teach about a tenant's model.

A window learned from an overflow error caps the model's window for every later request of
the tenant (`proxy.core.windows.decide_window`), so it must be the provider's word about the
request that was sent, not a sentence that only looks like one. An error body can quote the
client's own text (a validation error echoing the message it refused, a gateway wrapping a
tool's output), and a sentence such as "the maximum context length is 1000 tokens" in that
text is classified as overflow like the real thing. The numbers must therefore agree with
what we know of the request:

- a stated prompt size must be close to our estimate of the forwarded prompt (in the
  provider's tokens: our count times the tenant's calibration). `PROMPT_TOLERANCE` is wide
  enough for the tokenizers of other families (10 to 30 % apart from ours) before any
  calibration has corrected them, and narrow enough that a number from another request, a
  pasted log or an invented sentence rarely lands in it;
- the stated limit must explain an overflow: below the prompt, or below the prompt plus the
  output the request reserved, since a request that fits is not refused for its length;
- when no prompt size is stated nothing ties the sentence to this request, so the limit is
  believed only when it is below what we sent (plus the output) and within a factor
  `UNSTATED_SHARE` of it: the proxy sends what fits the window it believes, and a window far
  smaller than that is more likely a quoted number than a provider's;
- no window is learned below `MIN_WINDOW`: no chat model has one that small.

What is not believed is not used at all, neither learned nor used to size the retry.

Rule: pure. The caller hands in the verdict and its own estimate.
"""

from __future__ import annotations

from proxy.core.overflow import Verdict

MIN_WINDOW = 512
"""The smallest window believed (the smallest chat models have 2,048)."""
PROMPT_TOLERANCE = 0.3
"""How far a stated prompt may be from our estimate, as a share of the estimate."""
UNSTATED_SHARE = 0.5
"""Without a stated prompt: the smallest limit believed, as a share of what we sent."""


def window_lesson(verdict: Verdict, *, sent: int, output: int | None = None) -> int | None:
    """The window `verdict` may teach, or None when its numbers are not about this request.

    `sent` is our estimate of the forwarded prompt in the provider's tokens (calibrated);
    `output` the output reservation the request asked for (None or 0: none).
    """
    limit = verdict.limit
    if not verdict.overflow or limit is None or limit < MIN_WINDOW:
        return None
    reserved = verdict.requested_output or output or 0
    prompt = verdict.prompt_tokens
    if prompt is None:
        believed = sent * UNSTATED_SHARE <= limit < sent + reserved
        return limit if believed else None
    if not _matches(prompt, sent, lower_bound=verdict.prompt_is_lower_bound):
        return None
    # vLLM's lower bound is the limit less the output plus one: still above the limit.
    return limit if limit < prompt + reserved else None


def _matches(prompt: int, sent: int, *, lower_bound: bool) -> bool:
    """Whether a stated prompt size can be the size of what we sent."""
    if prompt > sent * (1 + PROMPT_TOLERANCE):
        return False
    # A lower bound (vLLM >= 0.16 counts only up to the limit) says the prompt is at least
    # that long: it cannot be too small, only too large.
    return lower_bound or prompt >= sent * (1 - PROMPT_TOLERANCE)
