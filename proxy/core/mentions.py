"""What each message mentions, found once per message and remembered by its digest.

Finding a message's facts and names takes the ledger's fixed patterns over its whole text:
done on every compaction and every background preparation for every old tool result (to
clear it, to check a summary against it), that was a third of the proxy's CPU for a growing
tool-heavy agent. What a message mentions depends on its content alone, so a `Mentions`
finds it once, remembers it under the message's digest (`proxy.core.digests`) and gives it
back to every later compaction of the conversation: the work then follows a conversation's
new messages, not its history. Each finding is linear in the message's length.

Three things are remembered per message:

- its names (`proxy.core.artifacts.names_of`): what a cleared placeholder keeps and what the
  artifact trail lists;
- its ranked facts (`proxy.core.ledger.ranked_facts`): what a summary is checked against;
- its statements (`proxy.core.statements.message_statements`): what the ledger carries of
  what a user or an instruction said. Every plan sizes the ledger of the whole
  conversation, system prompt included: ranking a long prompt's sentences again at each
  plan was a third of a plan's time.

Pure: a `Mentions` is a cache, like the token counter's, that the service holds for the life
of the process and passes into the plan; it does no I/O and reads no clock. A plan in a
worker thread takes one made by `apart` (it writes only its own tables), merged back
afterwards.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from proxy.core.artifacts import names_of
from proxy.core.digests import Digests, digest
from proxy.core.ledger import Ranked, ranked_facts
from proxy.core.messages import Message
from proxy.core.statements import Statement, message_statements

NAMES_CACHE_SIZE: Final = 65_536
"""Messages whose names are remembered (a few short strings each)."""
FACTS_CACHE_SIZE: Final = 8_192
"""Messages whose facts are remembered: a message's facts are many more, and only a span
being summarized needs them."""
STATEMENTS_CACHE_SIZE: Final = 16_384
"""Messages whose statements are remembered (user and instruction messages, mostly short)."""

_T = TypeVar("_T")


class Mentions:
    """The names and facts of messages, each found once, least recently used forgotten."""

    __slots__ = (
        "_digest",
        "_digests",
        "_facts",
        "_facts_size",
        "_names",
        "_names_size",
        "_parent",
        "_statements",
    )

    def __init__(
        self, *, names_size: int = NAMES_CACHE_SIZE, facts_size: int = FACTS_CACHE_SIZE
    ) -> None:
        self._names: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
        self._facts: OrderedDict[bytes, tuple[Ranked, ...]] = OrderedDict()
        self._statements: OrderedDict[bytes, tuple[Statement, ...]] = OrderedDict()
        self._names_size = names_size
        self._facts_size = facts_size
        self._digests: Digests | None = None
        self._digest: Callable[[object], bytes] = digest
        self._parent: Mentions | None = None

    def for_request(self, digests: Digests) -> Mentions:
        """These caches, taking message digests from `digests` (one request's table, which
        the token counter and the chain hashes share: each message is hashed once)."""
        keyed = copy.copy(self)
        keyed._digests = digests
        keyed._digest = digests.of
        return keyed

    def names(self, message: Message) -> tuple[str, ...]:
        """The names `message` adds to the artifact trail (`names_of`)."""
        parent = None if self._parent is None else self._parent._names
        key = self._digest(message)
        return _cached(self._names, parent, key, message, names_of, self._names_size)

    def facts(self, message: Message) -> tuple[Ranked, ...]:
        """`message`'s ranked facts (`ranked_facts`)."""
        parent = None if self._parent is None else self._parent._facts
        key = self._digest(message)
        return _cached(self._facts, parent, key, message, ranked_facts, self._facts_size)

    def statements(self, message: Message, is_task: bool) -> tuple[Statement, ...]:
        """`message`'s statements (`message_statements`)."""
        parent = None if self._parent is None else self._parent._statements
        # The task's statements rank apart: its own entry.
        key = self._digest(message) + (b"t" if is_task else b"")
        return _cached(
            self._statements,
            parent,
            key,
            message,
            lambda m: message_statements(m, is_task),
            STATEMENTS_CACHE_SIZE,
        )

    def apart(self) -> Mentions:
        """A cache for one piece of work in a worker thread (a plan): it writes what it
        finds into tables of its own (and a copy of the request's digests), and looks up
        what it does not know in this cache's tables, one `dict.get` each (see
        `TokenCounter.apart` for why that is safe while this thread changes them). Pass it
        to `merge` afterwards, on this cache's own thread."""
        apart = copy.copy(self)
        apart._parent = self
        apart._names, apart._facts, apart._statements = OrderedDict(), OrderedDict(), OrderedDict()
        if self._digests is not None:
            apart._digests = self._digests.copy()
            apart._digest = apart._digests.of
        return apart

    def merge(self, apart: Mentions) -> None:
        """Remember what a cache made by `apart` found (and its digests, when both serve one
        request)."""
        for key, names in apart._names.items():
            _store(self._names, key, names, self._names_size)
        for key, facts in apart._facts.items():
            _store(self._facts, key, facts, self._facts_size)
        for key, said in apart._statements.items():
            _store(self._statements, key, said, STATEMENTS_CACHE_SIZE)
        if self._digests is not None and apart._digests is not None:
            self._digests.update(apart._digests)


def _cached(
    cache: OrderedDict[bytes, _T],
    parent: Mapping[bytes, _T] | None,
    key: bytes,
    message: Message,
    find: Callable[[Message], _T],
    size: int,
) -> _T:
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
        return found
    if parent is not None:
        found = parent.get(key)
        if found is not None:
            return found
    found = find(message)
    _store(cache, key, found, size)
    return found


def _store(cache: OrderedDict[bytes, _T], key: bytes, value: _T, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > size:
        cache.popitem(last=False)
