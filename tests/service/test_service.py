"""The service's request path (`ProxyService`, `service/__init__.py`), built directly over the
real parts: the mock provider through `AsgiUpstream`, the embedded store (Redis where the
store going away is the point), the real encodings; no web layer (tests/service/parts.py).

Each request takes one way through `_handle`: server-side state, a chat command,
`X-Compaction: off`, or compaction and forwarding; whichever it takes, the reply carries its
headers, what the turn leaves behind is done once the reply is sent, and the log line says
what was known when it ended.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from proxy.adapters.asgi_upstream import AsgiUpstream
from proxy.adapters.store import MemoryStore
from proxy.adapters.tokenizer import load_encoders
from proxy.core import hooks, jsoncodec
from proxy.core.breaker import Breaker
from proxy.core.keys import ClientKeys, key_hash
from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.session import tenant_of
from proxy.errors import AuthenticationError, ContextLengthExceededError, InvalidRequestError
from proxy.mock_upstream import MockUpstream, Reply
from proxy.observability.metrics import Metrics
from proxy.service import Incoming, ProxyService, ServiceConfig
from proxy.service.operator import SessionRef
from tests.builders import assistant, system, user
from tests.redis_server import RedisServer
from tests.service.parts import KEY, Running, header, read, running
from tests.service.stores import store_of
from tests.service.test_background_tasks import BrokenArchive
from tests.service.test_compactor import SUMMARY_FAILS, history

TENANT = tenant_of(KEY)
POLICY = ContextPolicy(context_window=6_000, keep_recent=2, output_reserved=500)
CONFIG = ServiceConfig(policies=ModelPolicies(default=POLICY))
CALLER = Incoming("POST", "compact", "", [("authorization", KEY)])


@pytest.fixture
async def proxy() -> AsyncIterator[Running]:
    async with running(CONFIG) as found:
        yield found


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="proxy.access")
    return caplog


def access_lines(log: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The fields of each request log line written."""
    return [vars(r) for r in log.records if r.name == "proxy.access"]


def chat(messages: list[Any], **body: Any) -> dict[str, Any]:
    return {"model": "mock-model", "messages": messages, **body}


def chats(mock: MockUpstream) -> list[Any]:
    """The chat completions the provider got (summary requests apart)."""
    return [
        r
        for r in mock.requests
        if r.path == "/v1/chat/completions" and r not in mock.summary_requests
    ]


# --- compacting and forwarding ------------------------------------------------------------------


async def test_a_compacted_turn_is_answered_with_its_headers_and_leaves_its_records(
    proxy: Running, log: pytest.LogCaptureFixture
) -> None:
    reply = await proxy.ask(chat(history(18)))
    answer = json.loads(await read(reply))
    assert answer["choices"][0]["message"]["content"]
    assert header(reply, "x-compaction-applied") == "truncate"
    before = int(header(reply, "x-compaction-tokens-before") or 0)
    after = int(header(reply, "x-compaction-tokens-after") or 0)
    assert after < before
    # It landed at or below the target it states: the default's, a little above 0.45 (the
    # instructions take a little of the usable input).
    target = float(header(reply, "x-compaction-target") or 0)
    assert 0.45 < target < 0.46
    assert float(header(reply, "x-context-pressure") or 1) <= target
    assert header(reply, "x-session-id") == "s1"
    await proxy.service.settle()
    detail = await proxy.service.operator.detail(SessionRef(TENANT, "s1"))
    assert [p["action"] for p in detail["timeline"]] == ["truncate"]  # recorded after the answer
    assert await proxy.service.operator.messages(SessionRef(TENANT, "s1"), "original") == history(
        18
    )
    (line,) = access_lines(log)
    assert line["action"] == "truncate"
    assert line["status"] == 200


async def test_a_stream_leaves_its_records_once_it_has_been_relayed(proxy: Running) -> None:
    reply = await proxy.ask(chat(history(2), stream=True))
    assert not isinstance(reply.body, bytes)
    await proxy.service.settle()
    assert await proxy.service.memory.store.archived(TENANT, "s1") == []  # not sent yet
    text = (await read(reply)).decode()
    assert text.rstrip().endswith("data: [DONE]")
    await proxy.service.settle()
    assert await proxy.service.memory.store.archived(TENANT, "s1") == history(2)


async def test_a_request_without_a_session_is_answered_without_its_header(
    proxy: Running,
) -> None:
    """Only instructions: no conversation to derive a session from, none sent."""
    reply = await proxy.ask(chat([system("rules")]), session=None)
    await read(reply)
    assert header(reply, "x-session-id") is None
    assert header(reply, "x-compaction-applied") == "none"


async def test_the_client_request_is_counted_whole_under_a_checkpoint(proxy: Running) -> None:
    """The second request forwards the first's checkpoint: its before-count is still the
    client's whole request, not the shorter view."""
    first = await proxy.ask(chat(history(18)))
    await read(first)
    second = await proxy.ask(chat([*history(18), assistant("more"), user("again")]))
    await read(second)
    assert header(second, "x-compaction-applied") == "none"  # nothing new compacted...
    before = int(header(second, "x-compaction-tokens-before") or 0)
    after = int(header(second, "x-compaction-tokens-after") or 0)
    assert after < before / 2  # ...the first one's checkpoint forwarded instead
    assert before > int(header(first, "x-compaction-tokens-before") or 0)


async def test_what_cannot_fit_after_compaction_is_refused_without_asking_the_provider(
    log: pytest.LogCaptureFixture,
) -> None:
    small = ServiceConfig(policies=ModelPolicies(default=ContextPolicy(context_window=2_000)))
    async with running(small) as proxy:
        huge = [system("rules " * 3_000), user("hi")]
        with pytest.raises(ContextLengthExceededError) as chat_refused:
            await proxy.ask(chat(huge, max_tokens=300))
        body = {"model": "mock-model", "instructions": "rules " * 3_000, "input": "hi"}
        with pytest.raises(ContextLengthExceededError) as responses_refused:
            await proxy.ask(body, path="responses")
        assert chats(proxy.mock) == []
    assert "maximum context length is 2000 tokens" in str(chat_refused.value)
    assert "with the 300 output tokens requested" in str(chat_refused.value)
    assert chat_refused.value.param == "messages"
    assert "output tokens requested" not in str(responses_refused.value)
    assert responses_refused.value.param == "input"
    assert [line["status"] for line in access_lines(log)] == [400, 400]


async def test_a_body_that_is_no_request_is_refused_and_logged_as_its_routes_api(
    proxy: Running, log: pytest.LogCaptureFixture
) -> None:
    incoming = Incoming("POST", "chat/completions", "", [("authorization", KEY)])
    with pytest.raises(InvalidRequestError):
        await proxy.service.chat_completion(incoming, b"{not json")
    (line,) = access_lines(log)
    # No model, no session: what the body would have said is unknown; the route's API is not.
    assert (line["status"], line["api"], line["model"]) == (400, "chat", None)


# --- the requests compaction leaves alone ------------------------------------------------------


async def test_x_compaction_off_forwards_the_client_bytes_and_archives(
    proxy: Running, log: pytest.LogCaptureFixture
) -> None:
    body = chat(history(18))
    reply = await proxy.ask(body, headers=(("X-Compaction", "OFF"),))
    await read(reply)
    assert header(reply, "x-compaction-applied") is None
    assert json.loads(chats(proxy.mock)[-1].body) == body  # the whole history, as sent
    streamed = await proxy.ask({**body, "stream": True}, headers=(("x-compaction", "off"),))
    assert (await read(streamed)).rstrip().endswith(b"data: [DONE]")
    await proxy.service.settle()
    assert await proxy.service.memory.store.archived(TENANT, "s1") == history(18)
    assert [line["action"] for line in access_lines(log)] == ["off", "off"]


async def test_a_responses_request_the_provider_holds_the_history_of_is_untouched(
    proxy: Running,
) -> None:
    body = {"model": "mock-model", "input": "go on", "previous_response_id": "resp_1"}
    reply = await proxy.ask(body, path="responses")
    await read(reply)
    assert header(reply, "x-compaction-applied") == "server_state"
    assert json.loads(proxy.mock.last.body) == body


async def test_server_state_is_refused_to_a_key_auth_keys_does_not_list() -> None:
    config = ServiceConfig(client_keys=ClientKeys({key_hash("listed"): "team"}))
    async with running(config) as proxy:
        body = {"model": "mock-model", "input": "go on", "previous_response_id": "resp_1"}
        with pytest.raises(AuthenticationError):
            await proxy.ask(body, path="responses")
        assert proxy.mock.requests == []


async def test_a_chat_command_is_answered_by_the_proxy_when_enabled() -> None:
    async with running(ServiceConfig(policies=CONFIG.policies, chat_commands=True)) as proxy:
        await read(await proxy.ask(chat(history(2))))
        await proxy.service.settle()
        reply = await proxy.ask(chat([*history(2), assistant(), user("/context")]))
        answer = json.loads(await read(reply))
        assert "**Context**" in answer["choices"][0]["message"]["content"]
        assert len(chats(proxy.mock)) == 1  # the provider never saw the command
        # On the Responses API a "/context" is the user's text, forwarded.
        await read(await proxy.ask({"model": "mock-model", "input": "/context"}, path="responses"))
        assert proxy.mock.last.path == "/v1/responses"


async def test_without_chat_commands_a_command_is_just_text(proxy: Running) -> None:
    await read(await proxy.ask(chat([user("/context")])))
    assert len(chats(proxy.mock)) == 1


# --- after the answer ----------------------------------------------------------------------------


async def test_a_turn_end_hook_runs_after_the_answer() -> None:
    rules = (hooks.Hook("turn_end", hooks.MessageCount(20), hooks.CompactContext()),)
    config = ServiceConfig(policies=CONFIG.policies, rules=rules)
    async with running(config) as proxy:
        reply = await proxy.ask(chat(history(10)))
        await read(reply)
        assert header(reply, "x-compaction-applied") == "none"
        await proxy.service.settle()
        forwarded = await proxy.service.operator.messages(SessionRef(TENANT, "s1"), "forwarded")
        assert len(forwarded) < len(history(10))  # the next request starts compacted


async def test_background_work_that_fails_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After the answer nobody awaits the turn's records: a defect there (the store's
    `archive` raising an error no caller expects) is logged and counted, once, and the
    answer had gone out already."""
    async with running(CONFIG, store=BrokenArchive()) as proxy:
        reply = await proxy.ask(chat(history(2)))
        assert reply.status == 200
        await read(reply)
        await proxy.service.settle()
        failures = proxy.service.metrics.registry.get_sample_value(
            "compaction_proxy_background_task_failures_total", {"kind": "turn"}
        )
    assert failures == 1
    assert "background work after a turn failed" in caplog.text


class SlowArchive(MemoryStore):
    """The embedded store, slow to archive: the work is still pending when the loop ends."""

    async def archive(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(30)


async def test_work_cancelled_with_its_loop_is_no_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process stopped without its lifespan's close (its loop's tasks cancelled) logs no
    failure for the work it abandoned: cancelled is not failed."""

    async def served_then_stopped() -> Metrics:
        upstream = AsgiUpstream(MockUpstream().app)
        await upstream.open()
        service = ProxyService(
            upstream=upstream, store=SlowArchive(), encoders=load_encoders(), config=CONFIG
        )
        incoming = Incoming("POST", "chat/completions", "", [("authorization", KEY)])
        reply = await service.chat_completion(incoming, jsoncodec.dumps(chat(history(2))))
        assert reply.status == 200
        await asyncio.sleep(0.01)  # the archive has begun
        return service.metrics  # the loop ends here: `asyncio.run` cancels what is left

    metrics = await asyncio.to_thread(asyncio.run, served_then_stopped())
    failures = metrics.registry.get_sample_value(
        "compaction_proxy_background_task_failures_total", {"kind": "turn"}
    )
    assert failures is None
    assert "background work after a turn failed" not in caplog.text


async def test_new_policies_apply_from_the_next_request(proxy: Running) -> None:
    """The operator's `PATCH /config`: this replica's next turn is read by them."""
    reply = await proxy.ask(chat(history(10)))
    await read(reply)
    assert header(reply, "x-compaction-applied") == "none"
    smaller = ModelPolicies(default=POLICY.replace(context_window=3_000))
    proxy.service.set_policies(smaller)
    assert proxy.service.policies is smaller
    reply = await proxy.ask(chat(history(10)))
    await read(reply)
    assert header(reply, "x-compaction-applied") != "none"


async def test_background_work_is_waited_for_and_abandoned_at_close(proxy: Running) -> None:
    """`settle` waits for the records (and the summaries they start); `aclose` abandons
    summaries still being written, not the records."""
    proxy.mock.summary_latency_s = 5.0
    await read(await proxy.ask(chat(history(15))))  # past the preparation level
    for _ in range(500):
        if proxy.mock.summary_requests:
            break  # being written
        await asyncio.sleep(0.01)
    await asyncio.wait_for(proxy.service.aclose(), 1.0)
    assert await proxy.service.memory.store.archived(TENANT, "s1") == history(15)


# --- passthrough -------------------------------------------------------------------------------


async def test_any_other_request_is_forwarded_untouched_streaming_both_bodies(
    proxy: Running,
) -> None:
    async def upload() -> AsyncIterator[bytes]:
        yield b"part one, "
        yield b"part two"

    incoming = Incoming(
        "PUT", "files/f-1", "purpose=x", [("authorization", KEY), ("content-length", "18")]
    )
    reply = await proxy.service.passthrough(incoming, upload())
    echo = json.loads(await read(reply))
    assert proxy.mock.last.body == b"part one, part two"
    assert proxy.mock.last.query == "purpose=x"
    assert echo["method"] == "PUT"


async def test_passthrough_lends_the_proxy_key_to_listed_callers_only() -> None:
    config = ServiceConfig(
        upstream_api_key="sk-proxy", client_keys=ClientKeys({key_hash("listed"): "team"})
    )
    async with running(config) as proxy:
        stranger = Incoming("GET", "models", "", [("authorization", "Bearer other")])
        with pytest.raises(AuthenticationError):
            await proxy.service.passthrough(stranger, None)
        listed = Incoming("GET", "models", "", [("authorization", "Bearer listed")])
        await read(await proxy.service.passthrough(listed, None))
        assert proxy.mock.last.header("authorization") == "Bearer sk-proxy"
        assert proxy.service.tenant_of([("authorization", "Bearer listed")]) != TENANT


# --- health --------------------------------------------------------------------------------------


async def test_all_well_is_ready_with_no_details(proxy: Running) -> None:
    assert await proxy.service.readiness() == {}
    assert proxy.service.details() == {}
    assert proxy.service.counter_for("gpt-4o") is proxy.service.counter_for("mock-model")


async def test_a_closed_upstream_client_is_not_ready(proxy: Running) -> None:
    await proxy.upstream.aclose()
    assert await proxy.service.readiness() == {"upstream": "the upstream client is closed"}


async def test_a_store_that_does_not_answer_is_not_ready(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> None:
    async with store_of("redis", request, timeout_s=0.3) as store, running(store=store) as proxy:
        redis_server.stop()
        problems = await proxy.service.readiness()
    assert list(problems) == ["store"]


async def test_an_upstream_that_does_not_answer_is_a_detail_not_unreadiness() -> None:
    async def down(scope: Scope, receive: Receive, send: Send) -> None:
        raise ConnectionRefusedError("nobody listens")

    async with running(app=down) as proxy:
        assert await proxy.service.readiness() == {}
        for _ in range(100):
            if proxy.service.details():
                break
            await asyncio.sleep(0.01)
        assert "nobody listens" in proxy.service.details()["upstream"]


async def test_a_summarizer_that_keeps_failing_is_a_detail() -> None:
    config = ServiceConfig(
        policies=CONFIG.policies, summary_breaker=Breaker(threshold=1, cool_off_s=600.0)
    )
    async with running(config) as proxy:
        await read(await proxy.ask(chat(history(10))))
        await proxy.service.settle()
        assert proxy.service.details() == {}
        proxy.mock.queue(Reply(status=500, error=SUMMARY_FAILS))
        await proxy.service.operator.compact(SessionRef(TENANT, "s1"), CALLER)
        assert "circuit open" in proxy.service.details()["summarizer"]
