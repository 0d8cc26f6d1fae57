"""The store adapters: the embedded store and a real redis-server."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.adapters.store import MemoryStore, RedisStore, StoreUnavailableError, open_store
from tests.servers import free_port


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server on a unix socket, never the machine's shared one."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    folder = tmp_path_factory.mktemp("redis")
    socket_path = folder / "redis.sock"
    process = subprocess.Popen(
        [
            binary,
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--save",
            "",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_for(socket_path)
        yield f"unix://{socket_path}"
    finally:
        process.terminate()
        process.wait(10)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.01)


async def test_embedded_store_is_usable() -> None:
    store = open_store("")
    assert isinstance(store, MemoryStore)
    await store.ping()
    await store.aclose()


async def test_redis_store_pings_a_real_server(redis_url: str) -> None:
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    await store.ping()
    await store.aclose()


async def test_unreachable_redis_is_unavailable() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    with pytest.raises(StoreUnavailableError, match="Redis is not usable"):
        await store.ping()
    await store.aclose()
