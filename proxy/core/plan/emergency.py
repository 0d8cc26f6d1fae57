"""The emergency plan: compact hard, with no LLM call, after the provider said the request
overflowed."""

from __future__ import annotations

from dataclasses import replace

from proxy.core.budget import Budget
from proxy.core.mentions import Mentions
from proxy.core.messages import (
    Message,
    is_instruction,
    is_text_only,
)
from proxy.core.plan.cuts import cap_messages
from proxy.core.plan.landing import land
from proxy.core.plan.results import Compacted, Unchanged
from proxy.core.plan.situation import ARTIFACTS_FLOOR, ARTIFACTS_SHARE, Counter, Situation
from proxy.core.plan.work import Work, mentions_or_new
from proxy.core.tool_results import (
    is_tool_result,
)
from proxy.core.units import is_well_formed


def plan_emergency(
    situation: Situation,
    counter: Counter,
    *,
    stated_limit: int | None = None,
    mentions: Mentions | None = None,
) -> Compacted | Unchanged:
    """Compact hard, with no LLM call, after the provider said the request overflowed.

    Keeps half the usual recent window, caps any single tool result or text message, clears
    old tool results and truncates, until the request is at most half the size of the
    rejected one, and fits the limit the error stated if it stated one. `Unchanged` when
    nothing could be removed: the service then returns the provider's error as it came.
    `mentions` as for `plan_compaction`.
    """
    policy = situation.policy.replace(keep_recent=situation.policy.keep_recent // 2)
    hard = replace(situation, policy=policy, turns_since_compaction=None, force=True)
    work = Work(
        hard, counter, list(situation.messages), mentions_or_new(mentions), summarizes=False
    )
    if not is_well_formed(work.units):
        return Unchanged("malformed", work.before)
    work.target_override = _emergency_target(work, stated_limit)
    # The block's allowances were sized for the usual target; the emergency lands far lower
    # (half the rejected request, or the stated limit), so its ledger gets the same share of
    # that target as of the usual one, or the ledger alone could push the retry over.
    scaled = int(work.target * situation.policy.ledger_share / situation.policy.compaction_target)
    work.allowances = replace(work.allowances, ledger=min(work.allowances.ledger, scaled))
    # The trail too, with its floor (at most an eighth of the target): it is the only carrier
    # of what the removed tool results said.
    share = int(work.target * ARTIFACTS_SHARE / situation.policy.compaction_target)
    trail = max(min(ARTIFACTS_FLOOR, work.target // 8), share)
    work.allowances = replace(work.allowances, artifacts=min(work.allowances.artifacts, trail))
    work.size_block()
    work.regroup()
    budget = situation.budget
    cap = min(int(budget.context_window * policy.tool_result_max_share), work.target // 2)
    # What the model answers now goes as the user sent it, even here: a request its running
    # ask alone overflows gets the provider's error, not a cut of the user's words.
    running = None if work.pins.running is None else work.messages[work.pins.running]

    def cappable(message: Message) -> bool:
        return message is not running and _emergency_cappable(message)

    cap_messages(work, max(cap, 1), cappable, "emergency")
    land(work)
    if not work.steps:
        return Unchanged("nothing_to_remove", work.before)
    return replace(work.result(), strategy="emergency")


def _emergency_target(work: Work, limit: int | None) -> int:
    """Half the rejected request, or what fits the stated limit (a window in the provider's
    tokens, which the calibration converts), whichever is smaller."""
    target = work.before // 2
    if limit is not None:
        budget = work.situation.budget
        stated = Budget(limit, min(budget.output_reserve, limit - 1), budget.calibration)
        target = min(target, stated.tokens_at(1.0))
    return target


def _emergency_cappable(message: Message) -> bool:
    # Instructions are never cut; multimodal content is not flattened to text.
    return is_tool_result(message) or (not is_instruction(message) and is_text_only(message))
