"""What the plan is given for one request (`Situation`), and the token budget of a compaction
that follows from it (`Allowances`): the block's parts as shares of the room the instructions
and the tools leave."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.budget import Budget
from proxy.core.messages import (
    Message,
    leading_instructions,
)
from proxy.core.policy import ContextPolicy
from proxy.core.room import fixed_share, in_room
from proxy.core.summary import detach_notes, note_digest
from proxy.core.working_set import latest_copy

# The smallest allowances, for tiny windows: a ledger of a few rules, a summary of a few lines.
LEDGER_FLOOR = 256
SUMMARY_FLOOR = 128
# The artifact trail's share of the usable input, and its floor for small windows: room for
# a dozen names (a build id, a checksum, the files touched) whatever the window.
ARTIFACTS_SHARE = 0.03
ARTIFACTS_FLOOR = 192


class Counter(Protocol):
    """What the plan needs of the token counter (see `proxy.core.tokens.TokenCounter`)."""

    def message(self, message: Message) -> int: ...

    def messages(self, messages: Sequence[Message]) -> int: ...

    def tools(self, body: Mapping[str, Any]) -> int: ...

    def text(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything the plan looks at for one request."""

    messages: Sequence[Message]
    body: Mapping[str, Any]
    policy: ContextPolicy
    budget: Budget
    turns_since_compaction: int | None = None
    """Turns since this conversation was last compacted; None if never."""
    force: bool = False
    """Compact now whatever the pressure and cooldown (a manual `/compact`, a hook): every
    layer then takes all it may, not just what reaches the target."""
    notes: frozenset[str] = frozenset()
    """The digests (`note_digest`) of the notes the proxy wrote into `messages` (its
    checkpoint's): only these are read as notes. A message that merely looks like one (a
    model imitating the block it saw, sent back as history) is the client's text."""
    recall: str | None = None
    """The conversation's scope (tenant and session) when the model can recall what this
    compaction removes (`proxy.core.recall`): every placeholder, cut and note then names the
    id of what it stands for. None: recall is off, and the texts say nothing of it."""
    whole: bool = False
    """The client asked for this compaction (`/v1/responses/compact`, `compaction_trigger`):
    everything after the instructions (and the pinned task) is condensed into the block,
    whatever it costs or saves. No recent window, no running turn kept apart; the span is
    summarized (or truncated, as the strategy says) from its original messages, none trimmed
    or cleared first (`proxy.core.compaction_items` gives the client its user messages back
    beside the block)."""
    working: frozenset[bytes] = frozenset()
    """The digests of the messages that are the client's working set (`proxy.core.
    working_set`: what it re-sends whole on every request, aider's files message): the
    latest is kept whole, in the recent window, while the request fits the window."""
    beside: Message | None = None
    """A message of `messages` forwarded again beside the block (`whole`: the latest user
    message, which the client keeps): it is condensed with the rest, but the ledger does not
    repeat what it says, and the block gives way to it as to a running turn (`fit_block`)."""

    resent: int = 0
    """Tokens the client sends again beside the history it asked to have compacted (`whole`
    through `/v1/responses/compact`): its working set, which it keeps out of that history.
    Counted with the head, so the block and the user messages given back are sized for the
    room the next request leaves them."""

    def fixed(self, counter: Counter) -> float:
        """The share of the usable input what goes whole with every request takes: the
        leading instructions, the tools, and the working set's latest copy (kept whole while
        it fits), or what the client sends again beside a history it compacts (`resent`).
        The compaction's levels and allowances apply to the room they leave
        (`proxy.core.room`): counted as history, aider's files kept every request above the
        trigger, and each one compacted again."""
        head = self.messages[: leading_instructions(self.messages)]
        tokens = counter.messages(head) + counter.tools(self.body) + self.resent
        at = latest_copy(self.messages, self.working, self._detached)
        if at is not None:
            tokens += counter.message(self.messages[at])
        return fixed_share(self.budget, tokens)

    def _detached(self, message: Message) -> Message:
        """`message` without the proxy's notes merged into it."""
        return detach_notes(message, lambda note: note_digest(note) in self.notes)[0]


@dataclass(frozen=True, slots=True)
class Allowances:
    """The token budget of one compaction, in our raw tokens."""

    target: int
    """Where the compaction lands (at or below)."""
    limit: int
    """The usable input U: nothing is forwarded above it when compaction can help it."""
    ledger: int
    summary: int
    facts: int
    """The appendix of facts the summary lost."""
    artifacts: int
    """The artifact trail: what removed tool results and calls mentioned."""
    room: int = 0
    """What the instructions and tools leave of the usable input."""

    @classmethod
    def of(cls, budget: Budget, policy: ContextPolicy, fixed: float = 0.0) -> Allowances:
        """The allowances of a request with `budget` under `policy`, whose instructions and
        tools take `fixed` of the usable input: the block's parts are shares of the room
        they leave, and the target is `compaction_target` of that room."""
        limit = budget.tokens_at(1.0)
        room = int(limit * (1 - fixed))
        ledger_size = max(min(LEDGER_FLOOR, room // 4), int(room * policy.ledger_share))
        summary = min(
            policy.summary_max_tokens, max(SUMMARY_FLOOR, int(room * policy.summary_share))
        )
        trail = max(min(ARTIFACTS_FLOOR, room // 8), int(room * ARTIFACTS_SHARE))
        target = budget.tokens_at(in_room(policy.compaction_target, fixed))
        return cls(target, limit, ledger_size, summary, summary // 2, trail, room)
