"""The servers a client test talks to, and what the client sees of the proxy's work.

`running_stack` starts, on loopback sockets: the mock provider (a tool-calling model with a
small window, strict about tool-call pairing as OpenAI is), a private redis-server when one
is installed (never a shared one), and `compaction-proxy serve` as its own process in front.
`Witness` is the client's side: an HTTP client whose event hook reads the `x-compaction-*`
headers of every answer the framework gets, whatever the framework does with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import httpx2

from proxy.adapters.tokenizer import load_encoders
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import AgentScript, MockUpstream
from tests.clients.workload import ANSWER, TURNS, WINDOW, ToolLog
from tests.redis_server import RedisServer
from tests.servers import proxy_process, serve_in_thread, until

MODEL_PATHS = frozenset({"/v1/chat/completions", "/v1/responses"})
_COMPACTIONS = re.compile(r"^compaction_proxy_compactions_total\{[^}]*\} (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Stack:
    proxy_url: str
    """The proxy's root (`http://127.0.0.1:PORT`); clients take `base_url`."""
    upstream: MockUpstream
    store: str
    """"redis" (a private redis-server) or "embedded" (none is installed here)."""

    @property
    def base_url(self) -> str:
        return f"{self.proxy_url}/v1"

    def compactions_counted(self) -> int:
        """The compactions the proxy itself counted (`/metrics`), all strategies together."""
        text = httpx.get(f"{self.proxy_url}/metrics", timeout=5).text
        return round(sum(float(value) for value in _COMPACTIONS.findall(text)))


@contextmanager
def running_stack(
    folder: Path,
    script: AgentScript,
    *,
    window: int = WINDOW,
    settings: Mapping[str, str] | None = None,
    log: IO[bytes] | None = None,
) -> Iterator[Stack]:
    """The mock playing `script` in a `window` of tokens, a private Redis (when installed)
    and the proxy process, which is given the same window, and `settings` (more
    `COMPACTION_PROXY_*` variables); with `log`, the proxy logs its access lines there."""
    upstream = MockUpstream(
        window=window,
        strict=True,
        agent=script,
        # Loaded now: otherwise the first request waits about a second for it.
        encoders=load_encoders((O200K_BASE,)),
    )
    with ExitStack() as stack:
        upstream_url = stack.enter_context(serve_in_thread(upstream.app))
        level = "warning" if log is None else "info"
        args = ["--upstream", f"{upstream_url}/v1", "--log-level", level]
        store = "embedded"
        try:
            redis = RedisServer(folder)
        except FileNotFoundError:
            # The clients are what is tested here, not the store: without redis-server the
            # proxy keeps its sessions in process, rather than the test being skipped.
            pass
        else:
            redis.start()
            stack.callback(redis.stop)
            args += ["--redis", redis.url]
            store = "redis"
        # The window is given, not detected from the mock's /v1/models: these tests are about
        # the clients, and must not depend on how the proxy learns a window.
        env = {"COMPACTION_PROXY_CONTEXT__CONTEXT_WINDOW": str(window), **(settings or {})}
        proxy_url = stack.enter_context(proxy_process(args, env=env, stderr=log))
        yield Stack(proxy_url, upstream, store)


@dataclass(frozen=True)
class Exchange:
    """One model call as the client saw it: the proxy's headers on the answer."""

    turn: int
    index_in_turn: int
    applied: str
    tokens_before: int
    tokens_after: int
    session: str

    @property
    def compacted(self) -> bool:
        return self.applied not in ("none", "missing")


@dataclass
class Witness:
    """Reads the proxy's headers on every model call a framework makes through `client()`."""

    turn: int = 0
    exchanges: list[Exchange] = field(default_factory=list)

    def client(self) -> httpx2.AsyncClient:
        """The HTTP client to hand the framework's OpenAI client (close it when done)."""
        # trust_env=False: a proxy set in the environment must not stand between the client
        # and the loopback proxy under test.
        return httpx2.AsyncClient(
            event_hooks={"response": [self._saw]}, timeout=30, trust_env=False
        )

    async def _saw(self, response: httpx2.Response) -> None:
        if response.request.url.path not in MODEL_PATHS:
            return
        headers = response.headers
        self.exchanges.append(
            Exchange(
                turn=self.turn,
                index_in_turn=sum(e.turn == self.turn for e in self.exchanges),
                # Missing on any answer: the proxy did not handle this request itself.
                applied=headers.get("x-compaction-applied", "missing"),
                tokens_before=int(headers.get("x-compaction-tokens-before", "-1")),
                tokens_after=int(headers.get("x-compaction-tokens-after", "-1")),
                session=headers.get("x-session-id", "missing"),
            )
        )

    @property
    def compactions(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.compacted]

    def summary(self) -> str:
        """One line for the test's output (`pytest -s`) and its assertion messages."""
        return (
            f"model calls {len(self.exchanges)}, compactions "
            f"{[(e.turn, e.index_in_turn, e.applied) for e in self.compactions]}, tokens "
            f"sent/forwarded at the end {self.exchanges[-1].tokens_before}/"
            f"{self.exchanges[-1].tokens_after}"
            if self.exchanges
            else "no model call"
        )


async def assert_compacted_cleanly(
    stack: Stack, witness: Witness, tools: ToolLog, answers: list[object], script: AgentScript
) -> None:
    """What every client test asserts once its turns are done (the client raised nothing).

    The client finished each turn with the model's answer; each turn ran exactly the model's
    calls, none twice; the proxy compacted several times, across turns and in the middle of
    a run, and its own count agrees; the upstream never saw an overflow or a broken tool-call
    pairing, though the conversation outgrew the window.
    """
    upstream, context = stack.upstream, witness.summary()
    assert answers == [ANSWER] * TURNS, context
    assert tools.unexpected() == [], context
    # One answer per round of tool calls and one final answer per turn: nothing was retried
    # and no round was played again.
    assert len(witness.exchanges) == TURNS * (script.rounds_per_turn + 1), context
    assert [e for e in witness.exchanges if e.applied == "missing"] == []
    # Every request, across all runs, was recognized as one conversation.
    assert len({e.session for e in witness.exchanges}) == 1, context
    # Compacted several times, in several turns, and at least once in the middle of a run
    # (between two tool rounds of the framework's loop, not only on a new user message).
    compactions = witness.compactions
    assert len(compactions) >= 3, context
    assert len({e.turn for e in compactions}) >= 2, context
    assert any(e.index_in_turn > 0 for e in compactions), context
    # The client's history outgrew the window; what reached the model never did.
    assert witness.exchanges[-1].tokens_before > WINDOW, context
    assert upstream.overflows == 0, context
    assert upstream.strict_rejections == 0, context
    assert max(upstream.prompt_tokens) <= WINDOW, context
    # The compactions the client saw are those the proxy counted (stored in the background).
    await until(lambda: stack.compactions_counted() == len(compactions), timeout_s=5)
