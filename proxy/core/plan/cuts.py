"""The reductions that leave a message in its place: a tool result trimmed or cleared to a
placeholder, a paste cut to head and tail, the recent window's results and texts cut, the
oldest first and each only as far as the goal still needs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.core import pastes
from proxy.core import statements as ledger
from proxy.core.messages import (
    Message,
    is_instruction,
    role,
    text,
    texts,
    with_texts,
)
from proxy.core.plan.work import Work
from proxy.core.tool_results import (
    NOTE_ALLOWANCE,
    clear,
    is_cleared,
    is_tool_result,
    is_trimmed,
    trim,
)

# A trimmed message keeps at least this many tokens of its text: less is all note and no text.
_MIN_CUT = 64
LEAST_CUT = NOTE_ALLOWANCE + _MIN_CUT
"""The least a cut takes, its note with it."""
WORTH_CUTTING = LEAST_CUT + _MIN_CUT
"""A tool result no longer than this stays whole: a cut to its least would hardly save."""
_PASTE_KEPT = 96
"""What an old paste keeps of its head and tail, beside the user's words (like a cleared
result's placeholder, enough to say what it was)."""
CUT_ATTEMPTS = 4
# Steps that finish a landing; the strategy reported is the last step that is not one (or


def cap_messages(work: Work, cap: int, eligible: Callable[[Message], bool], step: str) -> None:
    messages = list(work.messages)
    for index, message in enumerate(work.messages):
        if not eligible(message) or is_trimmed(message) or work.holds_note(message):
            continue
        tokens = work.counter.message(message)
        if tokens > cap:
            name = work.tool_name(index)
            trimmed = trim(
                message,
                max_tokens=cap,
                count=work.counter.text,
                tool_name=name,
                names=_names(work, message),
                recall=work.recall_of([message]),
            )
            # A result barely over a small cap would grow by the note: keep it whole then.
            if work.counter.message(trimmed) < tokens:
                messages[index] = trimmed
    work.update(messages, step)


def cut_pastes(work: Work, messages: list[Message], indices: range) -> None:
    """Cut what the user pasted in messages `indices` (never the running turn's) to head and
    tail, as old tool results are cleared: a paste is data, and its id recalls it whole.
    The user's words beside it stay as they were."""
    for index in indices:
        if _holds_paste(work, index):
            messages[index] = _paste_cut(work, index, _PASTE_KEPT)


def _holds_paste(work: Work, index: int) -> bool:
    """Whether message `index` is a user message (not the running turn's, not the working
    set's latest copy) whose paste a cut would make smaller."""
    message = work.messages[index]
    return (
        role(message) == "user"
        and index != work.pins.running
        and index != work.working_at()
        and bool(texts(message))
        and not work.holds_note(message)
        and any(s.rank == ledger.PASTE for s in work.mentions.statements(message, False))
        and not pastes.is_cut(text(message))
    )


def _paste_cut(work: Work, index: int, size: int) -> Message:
    """Message `index` with its pastes cut so that it takes about `size` tokens (never less
    than its words)."""
    message = work.messages[index]
    # A Messages or Responses user message is text parts: each is cut in place.
    bodies = texts(message)
    cut = pastes.cut_texts(bodies, size, work.counter.text, work.recall_of([message]))
    count = work.counter.text
    if cut == bodies or sum(map(count, cut)) >= sum(map(count, bodies)):
        return message
    return with_texts(message, cut)


def trim_recent(work: Work, *, newest: bool = True, slack: int = 0) -> None:
    """Cut the recent window's tool results (the running turn's, the one the user asks about)
    to head and tail, the oldest first, until the target is reached: the newest results are
    cut, never cleared or dropped while they fit cut, and none below its fair share of the
    room. The newest result of all is cut only when that reaches the target, and only with
    `newest` (after the block is fitted: the block's last summary lines and chatter are
    worth less than what the model just asked for); short of the target, it is what must
    stay. (A paste the window holds fits it: the window is bounded by the room the target
    leaves, and a paste is never the newest unit or the running turn's tool exchange, the
    two it holds whatever their size.) `slack`: what fitting the block can still give, which
    the newest result's cut need not."""
    results = _recent_results(work, _worth_cutting)
    last = results[-1:] if results and _is_newest(work, results[-1]) else []
    if results:
        _cut_oldest_first(
            work,
            results,
            "trim_recent",
            Goal(work.target, slack=slack),
            spared=() if newest else last,
            reaching=last,
        )


def clear_recent(work: Work) -> None:
    """The next form down for a recent window that does not fit the usable input with its
    results cut to their least (a long single turn in a small window): every result but the
    newest as its placeholder, all at once (the prompt cache is lost from the first one
    either way), before any round is folded. A placeholder keeps the round, names the
    result's recall id and what it mentioned, and shows none of it. Only where the strategy
    clears results (`auto`, `clear_tool_results`): one that only truncates or summarizes
    folds the rounds instead."""
    clears = work.situation.policy.strategy in ("auto", "clear_tool_results")
    if not clears or work.total() <= work.allowances.limit:
        return
    results = _recent_results(work, lambda w, i: is_tool_result(w.messages[i]))
    newest = results[-1:] if results and _is_newest(work, results[-1]) else []
    messages = list(work.messages)
    for index in results:
        if index in newest or is_cleared(messages[index]) or work.holds_note(messages[index]):
            continue
        placeholder = _placeholder(work, index)
        if work.counter.message(placeholder) < work.counter.message(messages[index]):
            messages[index] = placeholder
    work.update(messages, "clear_recent")


def _recent_results(work: Work, eligible: Callable[[Work, int], bool]) -> list[int]:
    """The recent window's messages that `eligible` takes, the working set's latest copy
    apart."""
    start = min(work.pins.recent, len(work.messages))
    working = work.working_at()
    return [i for i in range(start, len(work.messages)) if i != working and eligible(work, i)]


def _is_newest(work: Work, index: int) -> bool:
    """Whether message `index` is the conversation's newest tool result."""
    return not any(is_tool_result(m) for m in work.messages[index + 1 :])


def _worth_cutting(work: Work, index: int) -> bool:
    """Whether message `index` is a tool result a cut would make smaller by more than a few
    lines: one hardly bigger than a cut's least (its note and a few lines) stays whole. A
    result an earlier compaction cut to a larger share (the room was larger then) already
    carries its note: cut again, everything it gives is room, and in a long turn a dozen of
    them together are what stands between the request and its target."""
    message = work.messages[index]
    if not is_tool_result(message):
        return False
    tokens = work.counter.message(message)
    return tokens > WORTH_CUTTING or (is_trimmed(message) and tokens > LEAST_CUT)


@dataclass(frozen=True, slots=True)
class Goal:
    """Where a round of cuts aims: `tokens` in all, no cut below `least` (a cut's least,
    `LEAST_CUT`: its note and a few lines; less where the goal is the window, which comes
    before a few lines of text), and `slack` that fitting the block can still give."""

    tokens: int
    least: int = LEAST_CUT
    slack: int = 0


def _cut_oldest_first(
    work: Work,
    indices: list[int],
    step: str,
    goal: Goal,
    *,
    spared: Sequence[int] = (),
    reaching: Sequence[int] = (),
) -> None:
    """Cut messages `indices` to head and tail, the oldest first and each only as far as
    `goal` still needs, and none below its fair share of the room they have at the goal
    (`fair_share`) or the goal's least: the newest is the last to be cut, and never to a
    stub while older ones keep more. Those `spared` count in the shares but are not cut;
    those `reaching` (the newest result) keep at least the least, and stay whole where
    cutting them to it would still miss the goal, the block's slack given too. Short of
    the goal with the others at their share, the conversation lands as low as cutting takes
    it (landing just under the usable input would leave it over the trigger, to be compacted
    again on the next turn)."""
    count, least = work.counter.message, goal.least
    total = work.total()
    messages = list(work.messages)
    sizes = [count(messages[index]) for index in indices]
    room = goal.tokens - (total - sum(sizes))
    share = fair_share(sizes, room)
    newest = [i for i in indices if i in reaching]
    if newest and share < least:
        # What the model just asked for keeps at least a cut's least: the others share the
        # rest of the room.
        rest = [size for i, size in zip(indices, sizes, strict=True) if i not in newest]
        share = fair_share(rest, room - least * len(newest))
    for index, tokens in zip(indices, sizes, strict=True):
        wanted = tokens - (total - goal.tokens)
        if index in spared or total <= goal.tokens:
            continue
        if index in newest and wanted + goal.slack < least:
            continue  # cut to its least, it would still miss the goal: it stays whole
        size = max(wanted, share, least)
        if tokens <= size:
            continue
        cut = _cut_to(work, index, size, least)
        saved = tokens - count(cut)
        # A cut barely under its note's size can come out no smaller: the message stays whole.
        messages[index] = cut if saved > 0 else messages[index]
        total -= max(saved, 0)
    work.update(messages, step)


def _placeholder(work: Work, index: int) -> Message:
    """Tool result `index` as clearing leaves an old one: one line with its recall id."""
    message = work.messages[index]
    rid = work.recall_of([message])
    tokens = work.counter.message(message)
    return clear(message, work.tool_name(index), tokens, work.mentions.names(message), rid)


def fair_share(sizes: Sequence[int], room: int) -> int:
    """The most each of messages of `sizes` may keep for all of them to take `room` tokens:
    those under it stay whole and give what they leave to the others (max-min fairness, as
    water fills the deepest vessels last). Everything fitting, the largest size."""
    left, waiting = room, len(sizes)
    for size in sorted(sizes):
        share = max(left, 0) // waiting
        if size > share:
            return share
        left, waiting = left - size, waiting - 1
    return max(sizes, default=0)


def _cut_to(work: Work, index: int, size: int, least: int) -> Message:
    """Message `index` cut to head and tail at about `size` tokens: a cut lands near its
    size, not on it (characters per token vary along a text), so one that overshoots is
    made again from the original, smaller by the overshoot."""
    original, cap, attempts = work.messages[index], size, 1
    name = work.tool_name(index)
    names = _names(work, original)
    rid = work.recall_of([original])
    count = work.counter.text
    cut = trim(original, max_tokens=cap, count=count, tool_name=name, names=names, recall=rid)
    over = work.counter.message(cut) - size
    while over > 0 and cap > least and attempts < CUT_ATTEMPTS:
        cap, attempts = max(cap - over, least), attempts + 1
        cut = trim(original, max_tokens=cap, count=count, tool_name=name, names=names, recall=rid)
        over = work.counter.message(cut) - size
    return cut


def _names(work: Work, message: Message) -> Sequence[str] | None:
    """The names a cut of `message` lists when it cuts them away: a tool result's are found
    once (`work.mentions`); any other message's, by the cut itself."""
    return work.mentions.names(message) if is_tool_result(message) else None


def cap_recent(work: Work) -> None:
    """Cut the text of the recent messages, only as far as fitting needs: the user's own
    newest words are never cut just to reach a target, and the working set's latest copy
    only when nothing else left fits the window."""
    goal = work.target if work.target_override is not None else work.allowances.limit
    working = work.working_at()
    for last_resort in (False, True):
        indices = [
            i
            for i in range(work.pins.recent, len(work.messages))
            if _cappable(work, i) and (last_resort or i != working)
        ]
        if indices and work.total() > goal:
            _cut_oldest_first(work, indices, "cap_recent", Goal(goal, least=_MIN_CUT))


def _cappable(work: Work, index: int) -> bool:
    message = work.messages[index]
    return (
        index != work.pins.running  # what the model answers now goes as the user sent it
        and not is_instruction(message)
        # A string only: over the Messages API the uncalibrated first count errs high (no
        # public tokenizer), and as a last resort this cut aider's files message, which fit.
        and isinstance(message.get("content"), str)
        and not is_trimmed(message)
        and not work.holds_note(message)
    )


def clear_old(work: Work) -> None:
    """Clear the tool results before the recent window and cut the pastes there."""
    # Every old result goes once one has to: the provider's prompt cache is lost from the
    # first cleared result on anyway, so clearing only what reaches the target would pay
    # that miss again a few turns later for the next few (Anthropic's context editing
    # `clear_at_least` answers the same trade-off).
    messages = list(work.messages)
    for index in range(work.pins.recent):
        message = messages[index]
        if is_tool_result(message) and not is_cleared(message):
            tokens = work.counter.message(message)
            names = work.mentions.names(message)  # found once per result, not per clearing
            rid = work.recall_of([message])
            placeholder = clear(message, work.tool_name(index), tokens, names, rid)
            if work.counter.message(placeholder) < tokens:  # a short result stays whole
                messages[index] = placeholder
    cut_pastes(work, messages, range(work.pins.recent))
    work.update(messages, "clear_tool_results")
