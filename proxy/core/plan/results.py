"""What a plan returns: `Unchanged`, `Compacted`, and the `SummaryTask` a compaction leaves for
later (what it removed with no summary covering it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.messages import (
    Message,
)
from proxy.core.summary import (
    Prefix,
    summary_request,
    summary_text,
)


@dataclass(frozen=True, slots=True)
class Unchanged:
    reason: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Compacted:
    messages: list[Message]
    strategy: str
    tokens_before: int
    tokens_after: int
    fits: bool
    """Whether the result fits the usable input (the plan did what it could if not)."""
    steps: tuple[str, ...] = ()
    """Every reduction used, in order (the strategy is "summarize" when one of them is, else
    the last one that is not a finish)."""
    note: str | None = None
    """The compaction block's text (its ledger and trail apart), as the next compaction finds
    it."""
    dropped: SummaryTask | None = None
    """What the compaction removed with no summary covering it, as a summary to write later
    (folded into the next compaction under `note`'s key)."""
    notes: frozenset[str] = frozenset()
    """The digests of the proxy's notes in `messages` (for the checkpoint to keep)."""
    recalls: Mapping[str, tuple[Message, ...]] = field(default_factory=dict)
    """What each recall id the new messages name stands for (`Situation.recall`): the
    messages as the plan had them when it removed them (a span evicted after its results
    were cleared holds their placeholders, whose ids are here too), for the store to
    resolve a `context_recall`."""
    block: str | None = None
    """The newest compaction block as written (ledger and trail included), as it stands in
    `messages` (alone, or merged into a user message); None when no step wrote one."""

    @property
    def covers(self) -> str | None:
        """The span key a summary of `dropped` also stands for (a summary of the whole span
        the compaction was asked to summarize), if it does."""
        return self.dropped.keys[-1] if self.dropped and self.dropped.keys else None


@dataclass(frozen=True, slots=True)
class SummaryTask:
    """A summary to write: `span` folded into `previous` (the summary before it)."""

    span: tuple[Message, ...]
    previous: str | None
    model: str | None
    max_tokens: int
    tools: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    """The span key through each message of `span` in its conversation (`NeedsSummary.keys`):
    a summary found under one covers `span` up to that message (and `previous` with it).
    Empty when the span is not one a compaction was asked to summarize."""
    prefix: Prefix | None = None
    """The conversation as it was forwarded through the span's end (`NeedsSummary.prefix`),
    for a summary request the provider's cache serves; None when it is not known. A task
    `after` a summary of the span's start keeps it: the span still ends there."""
    recall: str | None = None
    """The recall id the truncation marker this summary will replace names: the summary
    names it too, so what it condenses stays one recall away."""

    def after(self, count: int, previous: str) -> SummaryTask:
        """The task left when a summary (`previous`) covers the first `count` messages."""
        return replace(self, span=self.span[count:], previous=previous, keys=self.keys[count:])

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]:
        """The summarizer request for one part of the span (when it is summarized in parts,
        each part folds in the summary of the parts before it)."""
        return summary_request(
            part, previous=previous, model=self.model, max_tokens=self.max_tokens
        )

    def note(self, summary: str) -> str:
        """`summary` as the note that stands for the span (what a later compaction folds)."""
        return summary_text(summary, condensed=len(self.span), tools=self.tools, recall=self.recall)
