"""A client's working set: what it re-sends whole on every request, which is not history.

aider sends the files added to the chat as one user message on every request, after the
history and before the new ask; an IDE agent re-sends the open files; others a block of
environment details. Read as history, such a message is the oldest large thing in the recent
window, and a compaction folded it into its block: the files the model must edit went, and
what it saw of them flipped from request to request.

A re-sent copy is told from history by where it stands, not by what it says. A client that
only appends sends the previous request again as the start of the next; every message of it
is history. A message of the previous request that is *not* in the start the two requests
share (the client moved it: new history came in before it) and comes again in the new
request, the same or in a newer version (a message that opens with the same line), is the
client's working set. The plan keeps its latest copy whole while the request fits the window
(`proxy.core.plan`), so what the model sees of it is the same on every request.

Pure: the session remembers `Seen` of each request (its tail's chain hashes and openings) and
hands it to `working_set` on the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.digests import digest
from proxy.core.messages import Message, role, text

TAIL: Final = 16
"""How many of a request's last messages are remembered: a working set stands among the
last few (aider's: the files, "Ok.", the ask)."""
MIN_CHARS: Final = 2_000
"""A working set worth keeping apart is large; a short message re-sent is just a message."""
_OPENING_CHARS = 200


@dataclass(frozen=True, slots=True)
class Seen:
    """What the next request needs of this one: for each of its last `TAIL` body messages,
    its position, the chain hash there, and its opening when it is a large user message."""

    tail: tuple[tuple[int, str, str | None], ...]

    def to_json(self) -> list[list[Any]]:
        return [list(entry) for entry in self.tail]

    @classmethod
    def from_json(cls, data: Sequence[Sequence[Any]]) -> Seen:
        return cls(tuple((int(at), str(chained), opened) for at, chained, opened in data))

    @classmethod
    def parsed(cls, stored: str | None) -> Seen | None:
        """What a store gave back (None: nothing, or what no version of this wrote)."""
        if not stored:
            return None
        try:
            return cls.from_json(json.loads(stored))
        except (ValueError, TypeError):
            return None

    def holds_large(self) -> bool:
        """Whether a large user message is among what was remembered."""
        return any(opened is not None for _, _, opened in self.tail)


def seen(body: Sequence[Message], hashes: Sequence[str]) -> Seen:
    """What to remember of a request whose body is `body` (chain hashes `hashes`)."""
    start = max(len(body) - TAIL, 0)
    return Seen(tuple((i, hashes[i], opening(body[i])) for i in range(start, len(body))))


def opening(message: Message) -> str | None:
    """The first line of a large user message (None for any other): what names the same
    working set in its next version."""
    if role(message) != "user":
        return None
    body = text(message)
    if len(body) < MIN_CHARS:
        return None
    # From its start only: a message can be megabytes, and this runs on every request.
    return body[: 4 * _OPENING_CHARS].lstrip().split("\n", 1)[0][:_OPENING_CHARS]


def working_set(
    previous: Seen | None,
    body: Sequence[Message],
    hashes: Sequence[str],
    digest_of: Callable[[Message], bytes] = digest,
    *,
    had: bool = False,
) -> frozenset[bytes]:
    """The digests of the messages of `body` (chain hashes `hashes`) that are the client's
    working set, given what was `previous`ly seen: large user messages the previous request
    had outside the start both share, sent again (or in a newer version) after it.
    `digest_of`: the request's digests (`Digests.of`), each message hashed once. `had`: the
    previous request had a working set."""
    if previous is None or not previous.tail:
        return frozenset()
    shared = _shared(previous, hashes)
    if shared == 0 and previous.tail[0][0] > 0 and not had:
        return frozenset()  # an edit before what was remembered: nothing can be told apart
    # With `had`, a history rewritten from its start (the client compacted it, through
    # `/v1/responses/compact`: its user messages, then the block) has a working set still:
    # the large messages the previous request ended with, sent again. Told apart only from
    # the request after, the first request of every compacted history counted the files as
    # history, and landed above its target.
    moved = {opened for at, _, opened in previous.tail if at >= shared and opened is not None}
    if not moved:
        return frozenset()
    return frozenset(digest_of(m) for m in body[shared:] if opening(m) in moved)


def _shared(previous: Seen, hashes: Sequence[str]) -> int:
    """How many body messages the two requests share from the start, as far as the
    previous request's remembered tail can tell (0 when none of it is)."""
    shared = 0
    for at, chained, _ in previous.tail:
        if at < len(hashes) and hashes[at] == chained:
            shared = at + 1
    return shared


def latest_copy(
    messages: Sequence[Message],
    working: frozenset[bytes],
    detached: Callable[[Message], Message] = lambda message: message,
) -> int | None:
    """Where the latest copy of the working set (`working`, its digests) stands in `messages`,
    if one does. `detached` gives a message without what the proxy merged into it (a block
    opening the copy, where roles must alternate): that is no part of what the client sent."""
    if not working:
        return None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if role(message) == "user" and digest(detached(message)) in working:
            return index
    return None
