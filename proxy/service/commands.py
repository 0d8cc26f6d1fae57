"""Performing the chat commands (`chat_commands: true`): the proxy answers, the upstream is
not called. The command itself is not part of the conversation it acts on: `/compact`
compacts the history before it, `/context` reports on what that history would forward."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

from proxy.core import jsoncodec
from proxy.core.commands import (
    Command,
    clear_text,
    compact_text,
    completion,
    completion_events,
    context_text,
)
from proxy.core.request import ChatRequest
from proxy.errors import NothingToCompactError, SessionNotFoundError
from proxy.service.operator import Operator, SessionRef, summary
from proxy.service.outcome import unchanged
from proxy.service.replies import Incoming, Reply
from proxy.service.reports import context_report
from proxy.service.turns import Turn, Turns, credentials_of

_NO_SESSION = "Nothing to compact yet: this conversation has no stored session."


class ChatCommands:
    """Answers a chat command for the conversation the request carries."""

    def __init__(self, *, turns: Turns, operator: Operator) -> None:
        self._turns = turns
        self._operator = operator

    async def answer(self, command: Command, incoming: Incoming, request: ChatRequest) -> Reply:
        before = {**request.body, "messages": request.messages[:-1]}
        history = ChatRequest(b"", before)
        tenant = self._turns.tenant(credentials_of(incoming))
        session = incoming.header("x-session-id")
        turn = await self._turns.resume(incoming, history, tenant=tenant, session=session)
        content = await self._content(command, turn, incoming)
        return _reply(content, request)

    async def _content(self, command: Command, turn: Turn, incoming: Incoming) -> str:
        if command == "context":
            return self._context(turn)
        if turn.session is None:
            return _NO_SESSION
        ref = SessionRef(turn.tenant, turn.session)
        messages = turn.request.messages
        if command == "clear":
            return clear_text(await self._operator.clear(ref, messages))
        try:
            result = await self._operator.compact_messages(ref, incoming, messages)
        except (SessionNotFoundError, NothingToCompactError):
            return _NO_SESSION
        return compact_text(result)

    def _context(self, turn: Turn) -> str:
        report = context_report(turn, unchanged(turn)).to_json()
        session = summary(SessionRef(turn.tenant, turn.session or "-"), turn.state)
        return context_text(session, report)


def _reply(content: str, request: ChatRequest) -> Reply:
    created, id = int(time.time()), f"chatcmpl-proxy-{secrets.token_hex(12)}"
    if not request.stream:
        body = jsoncodec.dumps(completion(content, request.model, created=created, id=id))
        return Reply(200, [("content-type", "application/json")], body)
    options = request.body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    events = completion_events(content, request.model, created=created, id=id, include_usage=usage)
    headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
    return Reply(200, headers, _once(events))


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
