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

A request may also ask the provider to compact on its own (`context_management`,
`ClientCompactions.automatic`): the proxy does so in the provider's place once the
request's input passes the client's `compact_threshold` (or would not fit the usable input
otherwise: the proxy's own trigger does not fire on such a request), with the same
compaction, and forwards the compacted view for the model's answer; the answer's `output`
opens with the item (`proxy.core.compaction_output`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from proxy.adapters.summarizer import SummaryResult
from proxy.core import jsoncodec
from proxy.core.capsule import Capsule, CheckpointRef, Sealer
from proxy.core.compaction_items import block_message, block_role, compaction_item, user_items
from proxy.core.compaction_output import ItemFirst, with_item
from proxy.core.compaction_replies import (
    Usage,
    compacted_response,
    response_id,
    sse,
    triggered_events,
    triggered_response,
)
from proxy.core.messages import Message, role, text
from proxy.core.request import Compaction
from proxy.core.responses import INSTRUCTIONS, ITEMS, to_messages
from proxy.core.room import in_room
from proxy.core.session import Checkpoint
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError
from proxy.service.compactor import Compactor, Condensed
from proxy.service.memory import Memory
from proxy.service.outcome import Outcome
from proxy.service.replies import Reply
from proxy.service.turns import Turn

TOOL_FIELDS: Final = ("tools", "tool_choice")
"""What a compaction request takes from its conversation's last request when it carries no
tools itself (`ClientCompactions._with_tools`)."""
USERS_SHARE: Final = 0.5
"""The share of the room the compaction target leaves the conversation (after the
instructions and tools) that the user messages given back may take when there is no block
(nothing but them to condense); beside a block, they take what it leaves."""
_JSON = ("content-type", "application/json")
_EVENTS = ("content-type", "text/event-stream; charset=utf-8")


@dataclass(frozen=True, slots=True)
class Answered:
    """The proxy's answer to a compaction request, and the outcome it froze."""

    reply: Reply
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Automatic:
    """What an automatic compaction decided: what to forward, and the item to give back
    with the answer (None: the request was not compacted)."""

    outcome: Outcome
    item: dict[str, Any] | None = None


class ClientCompactions:
    """Answers compaction requests with the proxy's own compaction."""

    def __init__(
        self,
        *,
        compactor: Compactor,
        sealer: Sealer,
        memory: Memory,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._compactor = compactor
        self._sealer = sealer
        self._memory = memory
        self._clock = clock

    async def answer(self, turn: Turn) -> Answered:
        """Condense `turn`'s conversation and answer in the shape its request asked for."""
        turn = await self._with_tools(turn)
        # The latest user message stands beside the block where the answer gives it back
        # (`/compact`): the ledger need not repeat it. A triggered item goes back alone.
        compact = turn.request.compaction is Compaction.COMPACT
        aside = _latest(turn) if compact else None
        condensed = await self._compactor.condense(turn, _kept(turn), aside)
        users = _user_items(turn, condensed.block, task=condensed.task)
        item = self._item(turn, users, condensed)
        usage = _usage(condensed.summary)
        created = int(self._clock())
        ident = response_id()
        headers = [("x-compaction-applied", condensed.outcome.strategy or "none")]
        if turn.session is not None:
            headers.append(("x-session-id", turn.session))
        request = turn.request
        if compact:
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

    async def automatic(self, turn: Turn, outcome: Outcome) -> Automatic:
        """`outcome` (the turn's, its hooks run) compacted as the client's
        `context_management` asks: the whole conversation condensed as for
        `/v1/responses/compact`, the user's messages kept, once the input passes the client's
        `compact_threshold` (the proxy's trigger when it names none), or whenever it would
        not fit the usable input otherwise. A conversation that cannot be condensed (its
        calls and outputs do not pair up, nothing but the user's messages) goes as it is."""
        asked = turn.request.automatic
        threshold = asked.threshold if asked else None
        if not _due(turn, outcome.tokens_after, threshold):
            return Automatic(outcome)
        try:
            # The block keeps the latest user message's words too: its item stands for all
            # that precedes it, which the client may drop (OpenAI's contract).
            condensed = await self._compactor.condense(turn, _kept(turn))
        except InvalidRequestError:
            return Automatic(outcome)  # the provider's to refuse, in its own words
        checkpoint = condensed.outcome.checkpoint
        if condensed.block is None or checkpoint is None or checkpoint.covered < len(turn.body):
            return Automatic(outcome)
        users = _user_items(turn, condensed.block, task=condensed.task)
        item = self._item(turn, users, condensed, covers_prior=True)
        forwarded = replace(
            condensed.outcome, sent=outcome.sent, injected=outcome.injected, tried=True
        )
        return Automatic(forwarded, item)

    async def _with_tools(self, turn: Turn) -> Turn:
        """`turn` offering the tools of its conversation: a `/v1/responses/compact` body has
        no `tools` (OpenAI's endpoint takes none, and Codex sends none), but the block is
        forwarded with the conversation's next requests, which offer them. Compacted as if
        it carried them (those of the session's last request), the block is sized for the
        room they leave, lists them, and names the recall ids of what it condenses (a
        request that lets the model call no tool has no recall: `Turn.recall_scope`)."""
        body = turn.request.body
        if TOOL_FIELDS[0] in body:
            return turn
        last = await self._memory.last_request(turn.tenant, turn.session)
        if not last or not last.get(TOOL_FIELDS[0]):
            return turn
        tools: dict[str, Any] = {field: last[field] for field in TOOL_FIELDS if field in last}
        return replace(turn, request=replace(turn.request, body={**body, **tools}))

    def _item(
        self, turn: Turn, users: list[Any], condensed: Condensed, *, covers_prior: bool = False
    ) -> dict[str, Any]:
        """The sealed item of `condensed`, the block's message after `users`."""
        # The checkpoint of the conversation's prefix: this compaction's, or the one another
        # request stored first for the same prefix.
        checkpoint = _ref(condensed.outcome.checkpoint)
        capsule = Capsule(
            condensed.block,
            block_role(users),
            turn.session,
            checkpoint,
            turn.model,
            covers_prior,
        )
        return compaction_item(self._sealer.seal(capsule))


def with_compaction_item(reply: Reply, item: Mapping[str, Any] | None) -> Reply:
    """The model's answer with `item` first in its output (an error goes as it came)."""
    if item is None or reply.status != 200:
        return reply
    if isinstance(reply.body, bytes):
        return Reply(reply.status, reply.headers, with_item(reply.body, item), reply.close)
    return Reply(reply.status, reply.headers, _item_first(reply.body, item), reply.close)


async def _item_first(body: AsyncIterator[bytes], item: Mapping[str, Any]) -> AsyncIterator[bytes]:
    stream = ItemFirst(item)
    async for chunk in body:
        out = stream.feed(chunk)
        if out:
            yield out
    rest = stream.flush()
    if rest:
        yield rest


def _due(turn: Turn, tokens: int, threshold: int | None) -> bool:
    """Whether a request of `tokens` (ours) is compacted at the client's `threshold` (the
    provider's tokens), or at the proxy's trigger when it names none; always when it would
    not fit the usable input."""
    budget = turn.budget
    if not budget.fits(tokens):
        return True
    if threshold is None:
        return budget.pressure(tokens) >= in_room(turn.policy.compression_trigger, turn.fixed)
    return budget.estimate(tokens) >= threshold


def _users(turn: Turn) -> list[Message]:
    """The user messages of the request's conversation (a block the proxy expanded into a
    user message is none of them)."""
    messages = turn.request.messages
    return [m for m in messages if role(m) == "user" and not _expanded(turn, m)]


def _latest(turn: Turn) -> Message | None:
    """The latest user message, kept beside the block whatever its size."""
    users = _users(turn)
    return users[-1] if users else None


def _kept(turn: Turn) -> Callable[[str, Message | None], list[Message]]:
    """The messages of the user items `turn` keeps beside a block (`_user_items`)."""
    return lambda block, task: to_messages(_user_items(turn, block, task=task))


def _user_items(turn: Turn, block: str | None, *, task: Message | None = None) -> list[Any]:
    """The user messages of the request's conversation as the client sent them: the latest
    (and the one the plan kept in place as the `task`), and those between that
    fit in what the compaction target leaves beside the instructions, the tools, `block`
    and those (at most `USERS_SHARE` of the room the target leaves the conversation when
    there is no block). The others are condensed in the block (its ledger keeps what they
    state verbatim, the summary the rest): given back whole, a long conversation's user
    messages alone would fill the window after every compaction, and the next requests
    land above the target with nothing the proxy may condense but the block."""
    users = _users(turn)
    if not users:
        return []
    # The task stands first in the view: the users before it are in the notes it follows.
    # The plan may have cut its paste: it is the client's message its items were read from.
    at = next((i for i, m in enumerate(users[:-1]) if _is_task(m, task)), None)
    first = [] if at is None else _items(users[at])
    latest = _items(users[-1])
    between = [item for m in users[0 if at is None else at + 1 : -1] for item in _items(m)]
    # The target is of the room the head leaves, and what the client sends again beside
    # the compacted history (its working set, `Turn.resent`) is part of that head.
    target = turn.budget.tokens_at(in_room(turn.policy.compaction_target, turn.fixed))
    target -= turn.resent
    if block is None:
        room = (target - turn.tokens(turn.head)) * USERS_SHARE
    else:
        room = target - turn.tokens([*turn.head, block_message(block, "assistant")])
    counter = turn.counter
    used = counter.messages(to_messages([*first, *latest]))
    chosen = between
    for index in range(len(between) - 1, -1, -1):
        used += counter.messages(to_messages(between[index : index + 1]))
        if used > room:
            chosen = between[index + 1 :]
            break
    return [*first, *chosen, *latest]


def _is_task(message: Message, task: Message | None) -> bool:
    """Whether `message` (as the client sent it) is the plan's `task`, itself or the same
    items with its paste cut."""
    if task is None:
        return False
    return message == task or (ITEMS in message and message.get(ITEMS) == task.get(ITEMS))


def _items(message: Message) -> list[Any]:
    """The user items a user message of the chat view stands for."""
    return user_items(message.get(ITEMS, [message]))


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
