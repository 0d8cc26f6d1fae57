"""The session API (`/v1/compaction/`): tenant isolation, the admin token, what each
endpoint reports and changes, against the real app with conversations sent by the SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from proxy.adapters.store import open_store
from proxy.core.policy import ContextPolicy
from proxy.core.summary import SUMMARY_PREFIX
from proxy.mock_upstream import MockUpstream
from proxy.service import ProxyService
from proxy.settings import RedisSettings, Settings
from proxy.web import create_app
from tests.conftest import make_settings
from tests.servers import free_port

ADMIN = "admin-secret-token"
MODEL = "mock-model"
WINDOW = 6000
CONTEXT = {
    "context_window": WINDOW,
    "output_reserved": 500,
    "keep_recent": 2,
    "cooldown_turns": 0,
    "summary_max_tokens": 200,
}
WORDS = "the build failed again on the staging cluster while the queue kept growing "


@pytest.fixture
def upstream() -> MockUpstream:
    return MockUpstream(window=WINDOW)


@pytest.fixture
def settings(upstream_url: str) -> Settings:
    return make_settings(upstream_url, context=CONTEXT, admin={"token": ADMIN})


@pytest.fixture
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        yield http


def sdk(app: FastAPI, key: str) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    return openai.AsyncOpenAI(api_key=key, base_url="http://proxy/v1", http_client=http)


async def converse(app: FastAPI, key: str, turns: int, topic: str) -> list[dict[str, Any]]:
    """A conversation of `turns` long user turns through the proxy; returns its history."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    async with sdk(app, key) as client:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"{topic} {turn}: " + WORDS * 60})
            completion = await client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
            # Summaries are written in the background: settled between turns, one is ready
            # at the trigger however busy the machine is.
            await service(app).settle()
    return messages


def service(app: FastAPI) -> ProxyService:
    service: ProxyService = app.state.service
    return service


def last_calibration(detail: dict[str, Any]) -> float:
    calibration: float = detail["context"]["calibration"]
    return calibration


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def sessions(api: httpx.AsyncClient, token: str, **params: Any) -> list[dict[str, Any]]:
    response = await api.get("/v1/compaction/sessions", headers=bearer(token), params=params)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]
    return rows


async def test_each_tenant_sees_its_own_sessions_and_the_admin_all(
    app: FastAPI, api: httpx.AsyncClient
) -> None:
    await converse(app, "sk-alice", 2, "alice")
    await converse(app, "sk-bob", 1, "bob")
    mine = await sessions(api, "sk-alice")
    theirs = await sessions(api, "sk-bob")
    assert len(mine) == len(theirs) == 1
    assert (mine[0]["turns"], theirs[0]["turns"]) == (2, 1)
    assert mine[0]["model"] == MODEL
    everyone = await sessions(api, ADMIN)
    assert {row["id"] for row in everyone} == {mine[0]["id"], theirs[0]["id"]}
    narrowed = await sessions(api, ADMIN, tenant=mine[0]["tenant"])
    assert [row["id"] for row in narrowed] == [mine[0]["id"]]
    # Another tenant's session does not exist, as far as this caller can tell.
    for path in ("", "/messages"):
        url = f"/v1/compaction/sessions/{mine[0]['id']}{path}"
        response = await api.get(url, headers=bearer("sk-bob"))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    for method in ("POST /compact", "POST /revert", "DELETE "):
        verb, suffix = method.split(" ")
        url = f"/v1/compaction/sessions/{mine[0]['id']}{suffix}"
        response = await api.request(verb, url, headers=bearer("sk-bob"))
        assert response.status_code == 404, (method, response.text)
    assert (
        await api.get(f"/v1/compaction/sessions/{mine[0]['id']}", headers=bearer(ADMIN))
    ).is_success


async def test_no_credential_is_401_and_config_needs_the_admin(
    app: FastAPI, api: httpx.AsyncClient
) -> None:
    response = await api.get("/v1/compaction/sessions")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert (await api.get("/v1/compaction/config", headers=bearer("sk-alice"))).status_code == 403
    assert (await api.get("/v1/compaction/config", headers=bearer("wrong"))).status_code == 403
    assert (await api.get("/v1/compaction/config", headers=bearer(ADMIN))).status_code == 200


async def test_detail_reports_breakdown_history_and_timeline(
    app: FastAPI, api: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    history = await converse(app, "sk-alice", 8, "alice")
    [row] = await sessions(api, "sk-alice")
    detail = (
        await api.get(f"/v1/compaction/sessions/{row['id']}", headers=bearer("sk-alice"))
    ).json()
    assert detail["turns"] == 8
    assert len(detail["timeline"]) == 8
    assert [p["turn"] for p in detail["timeline"]] == list(range(1, 9))
    # What the client sent on the last turn, counted whole although a checkpoint was applied.
    last = detail["timeline"][-1]
    counted = service(app).counter_for(MODEL).messages(history[:-1])
    assert abs(last["tokens_before"] - counted * last_calibration(detail)) <= 2
    assert last["tokens_after"] < last["tokens_before"]
    compacted = [p for p in detail["timeline"] if p["action"] != "none"]
    assert compacted, detail["timeline"]
    assert detail["compactions"] == len(detail["history"]) >= 1
    assert detail["history"][0]["trigger"] == "pressure"
    context = detail["context"]
    assert context["window"] == WINDOW
    assert context["output_reserved"] == 500
    defaults = ContextPolicy()
    assert (context["trigger"], context["target"]) == (
        defaults.compression_trigger,
        defaults.compaction_target,
    )
    breakdown = context["breakdown"]
    parts = ("system", "tools", "summary", "messages", "tool_results", "placeholders")
    assert sum(breakdown[k] for k in parts) == breakdown["total"] == context["tokens"]
    assert breakdown["system"] > 0
    assert breakdown["summary"] > 0  # the last request carried a summary
    assert detail["tokens_saved"] == detail["tokens_sent"] - detail["tokens_forwarded"] > 0
    # The last forwarded prompt, as the provider counted it, against our report.
    assert abs(upstream.prompt_tokens[-1] - context["tokens"]) <= 0.05 * context["tokens"]


async def test_messages_original_and_forwarded(app: FastAPI, api: httpx.AsyncClient) -> None:
    history = await converse(app, "sk-alice", 6, "alice")
    [row] = await sessions(api, "sk-alice")
    url = f"/v1/compaction/sessions/{row['id']}/messages"
    original = (await api.get(url, headers=bearer("sk-alice"))).json()
    assert original["view"] == "original"
    assert original["data"] == history[:-1]  # the last request: everything but its answer
    forwarded = (
        await api.get(url, params={"view": "forwarded"}, headers=bearer("sk-alice"))
    ).json()
    assert len(forwarded["data"]) < len(original["data"])
    assert any(SUMMARY_PREFIX in str(m["content"]) for m in forwarded["data"])
    bad = await api.get(url, params={"view": "other"}, headers=bearer("sk-alice"))
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "view"


async def test_compact_now_then_revert_then_delete(
    app: FastAPI, api: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    history = await converse(app, "sk-alice", 4, "alice")  # under the trigger: nothing yet
    [row] = await sessions(api, "sk-alice")
    base = f"/v1/compaction/sessions/{row['id']}"
    assert row["compactions"] == 0
    result = await api.post(
        f"{base}/compact", headers=bearer("sk-alice"), json={"strategy": "truncate"}
    )
    assert result.status_code == 200, result.text
    body = result.json()
    assert (body["compacted"], body["strategy"]) == (True, "truncate")
    assert body["tokens_after"] < body["tokens_before"]
    assert body["context"]["breakdown"]["total"] == body["context"]["tokens"]

    # The session's next request forwards the compacted history.
    history.append({"role": "user", "content": "and now?"})
    async with sdk(app, "sk-alice") as client:
        await client.chat.completions.create(model=MODEL, messages=history)  # type: ignore[arg-type]
    forwarded = upstream.last.json()["messages"]
    assert len(forwarded) < len(history)
    await service(app).settle()

    reverted = (await api.post(f"{base}/revert", headers=bearer("sk-alice"))).json()
    assert reverted["reverted"] is True
    assert reverted["checkpoint"]["strategy"] == "truncate"
    again = (await api.post(f"{base}/revert", headers=bearer("sk-alice"))).json()
    assert again == {"reverted": False, "checkpoint": None}
    messages = await api.get(f"{base}/messages?view=forwarded", headers=bearer("sk-alice"))
    assert messages.json()["data"] == history  # nothing compacted any more

    deleted = await api.delete(base, headers=bearer("sk-alice"))
    assert deleted.json() == {"id": row["id"], "object": "compaction.session", "deleted": True}
    assert (await api.get(base, headers=bearer("sk-alice"))).status_code == 404
    assert await sessions(api, "sk-alice") == []


async def test_compact_rejects_an_unknown_strategy(app: FastAPI, api: httpx.AsyncClient) -> None:
    await converse(app, "sk-alice", 1, "alice")
    [row] = await sessions(api, "sk-alice")
    url = f"/v1/compaction/sessions/{row['id']}/compact"
    response = await api.post(url, headers=bearer("sk-alice"), json={"strategy": "magic"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_config_patch_is_validated_and_applies_at_once(
    app: FastAPI, api: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    url = "/v1/compaction/config"
    shown = (await api.get(url, headers=bearer(ADMIN))).json()
    assert shown["context_window"] == WINDOW
    assert shown["auto_compact"] is True
    bad = await api.patch(url, headers=bearer(ADMIN), json={"compression_trigger": 2})
    assert bad.status_code == 400
    assert "compression_trigger" in bad.json()["error"]["message"]
    assert (
        await api.patch(url, headers=bearer(ADMIN), json={"summary_brain": {}})
    ).status_code == 400
    assert (await api.patch(url, headers=bearer("sk-alice"), json={})).status_code == 403
    changed = await api.patch(url, headers=bearer(ADMIN), json={"auto_compact": False})
    assert changed.json()["auto_compact"] is False
    await converse(app, "sk-alice", 6, "alice")  # would have compacted (see the detail test)
    [row] = await sessions(api, "sk-alice")
    assert row["compactions"] == 0
    assert upstream.prompt_tokens[-1] > 0.75 * (WINDOW - 500)  # over the trigger, untouched


async def test_config_patch_errors_name_the_key(api: httpx.AsyncClient) -> None:
    url = "/v1/compaction/config"
    for changes, named in [
        ({"keep_recnet": 3}, "context.keep_recnet"),
        ({"strategy": "fold"}, "context.strategy: Input should be 'auto'"),
        ({"safety_margin": 0.5}, "context.safety_margin: Input should be less than 0.5"),
        ({"compaction_target": 0.9}, "compaction_target must be below compression_trigger"),
    ]:
        response = await api.patch(url, headers=bearer(ADMIN), json=changes)
        assert response.status_code == 400, changes
        assert named in response.json()["error"]["message"]
    unchanged = (await api.get(url, headers=bearer(ADMIN))).json()
    assert (unchanged["strategy"], unchanged["keep_recent"]) == ("auto", CONTEXT["keep_recent"])


async def test_openapi_documents_the_core_records_it_returns(api: httpx.AsyncClient) -> None:
    # The timeline and history are the core's dataclasses, documented by their docstrings.
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    detail = schemas["SessionDetail"]["properties"]
    assert detail["timeline"]["items"] == {"$ref": "#/components/schemas/TurnPoint"}
    turn_point = schemas["TurnPoint"]["properties"]
    assert set(turn_point) == {
        *("turn", "at", "pressure", "tokens_before", "tokens_after", "action", "recalls")
    }
    assert turn_point["tokens_before"]["type"] == "integer"
    assert "calibrated" in turn_point["tokens_before"]["description"]
    record = schemas["CompactionRecord"]["properties"]
    assert record["steps"]["type"] == "array"
    assert "pressure, hook, overflow" in record["trigger"]["description"]
    assert record["summarizer_input_tokens"]["type"] == "integer"
    assert "prompt cache" in record["summarizer_cached_tokens"]["description"]


async def test_openapi_documents_the_session_api(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    paths = document["paths"]
    assert "/v1/compaction/sessions" in paths
    assert "/v1/compaction/sessions/{session_id}/compact" in paths
    assert "/v1/compaction/config" in paths
    assert not any(path.startswith("/v1/chat") for path in paths)
    assert (await api.get("/docs")).status_code == 200


async def test_a_store_that_is_down_is_a_503(upstream_url: str) -> None:
    settings = make_settings(upstream_url, admin={"token": ADMIN})
    down = RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    app = create_app(settings, store=open_store(down))
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as api,
    ):
        response = await api.get("/v1/compaction/sessions", headers=bearer(ADMIN))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "store_unavailable"
