"""Sessions and checkpoints: how a compaction outlives the request that made it.

Clients resend their whole history on every request. After a compaction, the proxy must send
the *same* compacted prefix on every later request of that conversation, byte for byte, so
that the provider's prompt cache keeps hitting; and it must notice when the client's history
no longer extends the one it compacted (an edit, a rewind, a branch).

- The *head* is the leading system/developer messages. They are forwarded as the request
  has them and take no part in hashing (they often carry a timestamp).
- The *body* is everything after. Its chain hashes are `h_i = H(h_{i-1} || D(m_i))`, where
  `D` is the message's digest (`proxy.core.digests`), so `h_k` names the exact first k body
  messages.
- A `Checkpoint` says: the body prefix `h_k` (k messages) is replaced by the frozen messages
  R. A request whose body has `h_k` among its own chain hashes is forwarded as
  `head + R + body[k:]`; the longest matching checkpoint wins; a changed prefix matches none.
- The session id is the client's `X-Session-Id`; else the session of the proxy's compaction
  item the request carries; else the conversation id a well-known client sends of its own
  accord (`CLIENT_SESSION_HEADERS`: Codex's `thread-id`); else `h_1`: the conversation's
  first body message names it, so every request of one conversation finds the same session.
  A client's own id outlives its own compactions, after which its history starts with a new
  first message (and `h_1` changes). An id is at most `SESSION_ID_MAX_CHARS` of
  `[A-Za-z0-9._:-]` (UUIDs, ULIDs, nanoids, slugs and `team:project:42` all fit); an
  `X-Session-Id` that is anything else is refused, never stored, logged or echoed; a
  client's own header that is anything else is not used (the client did not address it to
  the proxy: its request must not fail for it).
- The tenant is a hash of the credential the request is made with, or of the tenant name its
  key has in `auth.keys`; it namespaces everything stored, and is never the credential.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from proxy.core.digests import chain, digest
from proxy.core.messages import Message, leading_instructions
from proxy.core.summary import note_digest, notes_in
from proxy.errors import InvalidRequestError

SESSION_ID_MAX_CHARS: Final = 128
# Characters safe everywhere an id goes: a response header, a URL path (`/sessions/{id}`),
# a store key and a log line. No space, slash, quote or control character.
_SESSION_ID: Final = re.compile(rf"[A-Za-z0-9._:-]{{1,{SESSION_ID_MAX_CHARS}}}")


def content_hash(message: Message) -> str:
    """A content address for one message (the archive stores messages under it)."""
    return digest(message).hex()


def chain_hashes(
    body: Sequence[Message], digest_of: Callable[[Message], bytes] = digest
) -> list[str]:
    """`h_1 .. h_n` for the body: `h_k` names its first k messages, in order.

    `digest_of` gives each message's digest (`Digests.of`, to share one request's digests
    with the token counter and the archive); the chain hashes those, not the messages.
    """
    hashes: list[str] = []
    previous = b""
    for message in body:
        previous = chain(previous, digest_of(message))
        hashes.append(previous.hex())
    return hashes


def split_head(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """The leading instructions and the body after them."""
    index = leading_instructions(messages)
    return list(messages[:index]), list(messages[index:])


def tenant_of(credential: str | None) -> str:
    """The tenant for a credential (an Authorization value or an API key); never reversible."""
    digest = hashlib.blake2b((credential or "").encode(), digest_size=12, person=b"tenant")
    return digest.hexdigest()


def tenant_of_name(name: str) -> str:
    """The tenant for a tenant name of `auth.keys`: hashed apart from credentials (its own
    personalization), so no credential's tenant can coincide with a named one."""
    digest = hashlib.blake2b(name.encode(), digest_size=12, person=b"tenant-name")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class ClientHeader:
    """A header in which a well-known client names its conversation of its own accord."""

    name: str
    """Lower case, as the header lists compare."""
    client: str
    """Who sends it, and what it names (for the reader: the docs list the same)."""


CLIENT_SESSION_HEADERS: Final = (
    # Codex 0.171 sends `thread-id` and `session-id` on every Responses API request (its
    # WebSocket handshake too), both its thread's UUID for the main agent. The thread is the
    # conversation: it keeps its id through Codex's own compactions, which number its
    # context windows instead (`x-codex-window-id: <thread>:<n>`). `thread-id` comes first,
    # as the narrower of the two.
    ClientHeader("thread-id", "Codex: its thread, one conversation"),
    ClientHeader("session-id", "Codex: its session (the main thread's id)"),
    # Earlier Codex versions sent these two, both the conversation's id.
    ClientHeader("conversation_id", "Codex before thread ids"),
    ClientHeader("session_id", "Codex before thread ids"),
)
"""Well-known clients' own conversation ids, the first one present and valid winning."""


def client_session_id(headers: Iterable[tuple[str, str]]) -> str | None:
    """The conversation id a well-known client sent of its own accord
    (`CLIENT_SESSION_HEADERS`, first found first), if it is a valid session id."""
    values: dict[str, str] = {}
    for name, value in headers:
        values.setdefault(name.lower(), value)
    for header in CLIENT_SESSION_HEADERS:
        found = values.get(header.name)
        if found is not None and _SESSION_ID.fullmatch(found) is not None:
            return found
    return None


def session_id_of(
    header: str | None,
    hashes: Sequence[str],
    *,
    item: str | None = None,
    client: str | None = None,
) -> str | None:
    """The session a request belongs to: the client's `X-Session-Id` (`header`); else the
    session of the proxy's compaction `item` it carries, where the item's block was made and
    its recall ids resolve (a client's fork of a conversation included); else the id a
    well-known `client` sent of its own accord (`client_session_id`); else the one derived
    from the first body message.

    Raises `InvalidRequestError` for a header that `checked_session_id` refuses.
    """
    if header:
        return checked_session_id(header, param="X-Session-Id")
    return item or client or (hashes[0] if hashes else None)


def checked_session_id(session_id: str, *, param: str) -> str:
    """`session_id` when it is a valid id; else `InvalidRequestError` naming `param`, whose
    message never repeats the value (it may be megabytes, or meant for a log reader)."""
    if _SESSION_ID.fullmatch(session_id) is None:
        raise InvalidRequestError(
            f"{param} must be 1 to {SESSION_ID_MAX_CHARS} characters from A-Z, a-z, 0-9 and "
            f". _ : - (this one has {len(session_id)} characters).",
            param=param,
            code="invalid_session_id",
        )
    return session_id


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The body prefix named `prefix_hash` (`covered` messages) is replaced by `messages`."""

    prefix_hash: str
    covered: int
    messages: list[Message]
    created_at: float
    strategy: str
    tokens_before: int
    tokens_after: int
    notes: tuple[str, ...] = ()
    """The digests (`note_digest`) of the notes the proxy wrote into `messages`: only these
    are read as notes (a message that merely looks like one is the client's)."""

    def to_json(self) -> dict[str, Any]:
        # Shallow: a store serializes it at once. `asdict` deep-copied every message held,
        # a compaction's largest cost after the plan on a long history.
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {**fields, "messages": list(self.messages), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        if "notes" in fields:
            fields["notes"] = tuple(fields["notes"])
        else:
            # Written before notes were recorded: its notes are the ones its shape shows,
            # as they were read then.
            fields["notes"] = tuple(note_digest(note) for note in notes_in(data["messages"]))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """One compaction, for the session's history."""

    at: float
    trigger: str
    """Why it ran: pressure, hook, overflow (emergency), manual."""
    strategy: str
    tokens_before: int
    tokens_after: int
    summarizer_model: str | None = None
    summarizer_tokens: int = 0
    steps: tuple[str, ...] = ()
    """Every reduction the compaction used, in order (see `proxy.core.plan`)."""
    summarizer_input_tokens: int = 0
    """The prompt tokens of the summaries it used, as the summarizer reported them."""
    summarizer_cached_tokens: int = 0
    """Of those, the ones the summarizer's prompt cache served (a summary asked as the
    conversation's own prefix reads most of its input from there)."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "steps": list(self.steps)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompactionRecord:
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        fields["steps"] = tuple(fields.get("steps") or ())
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class SessionState:
    """What the proxy remembers of one session between requests."""

    turns: int = 0
    last_compaction_turn: int | None = None
    model: str | None = None
    last_seen: float | None = None
    last_pressure: float | None = None
    last_usage: dict[str, Any] | None = None
    history: tuple[CompactionRecord, ...] = field(default_factory=tuple)
    compactions: int = 0
    """Compactions ever recorded (the history keeps only the latest)."""
    tokens_sent: int = 0
    """Prompt tokens of every request the client sent, summed (calibrated estimates)."""
    tokens_forwarded: int = 0
    """Prompt tokens of what was forwarded for them, summed."""
    recalls: int = 0
    """`context_recall` calls the proxy answered for the session (`proxy.core.recall`)."""
    last_context: dict[str, Any] | None = None
    """The `ContextReport` of the last forwarded request, as JSON."""

    @property
    def turns_since_compaction(self) -> int | None:
        if self.last_compaction_turn is None:
            return None
        return self.turns - self.last_compaction_turn

    @property
    def tokens_saved(self) -> int:
        return self.tokens_sent - self.tokens_forwarded


@dataclass(frozen=True, slots=True)
class TurnPoint:
    """One forwarded request of a session, for its timeline."""

    turn: int
    at: float
    pressure: float
    tokens_before: int
    """What the client's request counts (calibrated)."""
    tokens_after: int
    """What was forwarded for it."""
    action: str
    """`none`, the compaction strategy applied on this turn, or `refused` (the proxy answered
    that even compacted it cannot fit the window; nothing was forwarded)."""
    recalls: int = 0
    """`context_recall` calls the proxy answered for this turn's answer."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnPoint:
        # A point stored before a field existed has the field's default.
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass(frozen=True, slots=True)
class ContextReport:
    """Where the last forwarded request's tokens went, against the window that bounds it."""

    window: int
    output_reserved: int
    pressure: float
    trigger: float
    target: float
    calibration: float
    tokens: int
    breakdown: dict[str, int] | None
    """Tokens by category (`proxy.core.breakdown`); None where only the numbers were kept."""
    working_set: int = 0
    """Our count of the client's working set's latest copy in the request (aider's files
    message, `proxy.core.working_set`; 0: none): what a client compacting its own history
    sends again beside what `/v1/responses/compact` gives back."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find_checkpoint(
    hashes: Sequence[str], checkpoints: Mapping[str, Checkpoint]
) -> Checkpoint | None:
    """The checkpoint covering the longest prefix of the body whose chain is `hashes`."""
    for covered in range(len(hashes), 0, -1):
        checkpoint = checkpoints.get(hashes[covered - 1])
        if checkpoint is not None and checkpoint.covered == covered:
            return checkpoint
    return None


def known_notes(checkpoint: Checkpoint | None) -> frozenset[str]:
    """The notes the proxy wrote into the view over `checkpoint` (none without one: the
    client's own history holds none)."""
    return frozenset(checkpoint.notes) if checkpoint is not None else frozenset()


def view(
    head: Sequence[Message], body: Sequence[Message], checkpoint: Checkpoint | None
) -> list[Message]:
    """What to forward (before any new compaction): `head + R + body[k:]`."""
    if checkpoint is None:
        return [*head, *body]
    return [*head, *checkpoint.messages, *body[checkpoint.covered :]]


def new_checkpoint(
    head: Sequence[Message],
    body: Sequence[Message],
    hashes: Sequence[str],
    compacted: Sequence[Message],
    **details: Any,
) -> Checkpoint | None:
    """The checkpoint that freezes `compacted` (a compaction of this request's view).

    The part of `compacted` after the head that ends with messages of the body, unchanged,
    is the live tail; what comes before it is the new frozen prefix R, replacing the body up
    to where that tail starts. None when the compaction changed nothing of the body.
    """
    rest = list(compacted[len(head) :])
    tail = 0
    while (
        tail < min(len(rest), len(body))
        and rest[len(rest) - 1 - tail] == body[len(body) - 1 - tail]
    ):
        tail += 1
    covered = len(body) - tail
    if covered == 0:
        return None
    return Checkpoint(
        prefix_hash=hashes[covered - 1],
        covered=covered,
        messages=rest[: len(rest) - tail],
        **details,
    )
