"""The operator's view of the sessions: list, inspect, compact, revert and forget them.

Everything here reads the store directly rather than through `Memory`'s best effort: an
operator asking about a session while Redis is down must be told so (`StoreUnavailableError`
becomes a 503), not shown an empty list.

A session is addressed by its tenant and id. Callers see their own tenant's sessions; the
admin sees every tenant's and may leave the tenant out, in which case it is looked up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from proxy.adapters.store import Store
from proxy.core import anthropic, jsoncodec, responses
from proxy.core.breakdown import breakdown
from proxy.core.messages import Message
from proxy.core.policy import Strategy
from proxy.core.request import ChatRequest
from proxy.core.session import (
    Checkpoint,
    SessionState,
    chain_hashes,
    split_head,
    view,
)
from proxy.core.urls import redact
from proxy.errors import NothingToCompactError, SessionNotFoundError
from proxy.service.compactor import Compactor
from proxy.service.replies import Incoming
from proxy.service.reports import context_report
from proxy.service.turns import Turns

View = Literal["original", "forwarded"]
# How far the admin's lookup of a session without its tenant searches the global index.
_LOOKUP_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class SessionRef:
    tenant: str
    id: str


def summary(ref: SessionRef, state: SessionState) -> dict[str, Any]:
    """The session as a row of the sessions list."""
    return {
        "id": ref.id,
        "tenant": ref.tenant,
        "model": state.model,
        "turns": state.turns,
        "last_pressure": state.last_pressure,
        "compactions": state.compactions,
        "tokens_sent": state.tokens_sent,
        "tokens_forwarded": state.tokens_forwarded,
        "tokens_saved": state.tokens_saved,
        "recalls": state.recalls,
        "last_seen": state.last_seen,
    }


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint without its messages (they are in the forwarded view)."""
    return {
        "covered": checkpoint.covered,
        "strategy": checkpoint.strategy,
        "created_at": checkpoint.created_at,
        "tokens_before": checkpoint.tokens_before,
        "tokens_after": checkpoint.tokens_after,
    }


class Operator:
    """Reads and changes stored sessions on an operator's behalf."""

    def __init__(self, *, store: Store, turns: Turns, compactor: Compactor) -> None:
        self._store = store
        self._turns = turns
        self._compactor = compactor

    async def sessions(
        self, tenant: str | None, *, limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], bool]:
        """A page of sessions, most recently seen first, and whether more follow."""
        rows = await self._store.list_sessions(tenant, limit=limit + 1, offset=offset)
        page = [summary(SessionRef(owner, sid), state) for owner, sid, state in rows[:limit]]
        return page, len(rows) > limit

    async def find(self, tenant: str | None, session_id: str) -> SessionRef:
        """The session `session_id` of `tenant` (any tenant's when None: the admin)."""
        if tenant is not None:
            if await self._store.load_session(tenant, session_id) is None:
                raise SessionNotFoundError(session_id)
            return SessionRef(tenant, session_id)
        rows = await self._store.list_sessions(None, limit=_LOOKUP_LIMIT)
        for owner, sid, _state in rows:
            if sid == session_id:
                return SessionRef(owner, sid)
        raise SessionNotFoundError(session_id)

    async def detail(self, ref: SessionRef) -> dict[str, Any]:
        """The session's numbers, its last context report, compactions and timeline."""
        state = await self._state(ref)
        timeline = await self._store.timeline(ref.tenant, ref.id)
        context = state.last_context
        if context is not None and context.get("breakdown") is None:
            context = {**context, **await self._breakdown(ref, state)}
        return {
            **summary(ref, state),
            "context": context,
            "history": [record.to_json() for record in state.history],
            "timeline": [point.to_json() for point in timeline],
        }

    async def messages(self, ref: SessionRef, which: View) -> list[Message]:
        """The archived history, or what the proxy would forward for it now (a Responses
        API session in the chat view the proxy compacts it in)."""
        await self._state(ref)
        archived = await self._store.archived(ref.tenant, ref.id)
        if which == "original":
            return _readable(archived)
        head, body = split_head(archived)
        checkpoint = await self._store.find_checkpoint(ref.tenant, ref.id, chain_hashes(body))
        return _readable(view(head, body, checkpoint))

    async def compact(
        self, ref: SessionRef, incoming: Incoming, strategy: Strategy | None = None
    ) -> dict[str, Any]:
        """Compact the archived history now; the next request of the session forwards the
        result. The summarizer is called with `incoming`'s credentials."""
        return await self.compact_messages(ref, incoming, None, strategy)

    async def compact_messages(
        self,
        ref: SessionRef,
        incoming: Incoming,
        messages: list[Message] | None,
        strategy: Strategy | None = None,
    ) -> dict[str, Any]:
        """Compact `messages` (the archived history when None) as session `ref`."""
        state = await self._state(ref)
        if messages is None:
            messages = await self._store.archived(ref.tenant, ref.id)
        if not messages:
            raise NothingToCompactError(ref.id)
        shape = await self._store.last_request(ref.tenant, ref.id) or {"model": state.model}
        body = {**shape, "messages": messages}
        request = ChatRequest(jsoncodec.dumps(body), body)
        turn = await self._turns.resume(incoming, request, tenant=ref.tenant, session=ref.id)
        outcome = await self._compactor.compact_now(turn, strategy)
        return {
            "compacted": outcome.strategy is not None,
            "strategy": outcome.strategy,
            "tokens_before": turn.budget.estimate(outcome.tokens_before),
            "tokens_after": turn.budget.estimate(outcome.tokens_after),
            "summary_wait_s": round(outcome.summary_wait_s, 3),
            "context": context_report(turn, outcome).to_json(),
        }

    async def revert(self, ref: SessionRef) -> dict[str, Any]:
        """Drop the checkpoint the session's next request would use (undo a compaction);
        the one before it, if any, applies again."""
        await self._state(ref)
        latest = await self._latest_checkpoint(ref)
        if latest is None:
            return {"reverted": False, "checkpoint": None}
        await self._store.drop_checkpoint(ref.tenant, ref.id, latest.prefix_hash)
        return {"reverted": True, "checkpoint": checkpoint_json(latest)}

    async def clear(self, ref: SessionRef, messages: list[Message] | None = None) -> int:
        """Drop every checkpoint on the session's history (`messages`, else the archive):
        the whole history is forwarded again. Returns how many were dropped."""
        if messages is None:
            messages = await self._store.archived(ref.tenant, ref.id)
        _head, body = split_head(messages)
        hashes = chain_hashes(body)
        dropped = 0
        # Longest first: each drop uncovers the next shorter one, at most one per message.
        while (found := await self._store.find_checkpoint(ref.tenant, ref.id, hashes)) is not None:
            await self._store.drop_checkpoint(ref.tenant, ref.id, found.prefix_hash)
            dropped += 1
        return dropped

    async def forget(self, ref: SessionRef) -> None:
        """Forget the session: its checkpoints, state, history, timeline and archive."""
        await self._state(ref)
        await self.clear(ref)
        await self._store.delete_session(ref.tenant, ref.id)

    async def _breakdown(self, ref: SessionRef, state: SessionState) -> dict[str, Any]:
        """The forwarded view's tokens by category, counted now (the request path keeps only
        the numbers: counting by category walks every message)."""
        messages = await self.messages(ref, "forwarded")
        if not messages:
            return {}
        shape = await self._store.last_request(ref.tenant, ref.id) or {"model": state.model}
        counted = breakdown(messages, shape, self._turns.counter(state.model))
        return {"tokens": counted.total, "breakdown": counted.as_dict()}

    async def _state(self, ref: SessionRef) -> SessionState:
        state = await self._store.load_session(ref.tenant, ref.id)
        if state is None:
            raise SessionNotFoundError(ref.id)
        return state

    async def _latest_checkpoint(self, ref: SessionRef) -> Checkpoint | None:
        archived = await self._store.archived(ref.tenant, ref.id)
        _head, body = split_head(archived)
        return await self._store.find_checkpoint(ref.tenant, ref.id, chain_hashes(body))


def public_context(settings_context: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime `context` settings as the config API shows them (secrets masked)."""
    shown = dict(settings_context)
    brain = dict(shown.get("summary_brain") or {})
    if brain.get("api_key"):
        brain["api_key"] = "***"
    if brain.get("base_url"):
        brain["base_url"] = redact(brain["base_url"])
    shown["summary_brain"] = brain
    return shown


def _readable(messages: list[Message]) -> list[Message]:
    """A session's messages without the private keys of the API they came by (a Responses
    or Messages API conversation is archived in the chat view the proxy compacts)."""
    return anthropic.readable(responses.readable(messages))
