"""The wiring: a mock provider, the proxy in front of it, the agents, the report.

Everything is the real thing on real sockets in one event loop: the proxy is
`proxy.web.create_app` with the embedded session store, served by uvicorn; the provider is
`proxy.mock_upstream.MockUpstream` with a small window, strict about tool pairing and role
order as OpenAI and strict chat templates are, playing the agents' model and the proxy's
summarizer; the agents use the official OpenAI SDK. Nothing needs a key or the network.

On the Responses API (`--api responses`, or half the agents with `--api both`) the mock is a
reasoning model: each response opens with a reasoning item carrying `encrypted_content`,
and it refuses a call or message sent back without its reasoning item, or with that item's
ciphertext altered, as OpenAI does. On the Messages API (`--api messages`) the agents are the
`anthropic` SDK with thinking on, and the mock checks what Anthropic checks: `tool_use` and
`tool_result` paired, thinking signatures intact, at most four cache breakpoints.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from contextlib import AsyncExitStack, closing
from dataclasses import dataclass
from typing import Final, TextIO, TypeVar

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE, TokenCounter
from proxy.demo import display
from proxy.demo.accounting import Totals, settle
from proxy.demo.agents import AgentStats, ChatAgent, SimulatedAgent
from proxy.demo.messages_agent import MessagesAgent
from proxy.demo.options import Options
from proxy.demo.responses_agent import ResponsesAgent
from proxy.demo.servers import listening_socket, serve
from proxy.demo.workload import MODEL, SCRIPT
from proxy.mock_upstream import MockUpstream
from proxy.settings import Settings
from proxy.web import create_app

WINDOW: Final = 12_000
"""The mock model's window, in tokens: five or so turns of the workload fill it. Small, so
a session of a minute compacts several times; counted approximately (no tiktoken files) the
same turns weigh about half as much again, and compaction starts a turn or two earlier."""
OUTPUT_RESERVED: Final = 1_024
SUMMARY_MAX_TOKENS: Final = 512
TOKENIZER_TIMEOUT_S: Final = 10.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Result:
    """A finished demo: each agent's numbers, the totals, and where the proxy serves."""

    agents: tuple[AgentStats, ...]
    totals: Totals
    base_url: str
    admin_token: str


async def run(options: Options, out: TextIO, stop: asyncio.Event | None = None) -> Result | None:
    """Run the demo, printing to `out`; None when `stop` was set before the sessions ended.

    With `options.wait` the proxy keeps serving after the report until `stop` is set.
    Raises `PortUnavailableError` when the proxy's port cannot be bound.
    """
    stop = stop or asyncio.Event()
    admin_token = secrets.token_urlsafe(18)
    async with AsyncExitStack() as stack:
        # Bound first: a busy port is reported before anything starts.
        proxy_socket = stack.enter_context(closing(listening_socket(options.port)))
        encoders = await asyncio.to_thread(
            load_encoders, (O200K_BASE,), timeout_s=TOKENIZER_TIMEOUT_S
        )
        upstream = _mock(encoders)
        mock_url = await stack.enter_async_context(
            serve(upstream.app, listening_socket(0), lifespan="off")
        )
        port = int(proxy_socket.getsockname()[1])
        settings = _settings(mock_url, port, admin_token)
        app = create_app(settings, encoders=encoders)
        proxy_url = await stack.enter_async_context(serve(app, proxy_socket, lifespan="on"))
        out.write(_header(options, settings, (proxy_url, mock_url), encoders))
        counter = TokenCounter(encoders.for_model(MODEL))
        agents = await _until(stop, _simulate(options, proxy_url, counter, out))
        if agents is None:
            out.write("\nStopped before the sessions ended.\n")
            return None
        result = Result(agents, settle(upstream, agents, counter), proxy_url, admin_token)
        _report(result, out, wait=options.wait)
        if options.wait:
            await stop.wait()
            out.write("Stopped.\n")
        return result


def _mock(encoders: Encoders) -> MockUpstream:
    return MockUpstream(
        window=WINDOW,
        strict=True,
        roles_alternate=True,
        agent=SCRIPT,
        # Harmless to chat: on /v1/responses only, and only when asked to include it.
        responses_reasoning=True,
        summary_quality="good",
        models=(MODEL,),
        encoders=encoders,
    )


def _settings(mock_url: str, port: int, admin_token: str) -> Settings:
    """The proxy's settings: the defaults, but for the upstream (the mock), an output reserve
    and a summary length fitting a small window, and the admin token. The window itself the
    proxy reads from the mock's `/v1/models`, as it would from vLLM or OpenRouter."""
    return Settings.model_validate(
        {
            "upstream": {"base_url": f"{mock_url}/v1"},
            "redis": {"url": ""},
            "context": {
                "output_reserved": OUTPUT_RESERVED,
                "summary_max_tokens": SUMMARY_MAX_TOKENS,
            },
            "server": {"port": port},
            "log": {"level": "warning"},
            "admin": {"token": admin_token},
        }
    )


def _header(options: Options, settings: Settings, urls: tuple[str, str], encoders: Encoders) -> str:
    context, encoder = settings.context, encoders.for_model(MODEL).name
    tokenizer = (
        f"tiktoken's {encoder}"
        if encoder != "approximate"
        else "approximate (tiktoken's files are not available here; counts err high)"
    )
    notes = [
        f"model     {MODEL}: {WINDOW:,}-token window, strict tool pairing and role order, "
        "prompt cache, a summarizer that keeps the facts",
        f"agents    {_apis(options)}",
        f"tokenizer {tokenizer}",
        f"compacts  at {context.compression_trigger:.0%} of the window less the "
        f"{context.output_reserved:,}-token output reserve, "
        f"down to {context.compaction_target:.0%}",
    ]
    return display.header(
        agents=options.agents,
        turns=options.turns,
        proxy_url=urls[0],
        mock_url=urls[1],
        notes=notes,
    )


async def _simulate(
    options: Options, proxy_url: str, counter: TokenCounter, out: TextIO
) -> tuple[AgentStats, ...]:
    """All agents' sessions at once, a line per turn as they go."""
    progress = display.Progress(out, agents=options.agents, turns=options.turns, live=out.isatty())
    agents = [
        _agent(options, index)(index, f"{proxy_url}/v1", counter, progress.turn)
        for index in range(options.agents)
    ]
    progress.start()
    try:
        return tuple(await asyncio.gather(*(agent.run(options.turns) for agent in agents)))
    finally:
        progress.close()


def _agent(options: Options, index: int) -> type[SimulatedAgent]:
    """Agent `index`'s kind: with `both`, the first half (rounded up) on chat completions."""
    if options.api == "both":
        return ChatAgent if index < (options.agents + 1) // 2 else ResponsesAgent
    if options.api == "messages":
        return MessagesAgent
    return ChatAgent if options.api == "chat" else ResponsesAgent


def _apis(options: Options) -> str:
    """What the header says of the agents' API."""
    responses = sum(_agent(options, index) is ResponsesAgent for index in range(options.agents))
    messages = sum(_agent(options, index) is MessagesAgent for index in range(options.agents))
    chat = options.agents - responses - messages
    parts = [f"{chat} on chat completions"] if chat else []
    if messages:
        parts.append(
            f"{messages} on the Messages API (the anthropic SDK, thinking on, signed thinking "
            "blocks sent back; the mock refuses them altered or parted from their turn)"
        )
    if responses:
        parts.append(
            f"{responses} on the Responses API (stateless, whole history as items, encrypted "
            "reasoning sent back; the mock refuses it parted or altered)"
        )
    return "; ".join(parts)


async def _until(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when `stop` is set first (`work` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, stopped, return_exceptions=True)
    return None if task.cancelled() else task.result()


def _report(result: Result, out: TextIO, *, wait: bool) -> None:
    agents = list(result.agents)
    out.write("\n" + display.table(agents, result.totals) + "\n\n")
    out.write(display.notes(agents, result.totals) + "\n\n")
    out.write(display.dashboard(result.base_url, result.admin_token, wait=wait) + "\n")
    out.flush()
