"""One agent's HTTP/1.1 connection, kept alive: the growth bench's client.

The agents stand in for processes on other machines, yet they run on the bench machine's two
cores beside the proxy. Under the eight-agent case aiohttp spent 0.17-0.19 ms of CPU per
request (read from /proc), a third of what the client, the mock and Redis cost together,
and every millisecond of it is one the proxy's workers lack: it caps what two workers can
show over one (`bench/README.md`). This client writes one prebuilt request and reads the
answer by its length or its chunks, for 0.06-0.08 ms; what it measures is the same wall
time from the request's first byte to the answer's last.

It speaks only what the bench needs: POST with a JSON body, a status line, headers, and a
body of a stated length or chunked. Anything else is an error of the request, reported as
text as the bench reports every failed request, and the connection is opened anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

_LIMIT = 1 << 20  # a header block or a chunk-size line longer than this is refused


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes
    ms: float  # from the request's first byte written to the answer's last byte read


class AgentConnection:
    """One kept-alive connection to `url` (an http:// URL with a path), sending `key` as a
    bearer token: an agent's, as each agent process holds its own."""

    def __init__(self, url: str, key: str, *, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"expected http://host:port/path, got {url!r}")
        self._host, self._port = parts.hostname, parts.port
        self._head = (
            f"POST {parts.path or '/'} HTTP/1.1\r\n"
            f"host: {parts.hostname}:{parts.port}\r\n"
            "content-type: application/json\r\n"
            f"authorization: Bearer {key}\r\n"
        )
        self._timeout_s = timeout_s
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, body: bytes) -> Answer:
        """The answer to `body`. Raises `OSError`, `TimeoutError`, `ValueError` or
        `asyncio.IncompleteReadError` when there is none (the connection is then closed)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._exchange(body)
        except BaseException:
            await self.aclose()
            raise

    async def _exchange(self, body: bytes) -> Answer:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port, limit=_LIMIT)
        reader, writer = self._streams
        request = f"{self._head}content-length: {len(body)}\r\n\r\n".encode() + body
        started = time.perf_counter()
        writer.write(request)
        status, headers = _head(await reader.readuntil(b"\r\n\r\n"))
        if "content-length" in headers:
            payload = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            payload = await _chunks(reader)
        else:
            raise ValueError("an answer with neither a length nor chunks")
        ms = (time.perf_counter() - started) * 1000
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return Answer(status, headers, payload, ms)

    async def aclose(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            writer = streams[1]
            writer.close()
            with contextlib.suppress(OSError):  # reset by the server: closed either way
                await writer.wait_closed()


def _head(block: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = block.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(rest[:3]), headers


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers are sent: the last blank line
            return b"".join(parts)
        parts.append((await reader.readexactly(size + 2))[:-2])
