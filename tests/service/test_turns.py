"""Reading a turn (`service/turns.py`) over the real parts: the embedded store, the mock
provider's `/v1/models` through `AsgiUpstream`, the real encodings. Who the tenant is, which
window applies and when the upstream is asked for it, what is counted in a worker thread."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore
from proxy.adapters.tokenizer import load_encoders
from proxy.core import jsoncodec
from proxy.core.keys import ClientKeys, key_hash
from proxy.core.mentions import Mentions
from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.request import parse_chat_request
from proxy.core.session import tenant_of, tenant_of_name
from proxy.core.tokens import TokenCounter
from proxy.errors import AuthenticationError
from proxy.mock_upstream import MockUpstream
from proxy.observability.metrics import Metrics
from proxy.service.memory import Memory
from proxy.service.replies import Incoming
from proxy.service.turns import OFF_LOOP_BYTES, Turn, Turns, count_off_loop
from tests.builders import assistant, system, user

UNKNOWN = "mock-model"
"""A model no table knows: its window is asked of the upstream."""


@dataclass
class Setup:
    mock: MockUpstream
    turns: Turns
    memory: Memory

    def models_asked(self) -> list[Any]:
        return [r for r in self.mock.requests if r.path == "/v1/models"]


async def setup_of(
    app: ASGIApp | None = None,
    *,
    mock: MockUpstream | None = None,
    policy: ContextPolicy | None = None,
    api_key: str | None = None,
    keys: ClientKeys | None = None,
) -> AsyncIterator[Setup]:
    mock = mock or MockUpstream()
    upstream = AsgiUpstream(app or mock.app)
    await upstream.open()
    memory = Memory(MemoryStore(), metrics=Metrics())
    turns = Turns(
        memory=memory,
        policies=ModelPolicies(default=policy or ContextPolicy()),
        encoders=load_encoders(),
        upstream=upstream,
        upstream_api_key=api_key,
        client_keys=keys,
    )
    try:
        yield Setup(mock, turns, memory)
    finally:
        await memory.aclose()
        await upstream.aclose()


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    async for found in setup_of(mock=MockUpstream(window=32_000)):
        yield found


def incoming(*headers: tuple[str, str]) -> Incoming:
    return Incoming("POST", "chat/completions", "", list(headers))


def request_of(messages: list[Any], model: str | None = UNKNOWN, **body: Any) -> Any:
    return parse_chat_request(jsoncodec.dumps({"model": model, "messages": messages, **body}))


CONVERSATION = [system(), user("hello"), assistant("hi"), user("and now?")]


# --- the tenant ------------------------------------------------------------------------------


def test_each_caller_credential_is_its_own_tenant(setup: Setup) -> None:
    turns = setup.turns
    alice = turns.tenant([("authorization", "Bearer alice")])
    assert alice == tenant_of("Bearer alice")
    assert turns.tenant([("api-key", "bob")]) == tenant_of("bob")  # Azure's header
    assert turns.tenant([("openai-project", "p")]) == tenant_of(None)  # no key at all


async def test_with_the_proxy_own_key_every_caller_is_one_tenant() -> None:
    async for found in setup_of(api_key="sk-proxy"):
        assert found.turns.tenant([("authorization", "Bearer alice")]) == tenant_of("sk-proxy")


async def test_with_client_keys_a_listed_key_acts_as_its_tenant_and_others_are_refused() -> None:
    keys = ClientKeys({key_hash("k-team"): "team"})
    async for found in setup_of(keys=keys):
        assert found.turns.tenant([("authorization", "Bearer k-team")]) == tenant_of_name("team")
        with pytest.raises(AuthenticationError) as refused:
            found.turns.tenant([("authorization", "Bearer k-stranger")])
        assert "k-stranger" not in str(refused.value)  # never echoes the key


# --- the session and its state ---------------------------------------------------------------


async def test_a_request_counts_as_a_turn_and_an_operator_action_does_not(setup: Setup) -> None:
    caller = incoming(("authorization", "Bearer k"), ("x-session-id", "s1"))
    turn = await setup.turns.begin(caller, request_of(CONVERSATION))
    assert (turn.session, turn.state.turns) == ("s1", 1)
    assert turn.head == [system()]
    assert turn.body == CONVERSATION[1:]
    again = await setup.turns.resume(
        caller, request_of(CONVERSATION), tenant=turn.tenant, session="s1"
    )
    assert again.state.turns == 1  # read, not counted
    fresh = await setup.turns.resume(
        caller, request_of(CONVERSATION), tenant=turn.tenant, session="never-seen"
    )
    assert fresh.state.turns == 0  # no stored state: an empty one


async def test_without_a_header_the_session_is_derived_from_the_conversation(
    setup: Setup,
) -> None:
    caller = incoming(("authorization", "Bearer k"))
    one = await setup.turns.begin(caller, request_of(CONVERSATION))
    two = await setup.turns.begin(caller, request_of([*CONVERSATION, assistant(), user()]))
    assert one.session is not None
    assert one.session == two.session  # the same first message: the same conversation


async def test_codex_thread_id_keeps_the_session_when_its_history_starts_anew(
    setup: Setup,
) -> None:
    """After Codex compacts on its own, its history opens with a new first message: the
    derived session would change, the thread it names in `thread-id` does not."""
    thread = ("thread-id", "01a21a0b-0b15-7002-ab9a-83b2d5f1027c")
    caller = incoming(("authorization", "Bearer k"), ("session-id", "root"), thread)
    before = await setup.turns.begin(caller, request_of(CONVERSATION))
    compacted = [system(), user("summary of what was done"), user("and now?")]
    after = await setup.turns.begin(caller, request_of(compacted))
    assert before.session == after.session == thread[1]
    assert after.state.turns == 2
    derived = await setup.turns.begin(
        incoming(("authorization", "Bearer k")), request_of(compacted)
    )
    assert derived.session != thread[1]


async def test_x_session_id_beats_the_client_own_id(setup: Setup) -> None:
    caller = incoming(("thread-id", "codex-thread"), ("x-session-id", "chosen"))
    turn = await setup.turns.begin(caller, request_of(CONVERSATION))
    assert turn.session == "chosen"


# --- the window ------------------------------------------------------------------------------


async def test_an_unknown_model_window_is_asked_of_the_upstream_once(setup: Setup) -> None:
    caller = incoming(("authorization", "Bearer caller"))
    first = await setup.turns.begin(caller, request_of(CONVERSATION))
    second = await setup.turns.begin(caller, request_of(CONVERSATION))
    assert first.budget.context_window == second.budget.context_window == 32_000
    assert len(setup.models_asked()) == 1  # remembered for the life of the process
    # Asked with the caller's own credentials: the proxy has no key of its own.
    assert setup.models_asked()[0].header("authorization") == "Bearer caller"


async def test_the_upstream_is_asked_with_the_proxy_key_when_it_has_one() -> None:
    async for found in setup_of(mock=MockUpstream(window=32_000), api_key="sk-proxy"):
        await found.turns.window(UNKNOWN, [("authorization", "Bearer caller")], "t")
        assert found.models_asked()[0].header("authorization") == "Bearer sk-proxy"


async def test_a_known_or_configured_window_is_not_asked(setup: Setup) -> None:
    known = await setup.turns.window("gpt-4o", [], "t")
    assert known.tokens == 128_000
    nameless = await setup.turns.window(None, [], "t")
    assert nameless.source == "default"
    setup.turns.policies = ModelPolicies(default=ContextPolicy(context_window=9_000))
    assert (await setup.turns.window(UNKNOWN, [], "t")).tokens == 9_000
    assert setup.turns.policies.default.context_window == 9_000
    assert setup.models_asked() == []


async def test_a_window_the_tenant_learned_caps_the_reported_one(setup: Setup) -> None:
    await setup.memory.learn_window("t", UNKNOWN, 20_000)
    assert (await setup.turns.window(UNKNOWN, [], "t")).tokens == 20_000
    assert (await setup.turns.window(UNKNOWN, [], "other")).tokens == 32_000


async def models_unreachable(scope: Scope, receive: Receive, send: Send) -> None:
    raise ConnectionResetError("the upstream dropped the connection")


async def models_refused(scope: Scope, receive: Receive, send: Send) -> None:
    while (await receive())["type"] != "http.request":
        pass
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b'{"data": [{"id": "mock-model"}]}'})


@pytest.mark.parametrize("app", [models_unreachable, models_refused])
async def test_an_upstream_that_does_not_list_the_model_leaves_the_default(app: ASGIApp) -> None:
    """No window from a dropped connection or an error status: the default applies, and the
    request is served all the same."""
    async for found in setup_of(app):
        window = await found.turns.window(UNKNOWN, [], "t")
        assert window.source == "default"


# --- counting --------------------------------------------------------------------------------


def test_one_counter_per_encoding_for_the_life_of_the_process(setup: Setup) -> None:
    """Its cache is what makes a long history cheap to count again on every turn."""
    turns = setup.turns
    assert turns.counter("gpt-4o") is turns.counter(UNKNOWN)  # both o200k_base
    assert turns.counter("gpt-4") is not turns.counter("gpt-4o")  # cl100k_base


def big(n: int) -> str:
    return f"part {n}: " + "lorem ipsum " * (OFF_LOOP_BYTES // 12 + 1)


async def test_a_large_request_is_counted_off_the_loop_before_it_is_used(setup: Setup) -> None:
    counter = setup.turns.counter(UNKNOWN)
    small = request_of([user("a small new message")])
    await count_off_loop(counter, small)
    assert counter.unknown(small.messages)  # counted where it is used, not here
    large = request_of([user(big(1)), assistant(), user("and?")])
    await count_off_loop(counter, large)
    assert counter.unknown(large.messages) == []  # every later count is a cache hit


async def test_a_request_large_for_its_schemas_alone_is_not_counted_apart(setup: Setup) -> None:
    counter = setup.turns.counter(UNKNOWN)
    tools = [{"type": "function", "function": {"name": "f", "description": big(2)}}]
    request = request_of([user("short")], tools=tools)
    assert len(request.raw) >= OFF_LOOP_BYTES
    await count_off_loop(counter, request)
    assert counter.unknown(request.messages)


async def planned_on(turn: Turn) -> tuple[bool, bool]:
    """Where `turn`'s plan ran: on the loop's thread, and with the turn's own caches."""

    def plan(counter: TokenCounter, mentions: Mentions) -> tuple[bool, bool]:
        counter.message(turn.body[-1])
        mentions.names(turn.body[-1])
        own = counter is turn.counter and mentions is turn.mentions
        return threading.current_thread() is threading.main_thread(), own

    return await turn.planned(plan)


async def test_a_small_turn_plans_on_the_loop_and_a_large_one_in_a_thread(setup: Setup) -> None:
    caller = incoming(("authorization", "Bearer k"))
    small = await setup.turns.begin(caller, request_of(CONVERSATION))
    assert await planned_on(small) == (True, True)
    large = await setup.turns.begin(
        caller, request_of([user(big(3)), assistant(), user("a question")])
    )
    assert await planned_on(large) == (False, False)
    # The thread's counts are the turn's afterwards: what is forwarded is not counted again.
    assert large.counter.unknown(large.body) == []


async def test_a_turn_counts_its_view_with_the_schemas_it_declares(setup: Setup) -> None:
    """The provider renders the tool schemas into the prompt: a count without them is low."""
    caller = incoming(("authorization", "Bearer k"))
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    turn = await setup.turns.begin(caller, request_of(CONVERSATION, tools=tools))
    assert turn.model == UNKNOWN
    assert turn.view(None) == CONVERSATION  # no checkpoint: the request as it came
    counter = turn.counter
    assert turn.tokens(CONVERSATION) == counter.messages(CONVERSATION) + counter.tools(
        turn.request.body
    )
    assert counter.tools(turn.request.body) > 0
