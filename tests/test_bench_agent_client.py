"""The growth bench's lean client (`bench/agent_client.py`) against a real socket server that
answers each way HTTP/1.1 allows it to, and some ways it does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from bench.agent_client import AgentConnection

Reply = Callable[[bytes], bytes]


class _Server:
    """Answers each request with `reply(request)`; counts connections and requests."""

    def __init__(self) -> None:
        self.reply: Reply = lambda request: b""
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.reply(request)
                writer.write(answer)
                await writer.drain()
                if not answer or b"connection: close" in answer.lower():
                    break
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@pytest_asyncio.fixture(name="server")
async def server_fixture() -> AsyncIterator[tuple[_Server, str]]:
    server = _Server()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        listening.close()
        await listening.wait_closed()


def _sized(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", "x-compaction-applied: none"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


async def test_answers_by_length_and_by_chunks_over_one_connection(
    server: tuple[_Server, str],
) -> None:
    fake, url = server
    fake.reply = lambda request: _sized(b'{"ok": 1}')
    connection = AgentConnection(url, "sk-agent", timeout_s=5)
    answer = await connection.post(b'{"messages": []}')
    assert (answer.status, answer.body, answer.headers["x-compaction-applied"]) == (
        200,
        b'{"ok": 1}',
        "none",
    )
    assert answer.ms > 0
    fake.reply = lambda request: (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n5\r\n: 12}\r\n0\r\n\r\n'
    )
    assert (await connection.post(b"{}")).body == b'{"a": 12}'
    await connection.aclose()
    assert fake.connections == 1
    first = fake.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"authorization: Bearer sk-agent\r\n" in first
    assert first.endswith(b'content-length: 16\r\n\r\n{"messages": []}')


async def test_a_closing_answer_and_a_refusal_reconnect(server: tuple[_Server, str]) -> None:
    fake, url = server
    fake.reply = lambda request: _sized(b"bye", "connection: close")
    connection = AgentConnection(url, "k", timeout_s=5)
    assert (await connection.post(b"{}")).body == b"bye"
    fake.reply = lambda request: b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\n{}"
    assert (await connection.post(b"{}")).status == 429
    await connection.aclose()
    assert fake.connections == 2


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"", asyncio.IncompleteReadError),  # closed before answering
        (b"HTTP/1.1 200 OK\r\n\r\n", ValueError),  # neither a length nor chunks
        (b"SMTP ready\r\n\r\n", ValueError),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nshort", Exception),
    ],
)
async def test_no_answer_raises_and_the_next_request_connects_anew(
    server: tuple[_Server, str], answer: bytes, error: type[BaseException]
) -> None:
    fake, url = server
    fake.reply = lambda request: answer
    connection = AgentConnection(url, "k", timeout_s=5)
    with pytest.raises(error):
        await connection.post(b"{}")
    fake.reply = lambda request: _sized(b"fine")
    assert (await connection.post(b"{}")).body == b"fine"
    await connection.aclose()
    assert fake.connections == 2


async def test_a_silent_server_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads until the client goes, never answers
        writer.close()

    listening = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    connection = AgentConnection(f"http://127.0.0.1:{port}/x", "k", timeout_s=0.2)
    try:
        with pytest.raises(TimeoutError):
            await connection.post(b"{}")
    finally:
        listening.close()
        await listening.wait_closed()


def test_only_plain_http_urls_with_a_port() -> None:
    for url in ("https://127.0.0.1:1/x", "http://127.0.0.1/x"):
        with pytest.raises(ValueError, match="expected http://host:port/path"):
            AgentConnection(url, "k", timeout_s=1)
