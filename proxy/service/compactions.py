"""A client's own compaction request, answered by the proxy.

OpenAI's Responses API compacts on request: `POST /v1/responses/compact`, or a request
whose `input` ends with `compaction_trigger` (`proxy.core.compaction_items`). When
`responses.compaction` leaves these to the proxy (`proxy.core.delegation`), the proxy
answers them with its own compaction, the same as any (`Compactor.condense`: the plan, its
ledger and artifact trail, the prepared or a fresh summary, the landing rules), frozen as a
checkpoint; no model is asked for a reply.

The answer is OpenAI's (`proxy.core.compaction_replies`): the user messages as the client
sent them, then one `compaction` item whose `encrypted_content` is the block sealed in a
capsule (`proxy.core.capsule`) with the session and checkpoint it belongs to. The client
keeps them in place of its history; on the next request the proxy expands the item into
the block (`proxy.core.request.parse_responses_request`), the same bytes every time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from proxy.adapters.summarizer import SummaryResult
from proxy.core import jsoncodec
from proxy.core.capsule import Capsule, CheckpointRef, Sealer
from proxy.core.compaction_items import block_role, compaction_item, user_items
from proxy.core.compaction_replies import (
    Usage,
    compacted_response,
    sse,
    triggered_events,
    triggered_response,
)
from proxy.core.messages import Message, role, text
from proxy.core.request import Compaction
from proxy.core.responses import INSTRUCTIONS, ITEMS, to_messages
from proxy.core.session import Checkpoint
from proxy.core.summary import note_digest
from proxy.service.compactor import Compactor
from proxy.service.outcome import Outcome
from proxy.service.replies import Reply
from proxy.service.turns import Turn

_JSON = ("content-type", "application/json")
_EVENTS = ("content-type", "text/event-stream; charset=utf-8")


@dataclass(frozen=True, slots=True)
class Answered:
    """The proxy's answer to a compaction request, and the outcome it froze."""

    reply: Reply
    outcome: Outcome


class ClientCompactions:
    """Answers compaction requests with the proxy's own compaction."""

    def __init__(
        self,
        *,
        compactor: Compactor,
        sealer: Sealer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._compactor = compactor
        self._sealer = sealer
        self._clock = clock

    async def answer(self, turn: Turn) -> Answered:
        """Condense `turn`'s conversation and answer in the shape its request asked for."""
        users = _user_items(turn)
        condensed = await self._compactor.condense(turn, to_messages(users))
        # The checkpoint of the conversation's prefix: this compaction's, or the one another
        # request stored first for the same prefix.
        checkpoint = _ref(condensed.outcome.checkpoint)
        capsule = Capsule(condensed.block, block_role(users), turn.session, checkpoint, turn.model)
        item = compaction_item(self._sealer.seal(capsule))
        usage = _usage(condensed.summary)
        created = int(self._clock())
        ident = f"resp_{uuid.uuid4().hex}"
        headers = [("x-compaction-applied", condensed.outcome.strategy or "none")]
        if turn.session is not None:
            headers.append(("x-session-id", turn.session))
        request = turn.request
        if request.compaction is Compaction.COMPACT:
            body = compacted_response(ident, created, [*users, item], usage)
            reply = Reply(200, [_JSON, *headers], jsoncodec.dumps(body))
        else:
            response = triggered_response(_echoed(turn), ident, created, item, usage)
            reply = (
                Reply(200, [_EVENTS, *headers], _streamed(response))
                if request.stream
                else Reply(200, [_JSON, *headers], jsoncodec.dumps(response))
            )
        return Answered(reply, condensed.outcome)


def _user_items(turn: Turn) -> list[Any]:
    """The user messages of the request's conversation, as the client sent them (a block
    the proxy expanded into a user message is none of them)."""
    messages = turn.request.messages
    users = (m for m in messages if role(m) == "user" and not _expanded(turn, m))
    return user_items([item for message in users for item in message.get(ITEMS, [message])])


def _expanded(turn: Turn, message: Message) -> bool:
    return bool(turn.request.notes) and note_digest(text(message)) in turn.request.notes


def _echoed(turn: Turn) -> dict[str, Any]:
    """The request's fields as the client sent them: its chat view, `instructions` back from
    the system message the view made of them."""
    body = turn.request.body
    instructions = (m.get("content") for m in turn.request.messages if m.get(INSTRUCTIONS))
    return {**body, "instructions": next(instructions, body.get("instructions"))}


def _ref(checkpoint: Checkpoint | None) -> CheckpointRef | None:
    return None if checkpoint is None else CheckpointRef(checkpoint.prefix_hash, checkpoint.covered)


def _usage(summary: SummaryResult | None) -> Usage:
    if summary is None:
        return Usage()
    output = max(summary.tokens - summary.input_tokens, 0)
    return Usage(summary.input_tokens, summary.cached_tokens, output)


async def _streamed(response: dict[str, Any]) -> AsyncIterator[bytes]:
    for event in triggered_events(response):
        yield sse(event)
