"""What a turn forwards: the value each step of its compaction returns.

A turn (`turns.py`) is what the request brought; an `Outcome` is what is decided about it.
The first is the turn's view as it stands (`unchanged`); a hook's message, a compaction
frozen as a checkpoint (`compactor.py`), another request's checkpoint adopted, the emergency
compaction after an overflow (`chat.py`) each return the next one. Nothing changes an
outcome in place, so a caller holds what was decided when it got it, and the service's
request path reads as the sequence of values it goes through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeGuard

from proxy.core.messages import Message
from proxy.core.session import Checkpoint
from proxy.service.turns import Turn


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a turn forwards, and what compaction did to get there.

    A value: each step of the compaction (a hook's message, a plan frozen as a checkpoint,
    another request's checkpoint adopted, an emergency compaction after an overflow) returns
    the next one, so what a caller holds is what was decided when it got it.
    """

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    pressure: float
    checkpoint: Checkpoint | None
    """The checkpoint `messages` extend: the turn's own, or the one a compaction stored."""
    strategy: str | None = None
    injected: tuple[Message, ...] = ()
    sent: int = 0
    """Our count of the request as the client sent it (before any checkpoint was applied)."""
    tried: bool = False
    """Whether the plan ran (not waiting under the trigger, off, or malformed)."""
    summary_wait_s: float = 0.0
    """How long the compaction waited for the summarizer (only an explicit one does)."""
    recalls: Mapping[str, tuple[Message, ...]] = field(default_factory=dict)
    """What the recall ids this turn's compaction named stand for: a recall in this very
    request is answered from here, before the store has them (`proxy.service.recalls`)."""

    @property
    def forwarded(self) -> list[Message]:
        return [*self.messages, *self.injected]

    def over(self, turn: Turn, checkpoint: Checkpoint) -> Outcome:
        """This outcome forwarding the turn's view over `checkpoint` instead."""
        messages = turn.view(checkpoint)
        return replace(
            self,
            messages=messages,
            tokens_after=turn.tokens(messages),
            checkpoint=checkpoint,
            strategy=checkpoint.strategy,
        )

    def newer(self, checkpoint: Checkpoint | None) -> TypeGuard[Checkpoint]:
        """Whether `checkpoint` covers more of the conversation than the one forwarded."""
        covered = self.checkpoint.covered if self.checkpoint else 0
        return checkpoint is not None and checkpoint.covered > covered


def unchanged(turn: Turn) -> Outcome:
    """The turn's view as it stands, before any compaction of this turn."""
    messages = turn.view(turn.checkpoint)
    tokens = turn.tokens(messages)
    return Outcome(messages, tokens, tokens, turn.budget.pressure(tokens), turn.checkpoint)


@dataclass(slots=True, eq=False)
class Uncounted:
    """A turn's view forwarded before it is counted: the turns whose count cannot change
    what is forwarded (below any level where something is done before forwarding, by a
    bound made without encoding; `Compactor.uncounted`). The count is made while the
    provider works (`count_soon`), so the new messages' encoding is off the answer's path,
    and what follows the answer reads the same `Outcome` a counted turn gives."""

    messages: list[Message]
    count: Callable[[], Outcome]
    done: Outcome | None = None
    """The outcome, once counted."""

    @property
    def forwarded(self) -> list[Message]:
        return self.messages

    def then(self, step: Callable[[Outcome], Outcome]) -> Uncounted:
        """This view, its outcome passed through `step` once counted."""
        count = self.count
        return Uncounted(self.messages, lambda: step(count()))

    def counted(self) -> Outcome:
        """The outcome: counted now, unless it was already."""
        if self.done is None:
            self.done = self.count()
        return self.done

    def count_soon(self) -> None:
        """Count it on the event loop two rounds of callbacks from now, while the request
        it forwards goes out and is answered: the HTTP client writes the body in a task of
        its own, scheduled as this task waits, which this lets go first."""
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self._count_quietly)

    def _count_quietly(self) -> None:
        try:
            self.counted()
        except Exception:  # `counted` raises it again, on the request's path
            return
