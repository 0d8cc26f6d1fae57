"""A turn: one chat completion request with everything known about its conversation.

Preparing a turn reads what the core needs and nothing more: who the tenant is, which
session and checkpoint the request continues, the model's policy, window and calibration,
and the counter for its tokenizer. Lookups that need the network (the upstream's
`/v1/models`) are made once per model and remembered.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import Upstream, UpstreamRequest, fetched
from proxy.core import recall, working_set
from proxy.core.budget import Budget, request_budget
from proxy.core.digests import Digests
from proxy.core.headers import KEY_HEADERS, Headers
from proxy.core.keys import ClientKeys, presented_key
from proxy.core.mentions import Mentions
from proxy.core.messages import Message
from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.request import Api, ChatRequest, Compaction
from proxy.core.room import fixed_share
from proxy.core.session import (
    Checkpoint,
    SessionState,
    chain_hashes,
    client_session_id,
    known_notes,
    session_id_of,
    split_head,
    tenant_of,
    tenant_of_name,
    view,
)
from proxy.core.tokens import APPROXIMATE, TokenCounter, text_size
from proxy.core.windows import Window, decide_window, needs_detection, window_in
from proxy.errors import AuthenticationError, UpstreamError
from proxy.service.memory import Memory
from proxy.service.replies import Incoming

OFF_LOOP_BYTES = 64 * 1024
"""New text from which a request is counted in a worker thread: at tiktoken's slowest
(text without whitespace, about 0.4 s per MB) this much holds the loop some 25 ms. A request
with a message this large is also planned in a worker thread (`Turn.planned`)."""

_T = TypeVar("_T")

# The caller's key, and what a provider needs with it to accept a call made in the caller's
# name (the summary brain's, the models list): OpenAI's organization and project, Anthropic's
# API version and beta flags.
_CREDENTIAL_HEADERS = (
    *KEY_HEADERS,
    "openai-organization",
    "openai-project",
    "anthropic-version",
    "anthropic-beta",
)


@dataclass(slots=True)
class Answered:
    """What the provider's answer to a turn reported, kept for the turn's end: its usage is
    written with the turn's record, in one call, not in a call of its own."""

    usage: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One chat completion request and the state of its conversation, as read before any
    compaction of this turn: a compaction makes a new `Outcome`, never a new turn.

    Frozen, but not deep: `counter` and `digests` are caches that fill as the turn is
    counted (that is what they are for), and the message lists are never changed in place.
    """

    request: ChatRequest
    incoming: Incoming
    tenant: str
    session: str | None
    head: list[Message]
    body: list[Message]
    hashes: list[str]
    policy: ContextPolicy
    budget: Budget
    counter: TokenCounter
    state: SessionState
    checkpoint: Checkpoint | None
    """The checkpoint the request came with (the one its view extends before compaction)."""
    credentials: Headers
    digests: Digests
    """Each message's digest, computed once for counting, chain hashes and the archive."""
    mentions: Mentions = field(default_factory=Mentions)
    """What each message mentions (its names, its facts), found once per message: a cache,
    like `counter`, held for the life of the process."""
    estimated: bool = False
    """The count is the approximate counter's (the model has no public tokenizer) and no
    answer has calibrated it yet: it errs high, by half on Claude Code's head, so it alone
    refuses nothing (the provider's own overflow error does, and its usage calibrates)."""
    answered: Answered = field(default_factory=lambda: Answered())
    """What the answer told, once it has been read: filled by the forwarder."""
    working: frozenset[bytes] = frozenset()
    """The digests of the body's messages that are the client's working set (what it
    re-sends on every request: `proxy.core.working_set`), told from the request before."""

    @property
    def model(self) -> str | None:
        return self.request.model

    def _has_large_message(self) -> bool:
        if len(self.request.raw) < OFF_LOOP_BYTES:
            return False
        return any(text_size(message) >= OFF_LOOP_BYTES for message in self.request.messages)

    def view(self, checkpoint: Checkpoint | None) -> list[Message]:
        """What is forwarded over `checkpoint` (R for the first k messages of the body):
        `head + R + body[k:]`."""
        return view(self.head, self.body, checkpoint)

    def notes(self, checkpoint: Checkpoint | None) -> frozenset[str]:
        """The digests of the proxy's notes in the view over `checkpoint`: the checkpoint's,
        and the blocks of the proxy's compaction items the request carried (expanded)."""
        return known_notes(checkpoint) | self.request.notes

    def tokens(self, messages: list[Message]) -> int:
        """Our raw (uncalibrated) count of a request carrying `messages` (and the recall
        tool, when they name what it recalls)."""
        return self.counter.messages(messages) + self.counter.tools(self.tools_body(messages))

    def tokens_at_most(self, messages: list[Message]) -> int | None:
        """At least `tokens(messages)`, found without encoding what is not counted yet
        (`TokenCounter.at_most`); None when that cannot be bounded so."""
        bound = self.counter.at_most(messages)
        if bound is None:
            return None
        return bound + self.counter.tools(self.tools_body(messages))

    @property
    def recall_scope(self) -> str | None:
        """The conversation's scope for recall ids (`proxy.core.recall`), when the model may
        recall what a compaction removes: recall is on for the model, the session is known
        (the ids are resolved per session) and the request lets the model call a tool."""
        if not self.policy.recall or self.session is None:
            return None
        if not recall.may_offer(self.request.body):
            return None
        return f"{self.tenant}\0{self.session}"

    def offers_recall(self, messages: Sequence[Message]) -> bool:
        """Whether a request carrying `messages` offers `context_recall`: they name an id,
        and the request may offer it."""
        return self.recall_scope is not None and recall.named(messages)

    def tools_body(self, messages: Sequence[Message] | None = None) -> dict[str, Any]:
        """The request body as its tools are forwarded with `messages` (None: with whatever
        a compaction is about to write, which may name recall ids)."""
        body = self.request.body
        offered = (
            self.recall_scope is not None if messages is None else self.offers_recall(messages)
        )
        return self.with_recall(body) if offered else body

    def with_recall(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`body` offering `context_recall`, in the tool format of the request's API."""
        return recall.with_tool(body, responses=self.responses, anthropic=self.anthropic)

    @property
    def responses(self) -> bool:
        return self.request.api is Api.RESPONSES

    @property
    def anthropic(self) -> bool:
        """Whether the request is a Messages API one (`POST /v1/messages`)."""
        return self.request.api is Api.MESSAGES

    @property
    def fixed(self) -> float:
        """The share of the usable input the instructions, the tools and the working set's
        latest copy take (or, for a history to compact, the working set the client sends
        again beside it: `resent`): the trigger and the preparation level apply to the room
        they leave (`proxy.core.room`), as the plan's target does (`Situation.fixed`)."""
        head = self.counter.messages(self.head) + self.counter.tools(self.tools_body())
        return fixed_share(self.budget, head + self.working_tokens + self.resent)

    @property
    def working_tokens(self) -> int:
        """Our count of the working set's latest copy in the body (0: the body has none)."""
        at = working_set.latest_copy(self.body, self.working)
        return 0 if at is None else self.counter.message(self.body[at])

    @property
    def resent(self) -> int:
        """What the client sends again beside the history this request asks the proxy to
        compact (`/v1/responses/compact`): its working set, which it keeps out of the
        history (aider-shaped clients, Codex's re-sent context), as large as in the
        session's last forwarded request. Left out, the compacted history was sized for
        the room the instructions alone leave: the next request, the working set back
        beside it, landed above the usable input, and the client compacted again two
        requests later. 0 for any other request, and for one that carries its own."""
        if self.request.compaction is not Compaction.COMPACT or self.working_tokens:
            return 0
        last = self.state.last_context or {}
        tokens = last.get("working_set", 0)
        return tokens if isinstance(tokens, int) and tokens > 0 else 0

    async def planned(self, plan: Callable[[TokenCounter, Mentions], _T]) -> _T:
        """`plan(counter, mentions)`, a plan of this turn (the core's, pure): in a worker
        thread when one of the request's messages holds `OFF_LOOP_BYTES` of text or more,
        else right here.

        A large message's plan counts what it cuts (a trimmed message's head and tail, the
        trimmed message), 0.6 to 1.5 s of tiktoken for a 2 MB message without whitespace:
        that must not hold the event loop. The thread plans with a counter of its own
        (`TokenCounter.apart`), whose new counts are cached here afterwards, so the counts
        of what is forwarded are found again; and so with what messages mention.

        Any other turn plans on the loop, however long its history: the counts of its
        messages are cached, and its plan takes 1 to 3 ms. In a thread it took 40 ms while
        other requests kept the loop busy (the thread waits for the interpreter, then its
        result waits its turn on the loop), the slowest turns of an 8-agent fleet. So does a
        preparation's: in a thread it was starved so that one summary in three was not ready
        when its compaction came, which then truncated.
        """
        if not self._has_large_message():
            return plan(self.counter, self.mentions)
        apart = self.counter.apart()
        mentions = self.mentions.apart()
        result = await asyncio.to_thread(plan, apart, mentions)
        self.counter.merge(apart)
        self.mentions.merge(mentions)
        return result


class Turns:
    """Builds `Turn`s: tenant, session, checkpoint, window, calibration, counter."""

    def __init__(
        self,
        *,
        memory: Memory,
        policies: ModelPolicies,
        encoders: Encoders,
        upstream: Upstream,
        upstream_api_key: str | None,
        client_keys: ClientKeys | None = None,
    ) -> None:
        self._memory = memory
        self._keys = client_keys
        self._policies = policies
        self._encoders = encoders
        self._upstream = upstream
        self._api_key = upstream_api_key
        # One counter per encoding for the life of the process: its cache is what makes a
        # long history cheap to count again on every turn. What messages mention does not
        # depend on the encoding: one cache for all.
        self._counters: dict[str, TokenCounter] = {}
        self._mentions = Mentions()
        self._reported: dict[str, int | None] = {}

    async def begin(self, incoming: Incoming, request: ChatRequest) -> Turn:
        """The turn of a chat completion request (counted in its session)."""
        tenant = self.tenant(credentials_of(incoming))
        session = incoming.header("x-session-id")
        return await self._build(incoming, request, tenant, session, count=True)

    async def resume(
        self, incoming: Incoming, request: ChatRequest, *, tenant: str, session: str | None
    ) -> Turn:
        """A turn over a stored session for an operator's action (counted as no turn):
        `request` is rebuilt from the session's archive, or is the client's own without its
        chat command. `session` None derives it from the messages."""
        return await self._build(incoming, request, tenant, session, count=False)

    def tenant(self, credentials: Headers) -> str:
        """The tenant of a caller: the one its key names in `auth.keys` when keys are set,
        else the proxy's own key when it has one, else the caller's credential.

        Raises AuthenticationError for a key `auth.keys` does not list (or none at all).
        """
        if self._keys is None:
            return tenant_of(self._api_key or _credential_value(credentials))
        name = self._keys.tenant_for(presented_key(credentials))
        if name is None:
            # OpenAI's answer to a wrong key, without echoing any part of the key.
            raise AuthenticationError(
                "Incorrect API key provided: this proxy does not accept it (auth.keys). "
                "Send your key as `Authorization: Bearer <key>`."
            )
        return tenant_of_name(name)

    async def _build(
        self,
        incoming: Incoming,
        request: ChatRequest,
        tenant: str,
        session_header: str | None,
        *,
        count: bool,
    ) -> Turn:
        head, body = split_head(request.messages)
        digests = Digests()
        hashes = chain_hashes(body, digests.of)
        credentials = credentials_of(incoming)
        session = session_id_of(
            session_header,
            hashes,
            item=request.session,
            client=client_session_id(incoming.headers),
        )
        model = request.model
        policy = self._policies.for_model(model)
        counter = self.counter(model).for_request(digests)
        await count_off_loop(counter, request)
        state, checkpoint = await self._opened(tenant, session, model, hashes, count=count)
        working = await self._working(tenant, session, body, hashes, digests, state)
        window = await self.window(model, credentials, tenant)
        learned = await self._memory.calibration(tenant, model)
        budget = request_budget(
            window.tokens,
            request.body,
            output_reserved=policy.output_reserved,
            margin_share=policy.safety_margin,
            calibration=learned or 1.0,
        )
        return Turn(
            request=request,
            incoming=incoming,
            tenant=tenant,
            session=session,
            head=head,
            body=body,
            hashes=hashes,
            policy=policy,
            budget=budget,
            counter=counter,
            state=state,
            checkpoint=checkpoint,
            credentials=credentials,
            digests=digests,
            mentions=self._mentions.for_request(digests),
            estimated=learned is None and counter.encoder.name == APPROXIMATE,
            working=working,
        )

    async def _working(
        self,
        tenant: str,
        session: str | None,
        body: list[Message],
        hashes: list[str],
        digests: Digests,
        state: SessionState,
    ) -> frozenset[bytes]:
        """The client's working set in `body`, told from what the session's previous request
        ended with (and whether it had one, in `state`); this request's end remembered for
        the next. Only a request whose end holds a large user message asks the store (the
        rest have none to tell apart)."""
        now = working_set.seen(body, hashes)
        if session is None or not now.holds_large():
            return frozenset()
        stored = await self._memory.swap_tail(tenant, session, json.dumps(now.to_json()))
        previous = working_set.Seen.parsed(stored)
        had = bool((state.last_context or {}).get("working_set"))
        return working_set.working_set(previous, body, hashes, digests.of, had=had)

    async def _opened(
        self,
        tenant: str,
        session: str | None,
        model: str | None,
        hashes: Sequence[str],
        *,
        count: bool,
    ) -> tuple[SessionState, Checkpoint | None]:
        """The session's state (after counting the turn when `count`) and its checkpoint
        of the longest prefix of the body: with Redis, one round trip."""
        if count:
            opened = await self._memory.open_turn(tenant, session, model, time.time(), hashes)
            return opened.state, opened.checkpoint
        checkpoint, state = await asyncio.gather(
            self._memory.find_checkpoint(tenant, session, hashes),
            self._memory.session(tenant, session),
        )
        return state or SessionState(), checkpoint

    @property
    def policies(self) -> ModelPolicies:
        return self._policies

    @policies.setter
    def policies(self, policies: ModelPolicies) -> None:
        """New policies for every turn from now on (the operator's `PATCH /config`)."""
        self._policies = policies

    def counter(self, model: str | None) -> TokenCounter:
        encoder = self._encoders.for_model(model)
        if encoder.name not in self._counters:
            self._counters[encoder.name] = TokenCounter(encoder)
        return self._counters[encoder.name]

    async def window(self, model: str | None, credentials: Headers, tenant: str) -> Window:
        """The model's window for `tenant`, by the one rule (`proxy.core.windows.decide_window`):
        the upstream is asked only when nothing explicit or well known says it; a window the
        tenant's own overflow errors taught caps it."""
        configured = self._policies.configured_window(model)
        context_window = self._policies.default.context_window
        reported = None
        if model and needs_detection(
            configured=configured, context_window=context_window, model=model
        ):
            reported = await self._reported_window(model, credentials)
        return decide_window(
            model,
            configured=configured,
            context_window=context_window,
            reported=reported,
            learned=await self._memory.learned_window(tenant, model),
        )

    async def _reported_window(self, model: str, credentials: Headers) -> int | None:
        if model not in self._reported:
            self._reported[model] = await self._ask_models(model, credentials)
        return self._reported[model]

    async def _ask_models(self, model: str, credentials: Headers) -> int | None:
        headers = [("authorization", f"Bearer {self._api_key}")] if self._api_key else credentials
        try:
            response, raw = await fetched(
                self._upstream, UpstreamRequest("GET", "models", "", headers)
            )
        except UpstreamError:
            return None
        return window_in(raw, model) if response.status == 200 else None


async def count_off_loop(counter: TokenCounter, request: ChatRequest) -> None:
    """Count a request's uncounted messages in a worker thread when they hold at least
    `OFF_LOOP_BYTES` of text, so that every later count of them is a cache hit.

    Encoding runs without the GIL (tiktoken releases it), so other requests go on meanwhile.
    A smaller request is counted where it is used: a thread hop would cost it more than the
    count (and most requests are a history whose counts are cached plus one new message).
    """
    if len(request.raw) < OFF_LOOP_BYTES:
        return
    pending = counter.unknown(request.messages)
    if sum(text_size(message) for _, message in pending) >= OFF_LOOP_BYTES:
        counter.remember(await asyncio.to_thread(counter.count_apart, pending))


def credentials_of(incoming: Incoming) -> Headers:
    """The headers that authenticate the caller (passed on to the summary brain)."""
    return [(k, v) for k, v in incoming.headers if k.lower() in _CREDENTIAL_HEADERS]


def _credential_value(credentials: Headers) -> str | None:
    for name, value in credentials:
        if name.lower() == "x-api-key":
            # The same key as a bearer token (Anthropic's SDK sends one, Claude Code the
            # other, by how it was given the key) is the same caller: one tenant.
            return f"Bearer {value}"
        if name.lower() in KEY_HEADERS:
            return value
    return None
