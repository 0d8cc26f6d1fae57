"""`plan_compaction` and the strategy's layers, cheapest first: shrink old turns, trim a
result over its share, clear old results, summarize, truncate. Each returns a plan once the
target is reached; what is left above it is landed (`landing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from proxy.core.mentions import Mentions
from proxy.core.plan.cuts import cap_messages, clear_old
from proxy.core.plan.eviction import Eviction
from proxy.core.plan.landing import land
from proxy.core.plan.results import Compacted, Unchanged
from proxy.core.plan.situation import Counter, Situation
from proxy.core.plan.summarize import NeedsSummary
from proxy.core.plan.work import NOTE_OVERHEAD, Work, mentions_or_new, model_of
from proxy.core.room import in_room
from proxy.core.summary import (
    summary_request,
)
from proxy.core.tool_results import (
    is_tool_result,
)
from proxy.core.turn_budget import shrink_old_turns
from proxy.core.units import group_units, is_well_formed

Plan = Unchanged | Compacted | NeedsSummary


def plan_compaction(
    situation: Situation, counter: Counter, mentions: Mentions | None = None
) -> Plan:
    """Decide what to forward for `situation`.

    `mentions` remembers what each message mentions across plans (the service keeps one for
    the life of the process); without it the plan finds each message's once, for itself.
    """
    tokens = counter.messages(situation.messages) + counter.tools(situation.body)
    if not is_well_formed(group_units(situation.messages)):
        # Malformed input is the client's to fix: forwarded as sent, never silently repaired.
        return Unchanged("malformed", tokens)
    reason = _reason_to_wait(situation, tokens, situation.fixed(counter))
    if reason is not None:
        return Unchanged(reason, tokens)
    # Only now the work that reads the whole conversation (its statements, its pins).
    work = Work(situation, counter, list(situation.messages), mentions_or_new(mentions))
    for layer in _layers(situation):
        outcome = layer(work)
        if outcome is not None:
            return outcome
    land(work)
    if not work.steps:
        return Unchanged("nothing_to_remove", work.before)
    landed = work.result()
    if not _frees_enough(situation, work.fixed, tokens, landed.tokens_after):
        return Unchanged("saves_too_little", tokens)
    return landed


def _layers(situation: Situation) -> tuple[_Layer, ...]:
    layers = _LAYERS[situation.policy.strategy]
    if not situation.whole:
        return layers
    # A client's compaction condenses everything into the block, whatever the strategy (what
    # is not in it is gone from the client's history): from the original messages, since
    # nothing is left to trim or clear, summarized where the strategy summarizes.
    return (_summarize_layer, _truncate_layer) if _summarize_layer in layers else (_truncate_layer,)


def _reason_to_wait(situation: Situation, tokens: int, fixed: float) -> str | None:
    if situation.force:
        return None
    budget, policy = situation.budget, situation.policy
    fits = budget.fits(tokens)
    if not policy.auto_compact:
        return "auto_compact_off"
    if budget.pressure(tokens) < in_room(policy.compression_trigger, fixed):
        return "under_trigger"
    cooling = situation.turns_since_compaction is not None and (
        situation.turns_since_compaction < policy.cooldown_turns
    )
    # A request that cannot fit at all is compacted even in cooldown.
    return "cooldown" if cooling and fits else None


WORTH_SHARE: Final = 0.5
"""The least share of the gap between trigger and target (in room) a compaction that lands
short of its target must free, while the request fits: see `_worth_its_miss`."""


def _frees_enough(situation: Situation, fixed: float, tokens: int, after: int) -> bool:
    """Whether a compaction from `tokens` to `after` that did not reach its target frees
    enough to be worth the prompt cache it costs (everything after its first change is read
    again): where what must stay (the running turn, the working set) keeps the landing near
    the trigger, it would free a result's worth, and the next request or the one after would
    compact again. While the request fits the usable input it is forwarded as it is
    instead, and compacted once it no longer fits, when there is more to remove (Anthropic's
    context editing asks the same of an edit with `clear_at_least`). A forced compaction
    always frees enough."""
    budget, policy = situation.budget, situation.policy
    if situation.force or not budget.fits(tokens):
        return True
    gap = in_room(policy.compression_trigger, fixed) - in_room(policy.compaction_target, fixed)
    return budget.pressure(tokens) - budget.pressure(after) >= gap * WORTH_SHARE


def _trim_layer(work: Work) -> Plan | None:
    policy, budget = work.situation.policy, work.situation.budget
    cap = int(budget.context_window * policy.tool_result_max_share)
    cap_messages(work, cap, is_tool_result, "trim_tool_results")
    return work.outcome()


def _clear_layer(work: Work) -> Plan | None:
    clear_old(work)
    return work.outcome()


def _summarize_layer(work: Work) -> Plan | None:
    # A summary condenses everything before the recent window, not just enough to reach
    # the target: the provider's prompt cache is lost from the span's start on either way,
    # so a deeper summary costs no more cache and puts the next one many turns further off.
    allowances = work.allowances
    eviction = Eviction.find(work, deep=True, note_tokens=allowances.summary + NOTE_OVERHEAD)
    if eviction is None:
        return None
    if not _summary_frees_enough(work):
        return Unchanged("saves_too_little", work.before)
    request = summary_request(
        eviction.evicted,
        previous=eviction.previous,
        model=model_of(work.situation.body),
        max_tokens=allowances.summary,
    )
    return NeedsSummary(request, eviction.evicted, eviction, eviction.previous)


def _summary_frees_enough(work: Work) -> bool:
    """Whether truncating the span instead, and landing the rest, frees enough to be worth a
    compaction (`_frees_enough`): a summary frees less (by its allowance at the most), so
    where that does not, the request waits for a summary until it no longer fits (what is
    landed after a summary only frees more)."""
    situation = work.situation
    if situation.force or not situation.budget.fits(work.before):
        return True
    trial = Work(situation, work.counter, list(work.messages), work.mentions)
    _truncate_layer(trial)
    land(trial)
    return trial.done() or _frees_enough(situation, work.fixed, work.before, trial.total())


def _truncate_layer(work: Work) -> Plan | None:
    eviction = Eviction.find(work, deep=work.situation.force, note_tokens=NOTE_OVERHEAD)
    if eviction is None:
        return None
    eviction.apply(eviction.marker(), "truncate")
    return work.outcome()


def _shrink_turns_layer(work: Work) -> Plan | None:
    budget = work.situation.policy.max_context_turns
    if budget:
        work.update(shrink_old_turns(work.messages, budget, work.pins), "max_context_turns")
        return work.outcome()
    return None


_Layer = Callable[[Work], Plan | None]

_LAYERS: dict[str, tuple[_Layer, ...]] = {
    "auto": (_shrink_turns_layer, _trim_layer, _clear_layer, _summarize_layer, _truncate_layer),
    "trim_tool_results": (_shrink_turns_layer, _trim_layer),
    "clear_tool_results": (_shrink_turns_layer, _clear_layer),
    "summarize": (_shrink_turns_layer, _summarize_layer),
    "truncate": (_shrink_turns_layer, _truncate_layer),
}
