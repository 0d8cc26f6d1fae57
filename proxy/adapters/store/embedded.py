"""The embedded store (`MemoryStore`): sessions, checkpoints and the archive in this process.

It has the same semantics as the Redis store (checkpoints and prepared summaries are a
session's own, archived messages its tenant's), with an injectable clock for expiry.
Expired entries are dropped when read and by a sweep of at most a few entries per write.
Its memory is bounded twice:

- in bytes, `max_bytes` (256 MiB) for sessions, checkpoints, prepared summaries and archived
  messages together: past it the least recently written session goes (with the archived
  messages no other session of its tenant holds), or the checkpoint or summary written
  longest ago if that is older; a session alone larger than the bound loses its oldest
  messages. Each entry's size is counted when it is written (`sys.getsizeof` of the JSON
  text it is kept as, plus an estimate of the bookkeeping around it), so the accounting is
  O(1) per entry and the bound holds to within a few per cent;
- in entries, least recently written evicted first: `max_sessions` (10,000),
  `max_checkpoints` (2,000), `max_messages` (50,000), locks (10,000) and model facts
  (1,000 models each).

Archived messages are shared by the sessions of a tenant (content-addressed, like in Redis)
and counted: a message goes when the last session whose history or recall ids hold it is
deleted, evicted or expires, so deleting sessions gives their memory back.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from proxy.adapters.store.contract import (
    DEFAULT_SESSION_TTL_S,
    HISTORY_LIMIT,
    TIMELINE_LIMIT,
    WHOLE,
    EndedTurn,
    OpenedTurn,
    RecallIds,
    common_prefix,
    content_hashes,
)
from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    find_checkpoint,
)

_K = TypeVar("_K")
_V = TypeVar("_V")
_SWEEP = 16
"""Entries a write examines for expiry in each table: bounded work per request."""


class _Expiring(Generic[_K, _V]):
    """A bounded map of expiring entries; the least recently written is evicted first.

    A write moves its entry to the end, so where every entry has the same TTL the order is
    also expiry order, and a sweep from the front can stop at the first live entry. With
    `size`, `bytes` is the sum of the entries' sizes; `on_drop` hears of every entry that
    leaves (expired, evicted, popped), not of one a write replaces.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        ttl_s: float,
        max_entries: int,
        size: Callable[[_V], int] | None = None,
        on_drop: Callable[[_K, _V], None] | None = None,
    ) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._max = max_entries
        self._size = size or _no_size
        self._on_drop = on_drop
        self._entries: OrderedDict[_K, tuple[float, _V]] = OrderedDict()
        self.bytes = 0

    def get(self, key: _K) -> _V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._drop(key)
            return None
        return entry[1]

    def put(self, key: _K, value: _V, *, ttl_s: float | None = None) -> None:
        expires = self._clock() + (self._ttl_s if ttl_s is None else ttl_s)
        replaced = self._entries.get(key)
        if replaced is not None:
            self.bytes -= self._size(replaced[1])
        self._entries[key] = (expires, value)
        self.bytes += self._size(value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._drop(next(iter(self._entries)))

    def touch(self, key: _K) -> None:
        value = self.get(key)
        if value is not None:
            self.put(key, value)

    def refresh(self, keys: Sequence[_K]) -> None:
        """`touch` each of `keys` that is live, reading the clock once."""
        now = self._clock()
        expires = now + self._ttl_s
        entries = self._entries
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                continue
            if entry[0] <= now:
                self._drop(key)
                continue
            entries[key] = (expires, entry[1])
            entries.move_to_end(key)

    def pop(self, key: _K) -> _V | None:
        value = self.get(key)
        if value is not None:
            self._drop(key)
        return value

    def discard(self, key: _K) -> None:
        """Drop `key` if it is held, live or not."""
        if key in self._entries:
            self._drop(key)

    def live(self) -> Iterator[tuple[_K, _V]]:
        now = self._clock()
        return ((key, value) for key, (expires, value) in self._entries.items() if expires > now)

    def oldest(self) -> tuple[float, _K] | None:
        """The least recently written entry as (expiry, key), or None when empty."""
        for key, (expires, _value) in self._entries.items():
            return expires, key
        return None

    def sweep(self, limit: int = _SWEEP) -> None:
        now = self._clock()
        for _ in range(min(limit, len(self._entries))):
            key, (expires, _value) = next(iter(self._entries.items()))
            if expires > now:
                return
            self._drop(key)

    def _drop(self, key: _K) -> None:
        _expires, value = self._entries.pop(key)
        self.bytes -= self._size(value)
        if self._on_drop is not None:
            self._on_drop(key, value)


def _no_size(_value: object) -> int:
    return 0


_Key = tuple[str, str]
"""(tenant, name) in the embedded store's tables."""
_SessionKey = tuple[str, str, str]
"""(tenant, session id, name): what a session keeps besides its state (checkpoints,
summaries), as Redis keeps it under the session's hash tag."""


@dataclass(frozen=True, slots=True)
class _Session:
    state: SessionState | None = None
    """None until a turn, a compaction or usage is recorded (only archived so far)."""
    seq: tuple[str, ...] = ()
    refreshed: float = -math.inf
    """When the expiry of the archived messages was last moved (the store's clock)."""
    timeline: tuple[TurnPoint, ...] = ()
    request: str | None = None
    recalls: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The content hashes each recall id stands for; replaced, never changed in place."""
    recalled_hashes: int = 0
    """How many hashes `recalls` holds together, so sizing the session stays O(1)."""


DEFAULT_MAX_BYTES = 256 * 1024 * 1024

# What an entry costs on top of its text, estimated from tracemalloc's count (the test of
# the byte bound checks the estimate): the dict slot, the (tenant, name) key and its two
# strings, the (expiry, value) pair.
_ENTRY_BYTES = 320
_HASH_BYTES = 120
"""One content hash of a session's sequence, with its count in the tenant's references."""
_POINT_BYTES = 200
"""One `TurnPoint` of a session's timeline."""
_RECALL_BYTES = 200
"""One recall id of a session, without its hashes (each counted as `_HASH_BYTES`)."""
_RECORD_BYTES = 150
"""One `CompactionRecord` of a session's history."""
_STATE_BYTES = 500
"""A `SessionState` with its last usage and context report."""


def _text_size(text: str) -> int:
    return _ENTRY_BYTES + sys.getsizeof(text)


def _session_size(session: _Session) -> int:
    history = len(session.state.history) if session.state is not None else 0
    return (
        _ENTRY_BYTES
        + _STATE_BYTES
        + sys.getsizeof(session.request or "")
        + _HASH_BYTES * (len(session.seq) + session.recalled_hashes)
        + _RECALL_BYTES * len(session.recalls)
        + _POINT_BYTES * len(session.timeline)
        + _RECORD_BYTES * history
    )


class MemoryStore:
    """The embedded store: lives in this process, gone when it exits.

    Checkpoints and messages are kept as the JSON text Redis would hold, so both stores
    hand out fresh objects and accept the same values. `clock` (seconds, monotonic) drives
    expiry only; `at` arguments are just data here. `max_bytes` bounds the memory held (see
    the module docstring).
    """

    def __init__(
        self,
        *,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = 10_000,
        max_checkpoints: int = 2_000,
        max_messages: int = 50_000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        ttl = session_ttl_s
        self._max_bytes = max_bytes
        # How many times each archived message occurs in the sequences of its tenant's
        # sessions: at zero it is dropped.
        self._references: dict[_Key, int] = {}
        self._checkpoints = _Expiring[_SessionKey, str](
            clock, ttl_s=ttl, max_entries=max_checkpoints, size=_text_size
        )
        self._sessions = _Expiring[_Key, _Session](
            clock,
            ttl_s=ttl,
            max_entries=max_sessions,
            size=_session_size,
            on_drop=self._session_dropped,
        )
        self._messages = _Expiring[_Key, str](
            clock, ttl_s=ttl, max_entries=max_messages, size=_text_size
        )
        self._locks = _Expiring[_Key, str](clock, ttl_s=ttl, max_entries=10_000)
        self._summaries = _Expiring[_SessionKey, str](
            clock, ttl_s=ttl, max_entries=max_checkpoints, size=_text_size
        )
        self._calibrations = _Expiring[_Key, float](clock, ttl_s=ttl, max_entries=1_000)
        self._windows = _Expiring[_Key, int](clock, ttl_s=ttl, max_entries=1_000)
        self._clock = clock
        # How stale the archived messages' expiry may get before a request moves it: a long
        # history is then not walked on every request, and its messages outlive their
        # session's last request by at least nine tenths of the TTL.
        self._refresh_every_s = ttl / 10

    @property
    def bytes_held(self) -> int:
        """The estimated bytes of sessions, checkpoints, summaries and archived messages."""
        return sum(table.bytes for table in self._bounded())

    def _bounded(self) -> tuple[_Expiring[Any, Any], ...]:
        return (self._sessions, self._checkpoints, self._summaries, self._messages)

    def _shrink(self, keep: _Key | None = None) -> None:
        """Evict the least recently written entries until `max_bytes` holds again.

        Sessions (but `keep`, the one being written), checkpoints and summaries go in the
        order they were written (they share the TTL, so expiry is that order); archived
        messages go with their last session, or oldest first once only `keep` is left.
        """
        while self.bytes_held > self._max_bytes:
            tables: tuple[_Expiring[Any, Any], ...] = (
                self._sessions,
                self._checkpoints,
                self._summaries,
            )
            candidates = [
                (found, table)
                for table in tables
                if (found := table.oldest()) is not None and found[1] != keep
            ]
            if candidates:
                (_expires, key), table = min(candidates, key=lambda pair: pair[0][0])
                table.discard(key)
            elif (message := self._messages.oldest()) is not None:
                self._messages.discard(message[1])
            else:
                return

    def _hold(self, tenant: str, digests: Sequence[str]) -> None:
        references = self._references
        for digest in digests:
            key = (tenant, digest)
            references[key] = references.get(key, 0) + 1

    def _let_go(self, tenant: str, digests: Sequence[str]) -> None:
        """Count `digests` out of the tenant's sequences; drop the messages none holds."""
        references = self._references
        for digest in digests:
            key = (tenant, digest)
            left = references.get(key, 0) - 1
            if left > 0:
                references[key] = left
            else:
                references.pop(key, None)
                self._messages.discard(key)

    def _session_dropped(self, key: _Key, session: _Session) -> None:
        self._let_go(key[0], session.seq)
        for hashes in session.recalls.values():
            self._let_go(key[0], hashes)

    async def ping(self, scope: str = WHOLE) -> None:
        return None

    def fence(self, scope: str, *, down: bool) -> None:
        """A no-op: the embedded store has no parts that fail apart."""

    async def aclose(self) -> None:
        return None

    def _sweep(self) -> None:
        for entries in (
            self._checkpoints,
            self._sessions,
            self._messages,
            self._locks,
            self._summaries,
        ):
            entries.sweep()

    async def find_checkpoint(
        self, tenant: str, session_id: str, hashes: Sequence[str]
    ) -> Checkpoint | None:
        table = self._checkpoints
        stored = {h: text for h in hashes if (text := table.get((tenant, session_id, h)))}
        candidates = {h: Checkpoint.from_json(json.loads(text)) for h, text in stored.items()}
        found = find_checkpoint(hashes, candidates)
        if found is not None:
            table.touch((tenant, session_id, found.prefix_hash))
        return found

    async def put_checkpoint(
        self,
        tenant: str,
        session_id: str,
        checkpoint: Checkpoint,
        record: CompactionRecord | None = None,
        recalls: RecallIds | None = None,
    ) -> Checkpoint:
        if recalls is not None:
            await self.put_recalls(tenant, session_id, recalls.ids, recalls.bodies)
        self._sweep()
        key = (tenant, session_id, checkpoint.prefix_hash)
        existing = self._checkpoints.get(key)
        if existing is not None:
            self._checkpoints.touch(key)
            return Checkpoint.from_json(json.loads(existing))
        self._checkpoints.put(key, json.dumps(checkpoint.to_json()))
        self._shrink()
        if record is not None:
            await self.record_compaction(tenant, session_id, record)
        return checkpoint

    async def drop_checkpoint(self, tenant: str, session_id: str, prefix_hash: str) -> bool:
        return self._checkpoints.pop((tenant, session_id, prefix_hash)) is not None

    def _update(
        self, tenant: str, session_id: str, change: Callable[[SessionState], SessionState]
    ) -> SessionState:
        # No await between read and write: on one event loop this is atomic.
        self._sweep()
        key = (tenant, session_id)
        session = self._sessions.get(key) or _Session()
        state = change(session.state or SessionState())
        self._sessions.put(key, replace(session, state=state))
        self._shrink(key)
        return state

    async def begin_turn(
        self, tenant: str, session_id: str, *, model: str | None, at: float
    ) -> SessionState:
        def change(state: SessionState) -> SessionState:
            chosen = state.model if model is None else model
            return replace(state, turns=state.turns + 1, model=chosen, last_seen=at)

        return self._update(tenant, session_id, change)

    async def open_turn(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None,
        at: float,
        hashes: Sequence[str],
    ) -> OpenedTurn:
        state = await self.begin_turn(tenant, session_id, model=model, at=at)
        return OpenedTurn(state, await self.find_checkpoint(tenant, session_id, hashes))

    async def end_turn(self, tenant: str, session_id: str, ended: EndedTurn) -> None:
        await self.archive(tenant, session_id, ended.messages, hashes=ended.hashes)
        if ended.usage is not None:
            pressure = ended.point.pressure
            await self.record_usage(tenant, session_id, usage=ended.usage, pressure=pressure)
        await self.record_turn(
            tenant, session_id, ended.point, context=ended.context, request=ended.request
        )

    async def record_compaction(
        self, tenant: str, session_id: str, record: CompactionRecord
    ) -> None:
        def change(state: SessionState) -> SessionState:
            history = (*state.history, record)[-HISTORY_LIMIT:]
            return replace(
                state,
                history=history,
                last_compaction_turn=state.turns,
                compactions=state.compactions + 1,
            )

        self._update(tenant, session_id, change)

    async def record_usage(
        self, tenant: str, session_id: str, *, usage: Mapping[str, Any], pressure: float
    ) -> None:
        copied = json.loads(json.dumps(dict(usage)))
        self._update(
            tenant, session_id, lambda s: replace(s, last_usage=copied, last_pressure=pressure)
        )

    async def record_turn(
        self,
        tenant: str,
        session_id: str,
        point: TurnPoint,
        *,
        context: Mapping[str, Any],
        request: Mapping[str, Any] | None = None,
    ) -> None:
        copied = json.loads(json.dumps(dict(context)))

        def change(state: SessionState) -> SessionState:
            return replace(
                state,
                tokens_sent=state.tokens_sent + point.tokens_before,
                tokens_forwarded=state.tokens_forwarded + point.tokens_after,
                recalls=state.recalls + point.recalls,
                last_pressure=point.pressure,
                last_context=copied,
            )

        self._update(tenant, session_id, change)
        key = (tenant, session_id)
        session = self._sessions.get(key) or _Session()
        timeline = (*session.timeline, point)[-TIMELINE_LIMIT:]
        text = session.request if request is None else json.dumps(dict(request))
        self._sessions.put(key, replace(session, timeline=timeline, request=text))
        self._shrink(key)

    async def timeline(self, tenant: str, session_id: str) -> list[TurnPoint]:
        session = self._sessions.get((tenant, session_id))
        return list(session.timeline) if session else []

    async def last_request(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        session = self._sessions.get((tenant, session_id))
        if session is None or session.request is None:
            return None
        loaded: dict[str, Any] = json.loads(session.request)
        return loaded

    async def load_session(self, tenant: str, session_id: str) -> SessionState | None:
        session = self._sessions.get((tenant, session_id))
        return None if session is None else session.state

    async def list_sessions(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[tuple[str, str, SessionState]]:
        found = [
            (owner, session_id, session.state)
            for (owner, session_id), session in self._sessions.live()
            if session.state is not None
            and session.state.last_seen is not None
            and tenant in (None, owner)
        ]
        found.sort(key=lambda row: (row[2].last_seen, row[0], row[1]), reverse=True)
        return found[offset : offset + max(limit, 0)]

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        return self._sessions.pop((tenant, session_id)) is not None

    async def archive(
        self,
        tenant: str,
        session_id: str,
        messages: Sequence[Message],
        *,
        hashes: Sequence[str] | None = None,
    ) -> None:
        if not messages:
            return
        self._sweep()
        seq = content_hashes(messages, hashes)
        key = (tenant, session_id)
        session = self._sessions.get(key) or _Session()
        known = common_prefix(session.seq, seq)
        # Counted in before the old tail is counted out, so a message both hold stays.
        self._hold(tenant, seq[known:])
        self._let_go(tenant, session.seq[known:])
        now, refreshed = self._clock(), session.refreshed
        # The bodies the sequence had already are stored: only their expiry moves, and not
        # on every request.
        if now - refreshed >= self._refresh_every_s:
            self._messages.refresh([(tenant, digest) for digest in seq[:known]])
            refreshed = now
        for digest, message in zip(seq[known:], messages[known:], strict=True):
            if self._messages.get((tenant, digest)) is None:
                self._messages.put((tenant, digest), json.dumps(message))
            else:
                self._messages.touch((tenant, digest))
        self._sessions.put(key, replace(session, seq=seq, refreshed=refreshed))
        self._shrink(key)

    async def archived(self, tenant: str, session_id: str) -> list[Message]:
        session = self._sessions.get((tenant, session_id))
        texts = [self._messages.get((tenant, h)) for h in (session.seq if session else ())]
        return [json.loads(text) for text in texts if text is not None]

    async def put_recalls(
        self,
        tenant: str,
        session_id: str,
        recalls: Mapping[str, Sequence[str]],
        bodies: Mapping[str, Message],
    ) -> None:
        self._sweep()
        for digest, message in bodies.items():
            # Set-if-absent, as Redis's SET NX: a stored body keeps its text and its expiry.
            if self._messages.get((tenant, digest)) is None:
                self._messages.put((tenant, digest), json.dumps(message))
        key = (tenant, session_id)
        if recalls:
            session = self._sessions.get(key) or _Session()
            added = {
                recall_id: tuple(hashes)
                for recall_id, hashes in recalls.items()
                if recall_id not in session.recalls
            }
            # Counted as the archive's sequences are, so a recalled body stays while an id
            # of a live session stands for it, and goes with the last one.
            for hashes in added.values():
                self._hold(tenant, hashes)
            held = session.recalled_hashes + sum(len(hashes) for hashes in added.values())
            merged = {**session.recalls, **added}
            self._sessions.put(key, replace(session, recalls=merged, recalled_hashes=held))
        self._shrink(key)

    async def recalled(self, tenant: str, session_id: str, recall_id: str) -> list[Message] | None:
        session = self._sessions.get((tenant, session_id))
        hashes = None if session is None else session.recalls.get(recall_id)
        if hashes is None:
            return None
        texts = [self._messages.get((tenant, h)) for h in hashes]
        return [json.loads(text) for text in texts if text is not None]

    async def put_summary(self, tenant: str, session_id: str, key: str, text: str) -> None:
        self._sweep()
        self._summaries.put((tenant, session_id, key), text)
        self._shrink()

    async def find_summaries(
        self, tenant: str, session_id: str, keys: Sequence[str]
    ) -> dict[str, str]:
        table = self._summaries
        return {key: text for key in keys if (text := table.get((tenant, session_id, key)))}

    async def swap_tail(self, tenant: str, session_id: str, tail: str) -> str | None:
        # Beside the summaries (a text per session with their TTL and byte bound), under a
        # name no summary key takes (those are digests).
        key = (tenant, session_id, "tail")
        old = self._summaries.get(key)
        await self.put_summary(tenant, session_id, "tail", tail)
        return old

    async def find_prepared(
        self, tenant: str, session_id: str, hashes: Sequence[str], keys: Sequence[str]
    ) -> tuple[Checkpoint | None, dict[str, str]]:
        checkpoint = await self.find_checkpoint(tenant, session_id, hashes)
        return checkpoint, await self.find_summaries(tenant, session_id, keys)

    async def acquire(self, tenant: str, name: str, *, ttl_s: float) -> str | None:
        self._sweep()
        if self._locks.get((tenant, name)) is not None:
            return None
        token = secrets.token_hex(16)
        self._locks.put((tenant, name), token, ttl_s=ttl_s)
        return token

    async def release(self, tenant: str, name: str, token: str) -> bool:
        if self._locks.get((tenant, name)) != token:
            return False
        self._locks.pop((tenant, name))
        return True

    async def calibration(self, tenant: str, model: str) -> float | None:
        return self._calibrations.get((tenant, model))

    async def set_calibration(
        self, tenant: str, model: str, factor: float, *, ttl_s: float
    ) -> None:
        self._calibrations.put((tenant, model), factor, ttl_s=ttl_s)

    async def learned_window(self, tenant: str, model: str) -> int | None:
        return self._windows.get((tenant, model))

    async def learn_window(self, tenant: str, model: str, window: int, *, ttl_s: float) -> None:
        self._windows.put((tenant, model), window, ttl_s=ttl_s)
