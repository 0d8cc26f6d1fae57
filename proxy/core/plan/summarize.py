"""A span to summarize (`NeedsSummary`), and the summary that completes it: clipped to its
allowance, without what the user has since replaced, with the facts it lost appended."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.ledger import appendix, ledger_of, missing_facts
from proxy.core.messages import (
    Message,
)
from proxy.core.plan.block import clipped
from proxy.core.plan.eviction import Eviction
from proxy.core.plan.landing import land
from proxy.core.plan.results import Compacted, SummaryTask
from proxy.core.plan.work import Work, model_of
from proxy.core.prepared import span_keys
from proxy.core.summary import (
    Prefix,
    offered_tools,
    summary_text,
)
from proxy.core.tool_results import (
    is_cleared,
    names_kept,
)


@dataclass(frozen=True, slots=True)
class NeedsSummary:
    """The span to summarize and the request to send; finish with `complete` or `fallback`
    (once: the plan's work goes on from there)."""

    request: dict[str, Any]
    span: tuple[Message, ...]
    _eviction: Eviction
    anchor: str | None
    """The note the span follows in the conversation (what its keys are chained from)."""

    @property
    def previous(self) -> str | None:
        """The earlier summary the new one must fold in, if any."""
        return self._eviction.previous

    @property
    def keys(self) -> list[str]:
        """The key of each prefix of the span, shortest first (`proxy.core.prepared`)."""
        return span_keys(self.anchor, self.span)

    @property
    def max_tokens(self) -> int:
        """The summary's allowance."""
        return self._eviction.work.allowances.summary

    @property
    def prefix(self) -> Prefix | None:
        """The conversation as the plan was given it (as it was forwarded) through the span's
        end: what the provider's prompt cache holds, for a summary request it serves.

        The span was cut from the plan's own copy, where trimmed and cleared results keep
        their places: the span's end is the same index in both. None when an earlier step
        removed messages (old turns shrunk to their question and answer): it is not then.
        """
        return self._eviction.prefix()

    def task(self, covered: int = 0, previous: str | None = None) -> SummaryTask:
        """The summary to write of the span after its first `covered` messages, folding in
        `previous` (the summary of those) or, with none covered, the earlier summary."""
        work = self._eviction.work
        return SummaryTask(
            self.span[covered:],
            previous if covered else self.previous,
            model_of(work.situation.body),
            work.allowances.summary,
            tuple(offered_tools(work.situation.body)),
            prefix=self.prefix,
        )

    def request_for(self, part: Sequence[Message], previous: str | None) -> dict[str, Any]:
        """The summarizer request for one part of the span (see `SummaryTask.request_for`)."""
        return self.task().request_for(part, previous)

    def fact_sources(self) -> list[Message]:
        """The messages whose facts `complete` checks the summary against. Finding them
        ahead (`Mentions.facts`, where the summary is prepared) spares the compaction turn
        that work: it was most of a summarizing turn's time, on the event loop."""
        return _fact_sources(self._eviction.evicted, self.previous)

    def rolled(self, note: str) -> NeedsSummary:
        """This plan with `note` as the earlier summary instead of the one the conversation
        holds (the summary written later of what that one's compaction dropped)."""
        return replace(self, _eviction=replace(self._eviction, previous=note))

    def complete(self, summary: str, covered: int | None = None) -> Compacted:
        """The conversation with the span, or its first `covered` messages (a summary
        prepared before the span grew), replaced by `summary` plus what it lost; the rest of
        the span is landed like any conversation above its target."""
        eviction = self._eviction
        if covered is not None and covered < len(self.span):
            shorter = eviction.first(covered)
            if shorter is None:
                return self.fallback()
            eviction = shorter
        work = eviction.work
        kept = eviction.ledger()
        replaced = eviction.replaced()
        within = _without(clipped(summary, work.allowances.summary, work.counter.text), replaced)
        sources = _fact_sources(eviction.evicted, self.previous)
        # What the ledger or the trail lists, the appendix need not list again; nor what the
        # user has since replaced ("$500" after "Budget: $700").
        trail = eviction.trail()
        known = [*(s.text for s in kept), *trail, *replaced]
        checked = _with_lost_facts(within, sources, known, work)
        tools = offered_tools(work.situation.body)
        note = summary_text(
            checked, condensed=eviction.condensed, tools=tools, recall=eviction.recall()
        )
        eviction.apply(note, "summarize", kept, trail)
        land(work)
        return self._finished()

    def fallback(self) -> Compacted:
        """The conversation truncated instead (no summary of the span is at hand)."""
        eviction = self._eviction
        eviction.apply(eviction.marker(), "truncate")
        land(eviction.work)
        return self._finished()

    def _finished(self) -> Compacted:
        result = self._eviction.work.result()
        dropped = result.dropped
        # What was dropped is the span's end: its summary, rolled over the summary of the
        # span's start (or the earlier one), is a summary of the whole span.
        if dropped is None or self.span[len(self.span) - len(dropped.span) :] != dropped.span:
            return result
        keys = tuple(self.keys[len(self.span) - len(dropped.span) :])
        return replace(result, dropped=replace(dropped, keys=keys, prefix=self.prefix))


def _fact_sources(evicted: Sequence[Message], previous: str | None) -> list[Message]:
    """The messages whose facts a summary of `evicted` must keep (folding in `previous`)."""
    # A cleared result's facts went with it (its size is no fact); the names it kept stay.
    sources: list[Message] = [
        {"role": "tool", "content": names_kept(m)} if is_cleared(m) else m for m in evicted
    ]
    # The earlier summary's facts count too: a rolling summary that drops one loses it for
    # good, since the turns it came from are gone.
    if previous:
        sources.insert(0, {"role": "assistant", "content": previous})
    return sources


# --- The summary's facts ---------------------------------------------------------------------


def _without(summary: str, replaced: Sequence[str]) -> str:
    """`summary` without the lines that quote a statement the user has since replaced: an
    extractive summary repeats "Budget: $500" word for word, beside the ledger's "$700"."""
    if not replaced:
        return summary
    lines = summary.splitlines()
    return "\n".join(line for line in lines if not any(old in line for old in replaced))


def _with_lost_facts(summary: str, sources: list[Message], known: Sequence[str], work: Work) -> str:
    """`summary` with the span's facts that neither it nor the rest of the block (`known`:
    the ledger's statements, the trail's names) states appended verbatim, within the facts
    allowance (the best-ranked facts first)."""
    allowance, count = work.allowances.facts, work.counter.text
    stated = "\n".join([summary, *known])
    # Each message's facts are found once (and remembered across compactions); only the
    # bounding is done again for each smaller appendix tried.
    ranked = [work.mentions.facts(message) for message in sources]
    chars = allowance * 4
    while True:
        lost = missing_facts(ledger_of(ranked, max_chars=chars), stated)
        text = appendix(lost)
        if count(text) <= allowance or chars == 0:
            break
        chars //= 2
    body = summary.rstrip()
    return "\n\n".join(part for part in (body, text) if part)
