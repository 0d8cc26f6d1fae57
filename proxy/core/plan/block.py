"""The compaction block shortened to the room what must stay leaves it: its summary's last
lines, then the trail's and the ledger's lowest-ranked entries, only as far as the target
needs and only when that reaches it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from proxy.core import artifacts, turn_calls
from proxy.core import statements as ledger
from proxy.core.messages import (
    Message,
)
from proxy.core.plan.cuts import CUT_ATTEMPTS
from proxy.core.plan.work import Work
from proxy.core.summary import (
    TOOLS_REMINDER,
    note_digest,
    replace_note,
)


def fit_block(work: Work, *, shed: bool = False, goal: int | None = None) -> None:
    """Shorten the block written in this compaction to the room what must stay leaves it
    (the running turn's user message can take most of a small window): first its summary's
    last lines (the part any summarizer could write), then the trail's paths and the
    ledger's chatter, each part in proportion to its size, only as far as the target still
    needs, and only when that reaches it (`shed`: the trail's ids and the ledger's
    specifics and task too, see `shed_block`; `goal`: the tokens to reach instead of the
    target)."""
    done = _fit_note(work, work.block, shed=shed, goal=goal)
    if done is not None:
        work.note, work.block = done


def block_slack(work: Work) -> int:
    """What fitting a block could take at the most: the one written in this compaction, or
    without one the newest earlier note (`fit_earlier`, never shed); what a cut
    elsewhere need not take when the block gives it."""
    block = work.block
    if block is None:
        earlier = _earlier_notes(work)
        block = earlier[-1] if earlier else None
    if block is None or _block_index(work, block) is None:
        return 0
    count = work.counter.text
    return max(count(block) - count(fitted(block, count(block), count)[1]), 0)


def _earlier_notes(work: Work) -> list[str]:
    """The notes of earlier compactions the conversation holds, oldest first."""
    notes = (
        work.note_of(m) or next(iter(work.detach_notes(m)[1][-1:]), None) for m in work.messages
    )
    return [note for note in notes if note is not None and note != work.block]


def fit_earlier(work: Work) -> None:
    """Last of all, the newest note of an earlier compaction shortened as `fit_block`
    shortens this one's (never shed: its facts are the user's), when that alone reaches the
    target: one that stands inside the running turn (a client's compaction block, which the client
    keeps after its latest user message) or alone before it cannot be evicted, and the turn
    grows by a round a request."""
    earlier = _earlier_notes(work)
    if earlier:
        _fit_note(work, earlier[-1])


def may_shed(work: Work) -> bool:
    """Whether a block may be shed to the user's rules (`fit_block`'s `shed`): only with
    recall on (what it lists is then a recall away) and only to fit the usable input. The
    ledger's facts, specifics and task are what must stay of what the user said: reaching
    the target alone is no reason to hide them (a request that fits and cannot reach it is
    forwarded as it is, `layers._frees_enough`)."""
    return work.situation.recall is not None and work.total() > work.allowances.limit


def _fit_note(
    work: Work, block: str | None, *, shed: bool = False, goal: int | None = None
) -> tuple[str, str] | None:
    """`fit_block` of `block`: its shortened text (ledger and trail apart) and whole, once
    it stands in the conversation in place of `block`; None when it stayed as it was."""
    found = _block_index(work, block)
    if block is None or found is None:
        return None
    count = work.counter
    aim = work.target if goal is None else goal
    excess = work.total() - aim

    def fitted_to(excess: int) -> tuple[str, str, list[Message], int]:
        note, shortened = fitted(block, excess, count.text, shed=shed)
        messages = list(work.messages)
        messages[found] = replace_note(messages[found], block, shortened)
        over = count.messages(messages) + work.tools + work.beside - aim
        return note, shortened, messages, over

    # A block that cannot be made small enough stays whole: the request lands above the
    # target (or the usable input, `goal`), and nothing the block carries is lost for no gain.
    barest = fitted_to(work.total())
    if barest[3] > 0:
        return None
    step, previous = 0, None
    for _ in range(CUT_ATTEMPTS):
        note, shortened, messages, over = fitted_to(excess)
        # Each part's saving is counted apart; the message as a whole can count a little
        # more (tokens merge differently at the joins): the overshoot is cut again, and
        # short of the target after a few tries the barest block is taken. A try that gave
        # the same block as the one before was absorbed by an entry's size (a statement or
        # a path goes whole): the next asks twice as much more.
        if over <= 0:
            break
        step = max(over, 2 * step if shortened == previous else 0)
        excess, previous = excess + step, shortened
    else:
        note, shortened, messages, _ = barest
    work.notes.add(note_digest(shortened))
    work.update(messages, "fit_block")
    return note, shortened


def fitted(
    block: str, excess: int, count: Callable[[str], int], *, shed: bool = False
) -> tuple[str, str]:
    """`block` less `excess` tokens where it can be (see `fit_block`): its text without
    ledger and trail (the running turn's calls listed in it), and the block. What goes, in
    order: the summary's last lines, the line naming the tools, the trail's names a kept
    statement quotes, then the trail's and the ledger's lowest-ranked entries."""
    rest, kept = ledger.without_ledger(block)
    note, trail = artifacts.without_trail(rest)
    # The running turn's calls stay listed whatever else goes: a call no message and no line
    # names is one the agent runs again.
    note, calls = turn_calls.without_calls(note)
    shortened = _shortened(note, count(note) - excess, count)
    excess -= count(note) - count(shortened)
    if excess > 0:
        # The line naming the tools restates what the request offers: it goes before anything
        # the user said (a schema-heavy client's thirty names cost more than its ledger).
        bare = _without_reminder(shortened)
        excess -= count(shortened) - count(bare)
        shortened = bare
    shortened = turn_calls.with_calls(shortened, calls)
    floor = ledger.rules(kept) if shed else ledger.above_chatter(kept)
    if excess > 0:
        # A name that a statement the ledger keeps to the last quotes (the booking id the
        # user gave) is not the trail's alone: it goes first, and nothing is lost.
        quoted = [statement.text for statement in floor]
        alone = [name for name in trail if not any(name in text for text in quoted)]
        excess -= artifacts.cost(trail, count) - artifacts.cost(alone, count)
        trail = alone
    if excess > 0:
        # The rest from the trail and the ledger in proportion to their sizes: each keeps
        # what ranks first in it (the ids and the leading paths; the user's rules,
        # constraints and specifics), and each loses its least first (other paths, chatter).
        # Neither gives what only it carries: the trail keeps its ids, hashes, versions and
        # error codes, the ledger the user's rules, specifics and task.
        trail_cost, ledger_cost = artifacts.cost(trail, count), ledger.cost(kept, count)
        from_trail = math.ceil(excess * trail_cost / max(trail_cost + ledger_cost, 1))
        least = 0 if shed else artifacts.cost(artifacts.identifiers(trail), count)
        trail = artifacts.selected(trail, max(trail_cost - from_trail, least), count)
        least = ledger.cost(floor, count)
        kept = ledger.selected(kept, max(ledger_cost - (excess - from_trail), least), count)
    return shortened, ledger.with_ledger(artifacts.with_trail(shortened, trail), kept)


def _block_index(work: Work, block: str | None) -> int | None:
    """Where `block` stands in the conversation (alone or merged into a message), if it does."""
    for index, message in enumerate(work.messages):
        standalone = work.note_of(message)
        if block in ([standalone] if standalone is not None else work.detach_notes(message)[1]):
            return index
    return None


def _shortened(note: str, room: int, count: Callable[[str], int]) -> str:
    """`note` (a marker or a summary, without its ledger and trail) within `room` tokens
    where it can be: its body's last lines go; its first paragraph (how many messages it
    stands for) and its closing line (the tools the model can call) stay."""
    header, _, body = note.partition("\n\n")
    if count(note) <= room or not body:
        return note
    closing = ""
    at = f"\n\n{body}".rfind(f"\n\n{TOOLS_REMINDER}")
    if at != -1:
        body, closing = body[: max(at - 2, 0)], body[at:]
    left = room - count(header) - count(closing)
    lines = clipped(body, max(left, 0), count).rstrip().splitlines()
    # A heading whose lines all went goes too ("Files and paths:" over nothing).
    while lines and (lines[-1].startswith("#") or lines[-1].endswith(":")):
        lines.pop()
    return "\n\n".join(part for part in (header, "\n".join(lines), closing) if part)


def _without_reminder(note: str) -> str:
    """`note` without its closing line naming the tools the model can call, if it has one."""
    at = note.rfind(f"\n\n{TOOLS_REMINDER}")
    return note if at == -1 else note[:at]


def clipped(summary: str, allowance: int, count: Callable[[str], int]) -> str:
    """`summary` within `allowance` tokens: whole lines from the start (a summarizer that
    ignores `max_tokens` must not push the compaction above its target)."""
    if count(summary) <= allowance:
        return summary
    lines = summary.splitlines()
    used = itertools.accumulate(count(line) + 1 for line in lines)
    return "\n".join(line for line, upto in zip(lines, used, strict=True) if upto <= allowance)
