"""The service: the one place where the core's decisions meet the I/O edges.

For a chat completion (and a Responses API request, read into the same chat view): load
the session's state (checkpoint, turn, calibration, window), build the view, count it, run
the hooks and compact if the core says so (calling the summary brain, storing the new
checkpoint), forward, retry once after a fixable overflow, record usage and archive the
original messages. A Responses API request whose history lives on the provider
(`previous_response_id`, `conversation`) is forwarded untouched, as is every other `/v1/*`
request. Each compacted request is followed by an `Access` (`access.py`): its timings and
outcome go to the metrics and to one line of the request log.

It knows nothing of FastAPI: requests come in as `Incoming` values and leave as `Reply`
values, so the whole path can be driven without an HTTP server. A failure of the proxy's own
parts (the store, the summarizer) degrades to plain forwarding, never to a failed request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from proxy.adapters.store import EndedTurn, Store, StoreUnavailableError
from proxy.adapters.summarizer import Summarizer
from proxy.adapters.tokenizer import Encoders
from proxy.adapters.upstream import Upstream, UpstreamRequest
from proxy.core import anthropic, hooks
from proxy.core.anthropic_errors import prompt_too_long
from proxy.core.breaker import Breaker
from proxy.core.capsule import Sealer
from proxy.core.commands import Command, command_of
from proxy.core.delegation import Handler
from proxy.core.headers import Headers, upstream_request_headers
from proxy.core.keys import ClientKeys
from proxy.core.paths import anthropic_path
from proxy.core.policy import ModelPolicies
from proxy.core.request import (
    Api,
    ChatRequest,
    counted_body,
    parse_chat_request,
    parse_compact_request,
    parse_messages_request,
    parse_responses_request,
)
from proxy.core.responses import server_state
from proxy.core.room import in_room
from proxy.core.tokens import TokenCounter
from proxy.errors import ContextLengthExceededError
from proxy.observability.metrics import Metrics
from proxy.service import reports
from proxy.service.access import Access, Stopwatch
from proxy.service.chat import Answer, ChatForwarder
from proxy.service.commands import ChatCommands
from proxy.service.compactions import ClientCompactions, with_compaction_item
from proxy.service.compactor import Compactor
from proxy.service.memory import LEARNED_TTL_S, Memory
from proxy.service.messages import TokenCounts
from proxy.service.operator import Operator
from proxy.service.outcome import Outcome, Uncounted
from proxy.service.preparer import Preparer
from proxy.service.reachability import Reachability
from proxy.service.replies import Incoming, Reply, buffered, streamed
from proxy.service.turns import Turn, Turns, credentials_of

__all__ = ["Incoming", "ProxyService", "Reply", "ServiceConfig"]

logger = logging.getLogger("proxy.service")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """The settings the service works by, as the core's values."""

    policies: ModelPolicies = field(default_factory=ModelPolicies)
    rules: tuple[hooks.Hook, ...] = ()
    upstream_api_key: str | None = None
    client_keys: ClientKeys | None = None
    """`auth.keys`: when set, only these keys may call, each in its tenant."""
    summary_timeout_s: float = 120.0
    summary_breaker: Breaker = field(default_factory=Breaker)
    """After how many failed summaries in a row, and for how long, summaries are skipped."""
    summary_concurrency: int = 4
    """Summaries written at once by this replica."""
    chat_commands: bool = False
    log_content: bool = False
    """Put the last user message (truncated) in each request's log line."""
    learned_ttl_s: float = LEARNED_TTL_S
    """How long a tenant's learned window and calibration last (`context.learned_ttl_s`)."""
    compaction_by: Handler = "upstream"
    """Who answers the Responses API's compaction requests (`responses.compaction`)."""
    sealer: Sealer | None = None
    """Seals the proxy's compaction items and opens them again (`responses.compaction_key`);
    needed when the proxy answers compaction requests."""
    provider_edits_by: Literal["provider", "proxy"] = "provider"
    """Who compacts a Messages request whose `context_management` asks the provider to
    clear or compact (`messages.context_management`)."""


class ProxyService:
    """Forwards OpenAI-compatible requests, compacting chat completions on the way."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        store: Store,
        encoders: Encoders,
        config: ServiceConfig,
        summarizer: Summarizer | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._upstream = upstream
        self._reachability = Reachability(upstream, api_key=config.upstream_api_key)
        self._store = store
        self._api_key = api_key = config.upstream_api_key
        self.metrics = metrics = metrics or Metrics()
        self._log_content = config.log_content
        self.memory = Memory(store, metrics=metrics, learned_ttl_s=config.learned_ttl_s)
        self._turns = Turns(
            memory=self.memory,
            policies=config.policies,
            encoders=encoders,
            upstream=upstream,
            upstream_api_key=api_key,
            client_keys=config.client_keys,
        )
        # One per process: a brain that keeps failing is skipped for a while (see breaker.py).
        preparer = Preparer(
            memory=self.memory,
            summarizer=summarizer or Summarizer(upstream),
            metrics=metrics,
            breaker=config.summary_breaker,
            max_concurrent=config.summary_concurrency,
            lock_ttl_s=config.summary_timeout_s * 2 + 30,
        )
        self._compactor = Compactor(
            memory=self.memory,
            preparer=preparer,
            rules=config.rules,
            summary_timeout_s=config.summary_timeout_s,
            metrics=metrics,
        )
        self._background: set[asyncio.Task[None]] = set()
        self._shapes = reports.Shapes()
        self._sent = reports.SentTokens()
        self.operator = Operator(store=store, turns=self._turns, compactor=self._compactor)
        self._commands = (
            ChatCommands(turns=self._turns, operator=self.operator)
            if config.chat_commands
            else None
        )
        self._sealer = config.sealer
        self._provider_edits_by = config.provider_edits_by
        self._compactions: ClientCompactions | None = None
        if config.compaction_by == "proxy":
            if config.sealer is None:
                raise ValueError("the proxy answers compaction requests only with a sealer")
            self._compactions = ClientCompactions(
                compactor=self._compactor, sealer=config.sealer, memory=self.memory
            )
        self._counts = TokenCounts(
            upstream=upstream,
            turns=self._turns,
            memory=self.memory,
            api_key=api_key,
            metrics=metrics,
        )
        self._chat = ChatForwarder(
            upstream=upstream,
            memory=self.memory,
            compactor=self._compactor,
            api_key=api_key,
            spawn=self._spawn,
            metrics=metrics,
        )

    async def chat_completion(self, incoming: Incoming, raw: bytes) -> Reply:
        """Compact if needed, forward, and relay the answer (streams chunk by chunk)."""
        return await self._handle(incoming, raw, parse_chat_request, Api.CHAT)

    async def response(self, incoming: Incoming, raw: bytes) -> Reply:
        """The same for a Responses API request (`POST /v1/responses`); one whose `input`
        ends with `compaction_trigger` is a compaction request (see `compact`)."""
        manage = self._compactions is not None
        return await self._handle(
            incoming,
            raw,
            lambda r: parse_responses_request(r, self._sealer, manage=manage),
            Api.RESPONSES,
        )

    async def compact(self, incoming: Incoming, raw: bytes) -> Reply:
        """A compaction request (`POST /v1/responses/compact`): answered by the proxy, or
        forwarded untouched (`responses.compaction`; and always when the provider holds the
        history, `previous_response_id`). The reply names who in `x-compaction-handled-by`."""
        return await self._handle(
            incoming, raw, lambda r: parse_compact_request(r, self._sealer), Api.RESPONSES
        )

    async def input_tokens(self, incoming: Incoming, raw: bytes) -> Reply:
        """`POST /v1/responses/input_tokens`: forwarded with the proxy's compaction items
        expanded into their blocks, which the provider counts (it could read none of the
        items). What it counts is the input as the client sent it, not the proxy's view of
        it after a compaction by pressure. Raises InvalidRequestError as a create would: an
        item whose seal fails, a `previous_response_id` the proxy answered itself."""
        watch = Stopwatch(self.metrics)
        access = Access(action="input_tokens", method=incoming.method, path=incoming.path)
        try:
            access = replace(access, tenant=self.tenant_of(credentials_of(incoming)))
            payload = counted_body(raw, self._sealer)
            headers = upstream_request_headers(incoming.headers, api_key=self._api_key)
            request = UpstreamRequest("POST", incoming.path, incoming.query, headers, payload)
            response = await watch.headers(self._upstream.send(request))
            reply = await watch.body(buffered(response))
        except BaseException as exc:
            watch.failed(access, exc)
            raise
        return watch.relay(reply, access)

    async def messages(self, incoming: Incoming, raw: bytes) -> Reply:
        """The same for a Messages API request (`POST /v1/messages`, Claude Code's)."""
        return await self._handle(incoming, raw, parse_messages_request, Api.MESSAGES)

    async def count_tokens(self, incoming: Incoming, raw: bytes) -> Reply:
        """`POST /v1/messages/count_tokens`: forwarded, or answered from the proxy's
        calibrated count when the provider lacks it (`proxy.service.messages`)."""
        return await self._counts.answer(incoming, raw)

    async def _handle(
        self, incoming: Incoming, raw: bytes, parse: Callable[[bytes], ChatRequest], api: Api
    ) -> Reply:
        """The request path, top to bottom. Each step returns the next value (the request,
        the turn, the outcome, the answer) and `access` is remade from them as they come,
        so that whatever ends the request, its log line says what was known by then (`api`:
        the route's, for a body that does not parse)."""
        watch = Stopwatch(self.metrics, log_content=self._log_content)
        access = Access(api=api)
        try:
            request = parse(raw)
            access = Access(request)
            if request.compaction is not None:
                by = self._compaction_by(request)
                access = replace(access, action=request.compaction.value, compaction_by=by)
                reply, access = await self._compaction(incoming, request, watch, access)
            elif request.api is Api.RESPONSES and server_state(request.body):
                access = replace(access, action="server_state")
                reply = await self._server_state(incoming, request, watch)
            elif self._provider_edits(request):
                access = replace(access, action="provider_edits")
                reply = await self._server_state(incoming, request, watch, "provider_edits")
            elif self._commands is not None and (command := _command(request)) is not None:
                access = replace(access, action="command")
                reply = await self._commands.answer(command, incoming, request)
            else:
                turn = await self._counts.calibrated(await self._turns.begin(incoming, request))
                access = replace(access, turn=turn)
                if (incoming.header("x-compaction") or "").lower() == "off":
                    access = replace(access, action="off")
                    reply = await self._untouched(incoming, request, watch)
                    reply = self._then(reply, lambda: self._archive(turn))
                else:
                    turn, handled = self._automatic(turn)
                    access = replace(access, turn=turn, compaction_by=handled)
                    outcome, item = await self._compacted(turn)
                    access = replace(access, outcome=outcome)
                    self._check_fits(turn, outcome)
                    answer = await self._chat.forward(turn, outcome, watch)
                    access = replace(access, outcome=answer.outcome)
                    reply = self._answered(turn, answer, item)
        except BaseException as exc:
            watch.failed(access, exc)
            raise
        return watch.relay(reply, access)

    def _automatic(self, turn: Turn) -> tuple[Turn, Handler | None]:
        """The turn, and who compacts it when its request asks the provider to compact on
        its own (`context_management`): the proxy, in the provider's place, at the client's
        threshold instead of its own trigger (`ClientCompactions.automatic`)."""
        if turn.request.automatic is None:
            return turn, None
        return replace(turn, policy=turn.policy.replace(auto_compact=False)), "proxy"

    async def _compacted(self, turn: Turn) -> tuple[Outcome | Uncounted, dict[str, Any] | None]:
        """What to forward: the hooks' and the compaction's outcome, with the client's own
        request counted whole even when a checkpoint stood in for part of it (or the view
        as it stands, counted so while it is answered, when no count could change it); and
        the compaction item to give back with the answer, when the client's
        `context_management` had the proxy compact."""
        uncounted = self._compactor.uncounted(turn)
        if uncounted is not None:
            return uncounted.then(lambda outcome: self._with_sent(turn, outcome)), None
        outcome = self._with_sent(turn, await self._compactor.before_forward(turn))
        if turn.request.automatic is None or self._compactions is None:
            return outcome, None
        automatic = await self._compactions.automatic(turn, outcome)
        return automatic.outcome, automatic.item

    def _with_sent(self, turn: Turn, outcome: Outcome) -> Outcome:
        return replace(outcome, sent=self._sent.of(turn, turn.checkpoint, outcome.tokens_before))

    def _check_fits(self, turn: Turn, outcome: Outcome | Uncounted) -> None:
        """Raise the provider's own overflow error when compaction had its chance and what is
        left is still over the window: forwarding it would only fetch that error. The turn
        is recorded as refused, with the tokens it carried (the session API shows it).

        Not on an estimate no answer has calibrated yet (`Turn.estimated`): it errs high, and
        a request it refused would never fetch the usage that corrects it. Forwarded, it is
        answered, or refused by the provider itself (then compacted hard and retried)."""
        if not isinstance(outcome, Outcome) or not outcome.tried or turn.estimated:
            return  # an uncounted view never tried a plan: it is well below the window
        if turn.budget.beyond_window(outcome.tokens_after):
            self._spawn(self._refused(turn, outcome))
            raise _cannot_fit(turn, outcome)

    async def _refused(self, turn: Turn, outcome: Outcome) -> None:
        # What it carried, and nothing forwarded.
        point = replace(
            reports.turn_point(turn, outcome, outcome.sent), action="refused", tokens_after=0
        )
        context = reports.context_numbers(turn, outcome).to_json()
        ended = EndedTurn(point, context, None, turn.request.messages, self._archived_hashes(turn))
        await self.memory.end_turn(turn.tenant, turn.session, ended)

    def _answered(self, turn: Turn, answer: Answer, item: dict[str, Any] | None = None) -> Reply:
        """The answer with its compaction headers, and `item` first in its output (the
        proxy's compaction in the provider's place); what the turn leaves behind (the
        archive, the timeline, the turn-end hooks) is done once it has been sent."""
        outcome, tally = answer.outcome, answer.recalls
        reply = self._then(
            answer.reply, lambda: self._after(turn, outcome, tally.calls if tally else 0)
        )
        headers = _compaction_headers(turn, outcome)
        if turn.request.automatic is not None:
            reply = with_compaction_item(reply, item)
            headers.append(("x-compaction-handled-by", "proxy"))
        return reply.with_headers(headers)

    def _compaction_by(self, request: ChatRequest) -> Handler:
        """Who answers a compaction request: the upstream when the proxy leaves compaction
        to it, or when the provider holds the history (the proxy cannot see it)."""
        if self._compactions is None or server_state(request.body):
            return "upstream"
        return "proxy"

    async def _compaction(
        self, incoming: Incoming, request: ChatRequest, watch: Stopwatch, access: Access
    ) -> tuple[Reply, Access]:
        """A compaction request, forwarded untouched or answered with the proxy's own."""
        by = access.compaction_by
        if self._compactions is None or by == "upstream":
            self.tenant_of(credentials_of(incoming))
            reply = await self._untouched(incoming, request, watch)
        else:
            tenant = self.tenant_of(credentials_of(incoming))
            session = incoming.header("x-session-id")
            turn = await self._turns.resume(incoming, request, tenant=tenant, session=session)
            access = replace(access, turn=turn)
            answered = await self._compactions.answer(turn)
            access = replace(access, outcome=answered.outcome)
            # Archived as any turn is: what the block's recall ids stand for is read there.
            reply = self._then(answered.reply, lambda: self._archive(turn))
        return reply.with_headers([("x-compaction-handled-by", str(by))]), access

    def _provider_edits(self, request: ChatRequest) -> bool:
        """Whether a Messages request leaves its history to the provider's own context
        editing (`context_management` that clears or compacts), and the operator lets it."""
        return (
            request.api is Api.MESSAGES
            and self._provider_edits_by == "provider"
            and anthropic.provider_compacts(request.body)
        )

    async def _server_state(
        self,
        incoming: Incoming,
        request: ChatRequest,
        watch: Stopwatch,
        applied: str = "server_state",
    ) -> Reply:
        """Forward untouched a request whose history the provider keeps (or edits itself):
        compacting its new items alone would gain nothing and could break the stored turn
        they continue (or undo what the provider's editing relies on)."""
        self.tenant_of(credentials_of(incoming))
        reply = await self._untouched(incoming, request, watch)
        return reply.with_headers([("x-compaction-applied", applied)])

    async def _after(self, turn: Turn, outcome: Outcome, recalls: int = 0) -> None:
        # One write for the turn's record, its archive and the usage its answer reported.
        await self.memory.end_turn(
            turn.tenant,
            turn.session,
            EndedTurn(
                reports.turn_point(turn, outcome, outcome.sent, recalls),
                reports.context_numbers(turn, outcome).to_json(),
                self._shapes.changed(turn),
                turn.request.messages,
                self._archived_hashes(turn),
                turn.answered.usage,
            ),
        )
        if self._compactor.has_turn_end_hooks:
            await self._compactor.after_answer(turn, outcome)

    def _then(self, reply: Reply, work: Callable[[], Coroutine[Any, Any, None]]) -> Reply:
        """`reply`, with `work()` started in the background once its body has been sent."""
        if isinstance(reply.body, bytes):
            self._spawn(work())
            return reply
        return Reply(reply.status, reply.headers, self._relayed(reply.body, work), reply.close)

    async def _relayed(
        self, body: AsyncIterator[bytes], work: Callable[[], Coroutine[Any, Any, None]]
    ) -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            self._spawn(work())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        # The answer has gone out, so nobody awaits this work: what it raises is logged and
        # counted here, once, rather than lost with the task (or printed by asyncio at exit).
        self._background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            logger.error("background work after a turn failed: %r", error, exc_info=error)
            self.metrics.background_task_failed("turn")

    async def _untouched(self, incoming: Incoming, request: ChatRequest, watch: Stopwatch) -> Reply:
        headers = upstream_request_headers(
            incoming.headers, api_key=self._api_key, anthropic=request.api is Api.MESSAGES
        )
        response = await watch.headers(
            self._upstream.send(
                UpstreamRequest("POST", incoming.path, incoming.query, headers, request.raw)
            )
        )
        return streamed(response) if request.stream else await watch.body(buffered(response))

    async def _archive(self, turn: Turn) -> None:
        # After the answer has gone out: the archive is for the operator, not for this
        # answer, and the embedded store's work would otherwise run while we wait for it.
        messages = turn.request.messages
        await self.memory.archive(turn.tenant, turn.session, messages, self._archived_hashes(turn))

    @staticmethod
    def _archived_hashes(turn: Turn) -> list[str]:
        """The archive's key of each message of the request: its digest, made once."""
        return [turn.digests.of(message).hex() for message in turn.request.messages]

    def counter_for(self, model: str | None) -> TokenCounter:
        """The token counter requests for `model` are counted with."""
        return self._turns.counter(model)

    def tenant_of(self, credentials: Headers) -> str:
        """The tenant a caller with `credentials` acts as. Raises AuthenticationError for a
        key `auth.keys` does not list, when it is set."""
        return self._turns.tenant(credentials)

    @property
    def policies(self) -> ModelPolicies:
        return self._turns.policies

    def set_policies(self, policies: ModelPolicies) -> None:
        """Apply new context policies from the next request on (this replica only)."""
        self._turns.policies = policies

    async def passthrough(self, incoming: Incoming, body: AsyncIterable[bytes] | None) -> Reply:
        """Forward any other `/v1/*` request untouched, streaming both bodies, with its own
        access line (method, path, status, times) like every request.

        Raises AuthenticationError, before anything is sent, for a key `auth.keys` does not
        list: the proxy's upstream key is never lent to an unknown caller.
        """
        watch = Stopwatch(self.metrics)
        access = Access(action="passthrough", method=incoming.method, path=incoming.path)
        try:
            access = replace(access, tenant=self.tenant_of(credentials_of(incoming)))
            response = await watch.headers(
                self._upstream.send(
                    UpstreamRequest(
                        method=incoming.method,
                        path=incoming.path,
                        query=incoming.query,
                        headers=upstream_request_headers(
                            incoming.headers,
                            api_key=self._api_key,
                            keep_content_length=True,
                            anthropic=anthropic_path(incoming.path),
                        ),
                        body=body,
                    )
                )
            )
        except BaseException as exc:
            watch.failed(access, exc)
            raise
        return watch.relay(streamed(response), access)

    def details(self) -> dict[str, str]:
        """What works in a degraded way, by part (the proxy still serves): empty when all
        is well. An upstream that did not answer the last background probe is one."""
        found = {}
        upstream = self._reachability.problem()
        if upstream is not None:
            found["upstream"] = upstream
        summarizer = self._compactor.preparer.state()
        if summarizer is not None:
            found["summarizer"] = summarizer
        return found

    async def readiness(self) -> dict[str, str]:
        """What is not usable, by part; empty when the proxy is ready to serve.

        Ready means this replica can serve: its upstream client is open and its store
        answers. Whether the upstream itself answers is not part of it (see
        reachability.py): it is probed in the background, from here, at most once every
        `PROBE_INTERVAL_S`, and shown in `details`.
        """
        self._reachability.renew()
        problems: dict[str, str] = {}
        if not self._upstream.is_open:
            problems["upstream"] = "the upstream client is closed"
        try:
            await self._store.ping()
        except StoreUnavailableError as exc:
            problems["store"] = str(exc)
        return problems

    async def settle(self) -> None:
        """Wait for the background work started so far (archive, usage, timeline, summaries)."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._compactor.preparer.settle()

    async def aclose(self) -> None:
        """Let background work finish; summaries being prepared are abandoned."""
        await self._compactor.preparer.aclose()
        await self._reachability.aclose()
        await self.settle()
        await self.memory.aclose()


def _command(request: ChatRequest) -> Command | None:
    """The chat command the request's last user message is (chat completions only)."""
    return command_of(request.messages) if request.api is Api.CHAT else None


def _cannot_fit(turn: Turn, outcome: Outcome) -> ContextLengthExceededError:
    """The provider's own overflow error, stating the numbers the proxy used: its window, what
    the prompt came to after compaction, the room the provider leaves the prompt, and the
    usable input the proxy compacted toward (the window less the answer's reserve and the
    safety margin)."""
    budget = turn.budget
    room = budget.context_window - budget.stated_output
    if turn.request.api is Api.MESSAGES:
        # Anthropic's own words first: Claude Code compacts its conversation when it reads
        # them, and shows the rest.
        return ContextLengthExceededError(
            prompt_too_long(
                budget.estimate(outcome.tokens_after),
                room,
                f"compaction-proxy compacted everything it could: the window is "
                f"{budget.context_window} tokens, {budget.stated_output} of them asked for "
                f"the answer (max_tokens). Please reduce the messages, the tools or the system "
                "prompt.",
            ),
            param="messages",
        )
    asked = (
        f" with the {budget.stated_output} output tokens requested" if budget.stated_output else ""
    )
    return ContextLengthExceededError(
        f"This model's maximum context length is {budget.context_window} tokens. However, your "
        f"messages resulted in about {budget.estimate(outcome.tokens_after)} tokens even after "
        f"compaction-proxy compacted everything it could{asked}: the provider leaves {room} "
        f"tokens for the prompt, and the proxy compacts toward {budget.available} (the window "
        f"less {budget.output_reserve} reserved for the answer and {budget.margin} of safety "
        "margin). Please reduce the length of the messages, the tools or the instructions.",
        param="input" if turn.request.api is Api.RESPONSES else "messages",
    )


def _compaction_headers(turn: Turn, outcome: Outcome) -> list[tuple[str, str]]:
    headers = [
        ("x-compaction-applied", outcome.strategy or "none"),
        ("x-compaction-tokens-before", str(turn.budget.estimate(outcome.sent))),
        ("x-compaction-tokens-after", str(turn.budget.estimate(outcome.tokens_after))),
        ("x-context-pressure", f"{turn.budget.pressure(outcome.tokens_after):.4f}"),
        # The target a compaction of this request lands at or below: `compaction_target` of
        # the room its instructions and tools leave (`proxy.core.room`), as a pressure.
        ("x-compaction-target", f"{in_room(turn.policy.compaction_target, turn.fixed):.4f}"),
    ]
    if turn.session is not None:
        headers.append(("x-session-id", turn.session))
    return headers
