"""X-Session-Id through the app: a valid id is echoed, a huge or odd one is a 400 unechoed."""

from __future__ import annotations

import httpx

from proxy.mock_upstream import MockUpstream

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


async def test_60_kb_session_header_is_refused_and_not_echoed(
    client: httpx.AsyncClient, upstream: MockUpstream
) -> None:
    huge = "s" * 60_000
    response = await client.post(CHAT, json=BODY, headers={"x-session-id": huge})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "X-Session-Id"
    assert "x-session-id" not in response.headers
    assert huge[:200] not in response.text
    assert upstream.requests == []


async def test_uuid_session_header_is_echoed(client: httpx.AsyncClient) -> None:
    uuid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    response = await client.post(CHAT, json=BODY, headers={"x-session-id": uuid})
    assert response.status_code == 200
    assert response.headers["x-session-id"] == uuid


async def test_admin_path_with_bad_session_id_is_a_400(client: httpx.AsyncClient) -> None:
    response = await client.get(
        "/v1/compaction/sessions/" + "s" * 300, headers={"authorization": "Bearer sk-a"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "session_id"
