"""Landing: the fixed order of reductions that brings a plan still above its target down to
it, each only while it is still above (see the package's docstring)."""

from __future__ import annotations

from proxy.core.plan.block import block_slack, fit_block, fit_earlier, may_shed
from proxy.core.plan.cuts import cap_recent, clear_old, clear_recent, trim_recent
from proxy.core.plan.eviction import Eviction
from proxy.core.plan.work import Work


def land(work: Work) -> None:
    """Bring `work` to its target by the fixed order of reductions, each only while it is
    still above, as far as that is possible."""
    steps = (clear_old, _truncate_rest, _release_task, _trim_older, fit_block, _trim_newest)
    # Once rounds are folded, the newest result may have the share it lacked before.
    folding = (clear_recent, _release_running, fit_block, _trim_newest, fit_block, cap_recent)
    for step in (*steps, *folding, _shed_block, fit_earlier):
        if work.done():
            return
        step(work)


def _trim_older(work: Work) -> None:
    """The recent window's results cut, the newest apart (cut after the block is fitted)."""
    trim_recent(work, newest=False)


def _trim_newest(work: Work) -> None:
    """The recent window's results cut, the newest too where that (and fitting the block
    after it) reaches the target."""
    trim_recent(work, slack=block_slack(work))


def _truncate_rest(work: Work) -> None:
    _evict_everything(work)


def _release_task(work: Work) -> None:
    """Let the pinned task go too: its words are then carried by the ledger. Not when the
    task is the running turn's user message (an agent's first turn): that stays in place."""
    first = work.pins.first_user
    if first is None or first >= work.pins.recent or first == work.pins.running:
        return
    work.pin_task = False
    work.regroup()
    if _evict_everything(work):
        work.steps.append("release_task")


def _evict_everything(work: Work) -> bool:
    """Truncate everything before the recent window; whether anything went."""
    eviction = Eviction.find(work, deep=True, note_tokens=0)
    if eviction is None:
        return False
    steps = len(work.steps)
    eviction.apply(eviction.marker(), "truncate")
    return len(work.steps) > steps


def _release_running(work: Work) -> None:
    """With nothing older left to go and its results cut, a running turn still over the usable
    input is windowed like the rest: its oldest rounds go (its user's words to the ledger, its
    calls to the block's list). Over the target alone, it is what must stay: forwarded with its
    rounds cut, above the target, every call still in place (a folded round an agent cannot
    read back is a round it runs again)."""
    if work.pins.running is None or work.total() <= work.allowances.limit:
        return
    work.keep_running = False
    work.regroup()
    if _evict_everything(work):
        work.steps.append("release_running")


def _shed_block(work: Work) -> None:
    """Last, when nothing else brought the request within the usable input and the block names
    the recall id of what it stands for (`may_shed`): `fit_block` towards the ledger's rules
    and no trail, as far as the usable input needs and no further; what the block no longer
    lists is then a recall away. Above the target alone, the block keeps the user's facts: a
    request that fits is forwarded as it is rather than compacted again for little
    (`layers._frees_enough`). Shed to the target where the barest block reached it, a
    request 65 tokens over the usable input (our count) lost its whole ledger, 331 tokens:
    the three values a schema-heavy client's next calls needed."""
    if may_shed(work):
        fit_block(work, shed=True, goal=work.allowances.limit)
