"""What the recall workload's forwarded requests show (issue 22, reversible compaction).

The matrix reads every request the proxy forwarded (from the mock's recording) as the chat
messages the proxy's core reads (`MatrixClient.messages`), and tells two kinds apart:

- a recall round: the proxy asking again after answering the model's `context_recall` calls
  itself (its last message is the result of such a call); the client never sent it;
- every other request is one of the client's model calls, in order (summary requests apart).

Judged on the client's requests: whether each that no compaction changed extends the one
before it, its tools and instructions included (what keeps the provider's prompt cache
warm: the tool the proxy adds must not come and go), and where the result that gave a
planted value stood in the request that asked for it (whole, cut, cleared to a placeholder,
condensed into a note, dropped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bench.measures import Tally
from proxy.core import recall
from proxy.core.messages import Message, role, text, tool_call_name, tool_calls
from proxy.core.summary import notes_in
from proxy.core.tool_results import is_cleared, is_trimmed

HEAD: Final = ("instructions", "system", "tools")
"""The fields of a request before its conversation, in the provider's cache prefix (the
Responses API's `instructions`, the Messages API's `system`)."""
_MISSES_KEPT: Final = 5
# How the proxy's answer to a recall call opens when it holds no content (proxy.core.recall).
_FAILED: Final = (
    ("No content is stored", "unknown id"),
    ("The content of", "expired"),
    ("The proxy's archive cannot be reached", "unavailable"),
    (f"{recall.TOOL} needs the id", "no id"),
)
_CUT: Final = "cut from the middle of the recalled content"
_READ_CHARS: Final = 400
"""How far after a path a transcript's placeholder for that read may start and name its id."""


def is_round(messages: Sequence[Message]) -> bool:
    """Whether a forwarded request is a recall round: its last message answers a
    `context_recall` call of the assistant message it follows."""
    if not messages or role(messages[-1]) != "tool":
        return False
    call = str(messages[-1].get("tool_call_id"))
    for message in reversed(messages[:-1]):
        if role(message) == "assistant":
            return tool_call_name(message, call) == recall.TOOL
    return False


def offers(body: Mapping[str, Any]) -> bool:
    """Whether a forwarded request offers `context_recall` (either API's tool shape)."""
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        recall.TOOL in (tool.get("name"), (tool.get("function") or {}).get("name"))
        for tool in tools
        if isinstance(tool, dict)
    )


def head(body: Mapping[str, Any]) -> dict[str, Any]:
    return {field: body.get(field) for field in HEAD}


def stable(
    requests: Sequence[tuple[Mapping[str, Any], Sequence[Any]]], applied: Sequence[str]
) -> Tally:
    """Of the client's requests (each its head and conversation) that no compaction changed
    (`applied`: the proxy's `x-compaction-applied` of each), those extending the one before."""
    if len(requests) != len(applied):
        note = f"{len(requests)} requests forwarded for {len(applied)} answers: not aligned"
        return Tally(0, 0, (note,))
    held, judged = 0, 0
    misses: list[str] = []
    for number in range(1, len(requests)):
        if applied[number] != "none":
            continue
        (before, earlier), (after, later) = requests[number - 1], requests[number]
        judged += 1
        miss = _changed(before, after, earlier, later)
        held += not miss
        if miss and len(misses) < _MISSES_KEPT:
            misses.append(f"request {number + 1}: {miss}")
    return Tally(held, judged, tuple(misses))


def _changed(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    earlier: Sequence[Any],
    later: Sequence[Any],
) -> str:
    """What of the earlier request the later one does not repeat ("" if it extends it)."""
    fields = [field for field in HEAD if before.get(field) != after.get(field)]
    if fields:
        return " and ".join(fields) + " changed"
    if list(later[: len(earlier)]) == list(earlier):
        return ""
    at = next((i for i, (a, b) in enumerate(zip(earlier, later, strict=False)) if a != b), None)
    return f"conversation changed at item {at}" if at is not None else "conversation shorter"


def state(messages: Sequence[Message], call: str | None, value: str) -> str:
    """Where the result of `call` (which gave `value`) stood in a forwarded request (the
    states that show the value are `bench.measures.VISIBLE`)."""
    if call is None:
        return "never read"
    result = next((m for m in messages if m.get("tool_call_id") == call), None)
    if result is None:
        if any(value in text(message) for message in messages):
            return "condensed, value in the block"
        return "condensed" if notes_in(messages) else "dropped"
    if value in text(result):
        return "cut, value shown" if is_trimmed(result) else "whole"
    if is_cleared(result):
        return "cleared"
    return "cut" if is_trimmed(result) else "changed"


def recalls(messages: Sequence[Message], value: str, path: str) -> str:
    """What the recall rounds of a question did, read from its last round's request: the
    calls, what each got back (whole, cut to fit, an unknown id, ...), whether any showed
    `value`, or else the read of `path` that gave it (then cut away or itself compacted),
    and how many ids the recalled content named that the turn did not recall (what a
    deeper chain of notes would have needed)."""
    calls = {
        str(call.get("id")): call
        for message in messages
        for call in tool_calls(message)
        if (call.get("function") or {}).get("name") == recall.TOOL
    }
    results = [text(m) for m in messages if str(m.get("tool_call_id")) in calls]
    if not results:
        return "no recall"
    outcomes = Counter(_outcome(result) for result in results)
    asked = {
        recall.argument_id((call.get("function") or {}).get("arguments")) for call in calls.values()
    }
    named = {rid for result in results for rid in recall.ids_in(result)} - asked
    got = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
    return (
        f"{len(results)} calls ({got}); {_shown(results, value, path)}; {len(named)} more ids named"
    )


def _shown(results: Sequence[str], value: str, path: str) -> str:
    """What the recalled content showed of the value: the value itself, or the read of its
    file with a placeholder naming its id (one more recall away), or neither."""
    if any(value in result for result in results):
        return "the value shown"
    for result in results:
        at = result.find(path)
        # The read's result follows its call in a transcript (`proxy.core.recall`).
        after = result[at : at + _READ_CHARS] if at >= 0 else ""
        if "[tool result cleared" in after and recall.ids_in(after):
            return "its result shown as a placeholder (one more recall away)"
    if any(path in result for result in results):
        return "its path named, not its result"
    return "neither the value nor its file shown"


def _outcome(result: str) -> str:
    failed = next((label for opening, label in _FAILED if result.startswith(opening)), None)
    if failed is not None:
        return failed
    return "cut to fit" if _CUT in result else "whole"
