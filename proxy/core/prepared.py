"""Prepared summaries: the names under which a summary written ahead of time is found again.

A summary is written off the request path (`proxy.service.preparer`), so the compaction that
needs it must find it by what it summarizes. A summary of a conversation's span is named by
the span's chain key: the previous note the span follows (its anchor: the note of the last
compaction, or none) chained with each message of the span as the plan sees it (old tool
results already cleared, which is deterministic). Every prefix of a span has its own key, so
a compaction whose span has grown since the summary was written finds the summary of the
longest prefix it covers. A note the proxy wrote without a summary (a truncation marker) is
named by its text and its conversation: the summary written later of what it dropped
is folded in at the next compaction in its place, as that compaction's previous summary.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from proxy.core.digests import chain, digest
from proxy.core.messages import Message
from proxy.core.policy import ContextPolicy
from proxy.core.room import in_room

SPAN = "s:"
NOTE = "n:"
_SUMMARIZING = frozenset({"auto", "summarize"})


def span_keys(anchor: str | None, span: Sequence[Message]) -> list[str]:
    """The key of each prefix of `span` following the note `anchor` (shortest first)."""
    current = digest(["span", anchor])
    keys = []
    for message in span:
        current = chain(current, digest(message))
        keys.append(SPAN + current.hex())
    return keys


def note_key(note: str, conversation: str) -> str:
    """The key of the summary that stands in for what the note `note` dropped in
    `conversation` (a session id): a marker's text alone ("[40 earlier messages omitted]") is
    the same in many conversations, and what stands before it changes when the pinned task
    goes too."""
    return NOTE + digest(["note", note, conversation]).hex()


def preparing(pressure: float, policy: ContextPolicy, fixed: float = 0.0) -> bool:
    """Whether a request at `pressure` should have its summary prepared: it is past the
    preparation level (of the room instructions and tools taking `fixed` of the usable
    input leave: `proxy.core.room`) and a compaction of it would summarize."""
    return (
        policy.auto_compact
        and policy.strategy in _SUMMARIZING
        and pressure >= in_room(policy.preparation_level, fixed)
    )


def covered(keys: Sequence[str], found: Collection[str]) -> int:
    """How many messages of the span with `keys` the longest prepared summary among `found`
    covers (0 if none does)."""
    known = set(found)
    return next((len(keys) - i for i, key in enumerate(reversed(keys)) if key in known), 0)
