"""The bench's lean server (`bench/lean_server.py`) serving the raw mock app over a real socket,
read by an HTTP client that checks framing (aiohttp) and by the growth bench's own."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest_asyncio

from bench.agent_client import AgentConnection
from bench.lean_server import serve
from bench.mock_server import ANSWER, create_app


@pytest_asyncio.fixture(name="base_url")
async def base_url_fixture() -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(latency_s=0, chunks=3)
    server = asyncio.create_task(serve(app, host="127.0.0.1", port=port, backlog=16))
    for _ in range(100):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        break
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


async def test_whole_streamed_and_unknown_answers(base_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/models") as response:
            assert response.status == 200
            assert [m["id"] for m in (await response.json())["data"]] == [
                "mock-model",
                "mock-compact",
            ]
        body = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]})
        async with session.post(f"{base_url}/chat/completions", data=body) as response:
            assert response.headers["content-length"] == str(response.content_length)
            answer = await response.json()
            assert answer["choices"][0]["message"]["content"] == ANSWER
            assert answer["usage"]["prompt_tokens"] == len(body) // 4
        streamed = json.dumps({"model": "mock-model", "messages": [], "stream": True})
        async with session.post(f"{base_url}/chat/completions", data=streamed) as response:
            assert response.headers["transfer-encoding"] == "chunked"
            events = (await response.read()).decode().split("\n\n")
            assert events[-2:] == ["data: [DONE]", ""]
            assert len(events) == 3 + 3 + 1  # role, three words, finish; [DONE]; the tail
        async with session.post(f"{base_url}/elsewhere", data=b"{}") as response:
            assert response.status == 404


async def test_kept_alive_and_closed_on_request(base_url: str) -> None:
    connection = AgentConnection(f"{base_url}/chat/completions", "k", timeout_s=5)
    for _ in range(3):  # one connection, three answers
        assert (await connection.post(b'{"messages": []}')).status == 200
    await connection.aclose()
    host, port = base_url.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the server closed
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    writer.close()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"NOT HTTP\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 5) == b""  # unparsable: closed unanswered
    writer.close()
