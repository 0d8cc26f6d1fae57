"""What every store promises (`Store`, made of one protocol per role), its one error, and the
helpers both stores share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    content_hash,
)

DEFAULT_SESSION_TTL_S = 30 * 24 * 3600.0
HISTORY_LIMIT = 100
"""Compaction records kept per session: the most recent ones."""
TIMELINE_LIMIT = 200
"""Turn points kept per session: the most recent ones."""


WHOLE = ""
"""The scope of a failure that concerns the whole store (every call goes there)."""


class StoreUnavailableError(Exception):
    """The store cannot be used right now (Redis down, unreachable, refusing), or the part of
    it `scope` names cannot: a Redis Cluster node (`host:port`); `WHOLE` is all of it.

    `fenced`: the call was refused without trying, its scope fenced off (`Lifecycle.fence`)
    by whoever judged it down: news to no one, and maybe stale (the scope may be back by
    the time the refusal is seen)."""

    def __init__(self, message: str, *, scope: str = WHOLE, fenced: bool = False) -> None:
        super().__init__(message)
        self.scope = scope
        self.fenced = fenced


class SessionNotIndexedError(StoreUnavailableError):
    """`begin_turn` counted the turn (`state` is the session after it) but could not list
    the session in the indexes `list_sessions` reads, which live on another node (`scope`):
    one write lost, the turn's state good."""

    def __init__(
        self,
        message: str,
        *,
        scope: str,
        state: SessionState,
        checkpoint: Checkpoint | None = None,
        fenced: bool = False,
    ) -> None:
        super().__init__(message, scope=scope, fenced=fenced)
        self.state = state
        self.checkpoint = checkpoint
        """The checkpoint `open_turn` found with the turn, if any."""


@dataclass(frozen=True, slots=True)
class RecallIds:
    """Recall ids and what they stand for (`Recalls.put_recalls`'s arguments)."""

    ids: Mapping[str, Sequence[str]]
    """Each id's messages, by content hash."""
    bodies: Mapping[str, Message]
    """The messages not archived otherwise, by content hash."""


@dataclass(frozen=True, slots=True)
class EndedTurn:
    """What an answered request leaves in its session (`Sessions.end_turn`): its point on
    the timeline, its context report and body without messages (`record_turn`), its
    messages to archive (`archive`, none: archive nothing) and the usage the provider
    reported (`record_usage` at the point's pressure; None: not reported)."""

    point: TurnPoint
    context: Mapping[str, Any]
    request: Mapping[str, Any] | None = None
    messages: Sequence[Message] = ()
    hashes: Sequence[str] | None = None
    usage: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class OpenedTurn:
    """What a request's turn starts from: its session's state after counting it, and the
    stored checkpoint of the longest prefix of its body."""

    state: SessionState
    checkpoint: Checkpoint | None


class Lifecycle(Protocol):
    """Whether the store answers, which parts of it to leave alone, and its end."""

    async def ping(self, scope: str = WHOLE) -> None:
        """Check the store, or the part of it `scope` names (as a `StoreUnavailableError`
        named it), answers. Raises `StoreUnavailableError`.

        A Redis Cluster node answers when it answers a PING, or when it no longer serves any
        slot (the cluster promoted a replica in its place: its slots answer elsewhere).
        """

    def fence(self, scope: str, *, down: bool) -> None:
        """Fail every call that would go to `scope` at once, without trying it (`down`), or
        route calls there again. A no-op for `WHOLE` (the caller skips the store itself) and
        where the store has no parts."""

    async def aclose(self) -> None:
        """Release connections."""


class Checkpoints(Protocol):
    """Compacted prefixes of a session, found by the chain hashes of the messages they
    replace; each is the session's own (kept with its other keys)."""

    async def find_checkpoint(
        self, tenant: str, session_id: str, hashes: Sequence[str]
    ) -> Checkpoint | None:
        """The session's stored checkpoint covering the longest prefix of the body chained as
        `hashes`."""

    async def put_checkpoint(
        self,
        tenant: str,
        session_id: str,
        checkpoint: Checkpoint,
        record: CompactionRecord | None = None,
        recalls: RecallIds | None = None,
    ) -> Checkpoint:
        """Store `checkpoint` unless its prefix has one already in the session; returns the
        one kept. When it is stored and `record` is given, `record_compaction(record)` is
        done in the same call (one round trip: the compaction turn waits for it); so is
        `put_recalls` of `recalls` (the ids its notes name), whichever checkpoint is kept.

        Set-if-absent: of two replicas compacting the same prefix, the first one wins and
        both forward its messages, so the provider's cache sees one prefix; only the winner
        is recorded as a compaction.
        """

    async def drop_checkpoint(self, tenant: str, session_id: str, prefix_hash: str) -> bool:
        """Forget the session's checkpoint of `prefix_hash` (revert); False if there was none."""


class Sessions(Protocol):
    """Each session's state, its compaction history, its timeline and its last request."""

    async def begin_turn(
        self, tenant: str, session_id: str, *, model: str | None, at: float
    ) -> SessionState:
        """Count a new turn; returns the state after it. `model` None keeps the stored one.

        `at` is Unix time in seconds; it becomes `last_seen` and orders `list_sessions`.
        """

    async def open_turn(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None,
        at: float,
        hashes: Sequence[str],
    ) -> OpenedTurn:
        """`begin_turn` and `find_checkpoint(hashes)` at once: what every request reads
        before anything else, in one round trip to Redis (both are the session's keys)."""

    async def end_turn(self, tenant: str, session_id: str, ended: EndedTurn) -> None:
        """`record_turn`, `archive` and, when it has usage, `record_usage` of what `ended`
        holds, at once: what every answered request leaves, written in one round trip to
        the session's node (and, for new messages, one to each node of their bodies)."""

    async def record_compaction(
        self, tenant: str, session_id: str, record: CompactionRecord
    ) -> None:
        """Append to the history (the last `HISTORY_LIMIT` kept); now is the last compaction."""

    async def record_usage(
        self, tenant: str, session_id: str, *, usage: Mapping[str, Any], pressure: float
    ) -> None:
        """Remember the last response's `usage` and the pressure the request had."""

    async def record_turn(
        self,
        tenant: str,
        session_id: str,
        point: TurnPoint,
        *,
        context: Mapping[str, Any],
        request: Mapping[str, Any] | None = None,
    ) -> None:
        """Append `point` to the timeline (the last `TIMELINE_LIMIT` kept), add its tokens to
        the session's sums, and remember `context` (a `ContextReport`'s JSON) and, when
        given, `request` (the body without its messages, for a manual compaction)."""

    async def timeline(self, tenant: str, session_id: str) -> list[TurnPoint]:
        """The session's turn points, oldest first."""

    async def last_request(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        """The body (without messages) `record_turn` remembered last, if any."""

    async def load_session(self, tenant: str, session_id: str) -> SessionState | None:
        """The session's state, or None when unknown or expired."""

    async def list_sessions(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[tuple[str, str, SessionState]]:
        """(tenant, session id, state) of sessions that began a turn, most recent first.

        `tenant` None lists every tenant's (for the admin). A page may come back short when
        sessions expired since they were last seen; they are dropped from the index. A
        session whose turn could not be indexed (`SessionNotIndexedError`) keeps its place
        from its previous turn until the next one.
        """

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        """Forget the session, its history, timeline, archived sequence and recall ids;
        False if unknown.

        The archived message bodies are shared by the tenant's sessions; they expire on
        their own when no session archives them any more. So do its checkpoints and
        prepared summaries (the operator drops the checkpoints first).
        """


class Archive(Protocol):
    """The original messages of each session, for the operator and a manual compaction."""

    async def archive(
        self,
        tenant: str,
        session_id: str,
        messages: Sequence[Message],
        *,
        hashes: Sequence[str] | None = None,
    ) -> None:
        """Record `messages` as the session's original history (the whole list, in order).

        Each message is stored once per tenant under its content hash (`hashes`, when the
        caller has them already: `content_hash` of each message). The session keeps
        the list of hashes: what the previous list shares with the new one stays, the
        rest is replaced by the new list's remainder, so a growing history only appends
        and an edit or rewind records the new sequence. An empty list records nothing.
        """

    async def archived(self, tenant: str, session_id: str) -> list[Message]:
        """The session's archived history, skipping any message that has expired."""


class Recalls(Protocol):
    """What each recall id of a session stands for (reversible compaction)."""

    async def put_recalls(
        self,
        tenant: str,
        session_id: str,
        recalls: Mapping[str, Sequence[str]],
        bodies: Mapping[str, Message],
    ) -> None:
        """Remember, for the session's TTL (each write restarts it), the content hashes each
        recall id of `recalls` stands for (in order), and store `bodies` (messages by their
        content hash) in the tenant's message store the archive uses, so an id resolves even
        for messages the archive has not stored (yet). An id already known keeps its hashes."""

    async def recalled(self, tenant: str, session_id: str, recall_id: str) -> list[Message] | None:
        """The messages `recall_id` stands for in this session, in order (a message whose body
        expired is skipped); None when the session has no such id (another session's or
        tenant's id, an unknown or expired one)."""


class Summaries(Protocol):
    """Summaries prepared ahead of the compaction of a session that will use them, by key."""

    async def put_summary(self, tenant: str, session_id: str, key: str, text: str) -> None:
        """Keep a summary written ahead of time for the session under `key`
        (`proxy.core.prepared`), for the session TTL."""
        ...

    async def find_summaries(
        self, tenant: str, session_id: str, keys: Sequence[str]
    ) -> dict[str, str]:
        """The session's summaries stored under any of `keys`, by key."""
        ...

    async def find_prepared(
        self, tenant: str, session_id: str, hashes: Sequence[str], keys: Sequence[str]
    ) -> tuple[Checkpoint | None, dict[str, str]]:
        """`find_checkpoint(hashes)` and `find_summaries(keys)` at once: what a compaction
        reads before it lands, in one round trip to the session's node."""
        ...


class Tails(Protocol):
    """What a session's last request ended with, for the next (`proxy.core.working_set`:
    which large user messages a client re-sends, its working set, not history)."""

    async def swap_tail(self, tenant: str, session_id: str, tail: str) -> str | None:
        """Remember `tail` for the session's TTL (each write restarts it) and give back the
        one it replaces (None if none), at once: one round trip on the request's path."""


class Locks(Protocol):
    """Named locks with a lifetime, so one replica writes one summary for one prefix."""

    async def acquire(self, tenant: str, name: str, *, ttl_s: float) -> str | None:
        """Take the lock `name`: a token for `release`, or None when someone holds it.

        The lock frees itself after `ttl_s` seconds, so a holder that died blocks no one.
        """

    async def release(self, tenant: str, name: str, token: str) -> bool:
        """Free the lock if `token` still holds it; False otherwise."""


class ModelFacts(Protocol):
    """What a tenant's responses taught about a model: calibration and window."""

    async def calibration(self, tenant: str, model: str) -> float | None:
        """The tenant's learned correction factor for the model's token estimates."""

    async def set_calibration(
        self, tenant: str, model: str, factor: float, *, ttl_s: float
    ) -> None:
        """Share the tenant's correction factor for the model with every replica, for
        `ttl_s` seconds (each write restarts it)."""

    async def learned_window(self, tenant: str, model: str) -> int | None:
        """The context window an overflow error of the tenant's taught for the model."""

    async def learn_window(self, tenant: str, model: str, window: int, *, ttl_s: float) -> None:
        """Share the tenant's window for the model (the latest lesson wins) for `ttl_s`
        seconds: facts a provider's answers taught are scoped to the tenant whose request
        produced them, and age out on their own clock, not the session's."""


class Store(
    Lifecycle,
    Checkpoints,
    Sessions,
    Archive,
    Recalls,
    Summaries,
    Tails,
    Locks,
    ModelFacts,
    Protocol,
):
    """Everything the service keeps, in one store (embedded or Redis); each role above is
    what one part of the service needs of it."""


def content_hashes(messages: Sequence[Message], hashes: Sequence[str] | None) -> tuple[str, ...]:
    if hashes is None:
        return tuple(content_hash(message) for message in messages)
    if len(hashes) != len(messages):
        raise ValueError(f"{len(hashes)} hashes for {len(messages)} messages")
    return tuple(hashes)


def common_prefix(old: Sequence[str], new: Sequence[str]) -> int:
    common = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        common += 1
    return common
