"""`compaction-proxy mock` (also `python -m proxy.mock_upstream`): the mock provider on its own.

So anyone can try a client, the proxy or both with no key and no network: `MockUpstream`
serves `/v1/chat/completions`, `/v1/responses`, `/v1/messages` (Anthropic's, with its
`count_tokens`) and `/v1/models` with uvicorn, until SIGINT or SIGTERM, which stop it cleanly
(exit code 0). One line on stdout says where it listens and
what it plays; nothing else is printed unless something goes wrong.

This module is a command, the top of the stack: it may use the demo's pieces (its coding
agent's script, its uvicorn runner), which `proxy.mock_upstream` itself never imports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, get_args

from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.demo.options import port_number, positive_int
from proxy.mock_upstream.app import MockUpstream
from proxy.mock_upstream.summarizer import SummaryQuality

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
"""vLLM's and llama.cpp's habit, and not the proxy's 8080: both can run side by side."""
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
TOKENIZER_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Options:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    """0: any free port (the line printed at start says which)."""
    window: int | None = None
    strict: bool = False
    agent: bool = False
    summary_quality: SummaryQuality = "good"
    latency_s: float = 0.0
    native_compaction: bool = False
    count_tokens: bool = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The mock's flags, on `parser`."""
    # Not `--host`'s and `--port`'s usual destinations: the CLI reads those into the proxy's
    # settings, which do not take port 0 and have nothing to do with the mock.
    parser.add_argument(
        "--host",
        dest="mock_host",
        default=DEFAULT_HOST,
        metavar="H",
        help="address to listen on (default: 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        dest="mock_port",
        type=port_number,
        default=DEFAULT_PORT,
        metavar="P",
        help=f"port (default: {DEFAULT_PORT}; 0: a free one)",
    )
    parser.add_argument(
        "--window",
        type=positive_int,
        metavar="N",
        help="context window in tokens: a longer request gets OpenAI's 400 "
        "context_length_exceeded (Anthropic's 'prompt is too long' on /v1/messages), and "
        "/v1/models lists it (default: none)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse broken tool-call pairing and parted reasoning items with OpenAI's 400s "
        "(on /v1/messages Anthropic's: tool_use/tool_result pairing, the first role, cache "
        "breakpoints, thinking signatures, missing key or version)",
    )
    parser.add_argument(
        "--agent",
        action="store_true",
        help="play the demo's coding agent: two rounds of tool calls (read_file, run_tests, "
        "grep) per user turn when the request offers tools, then a report",
    )
    parser.add_argument(
        "--summary-quality",
        choices=get_args(SummaryQuality),
        default="good",
        help="how the mock summarizes when the proxy asks it to (default: good)",
    )
    parser.add_argument(
        "--native-compaction",
        action="store_true",
        help="compact as OpenAI does: answer POST /v1/responses/compact and a "
        "compaction_trigger item (default: refuse both, as most providers do)",
    )
    parser.add_argument(
        "--no-count-tokens",
        dest="count_tokens",
        action="store_false",
        help="answer POST /v1/messages/count_tokens with a 404, as a provider without it "
        "(default: count, as Anthropic does)",
    )
    parser.add_argument(
        "--latency",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="seconds every request waits before it is answered (default: 0)",
    )


def options_from(args: argparse.Namespace) -> Options:
    """The options `add_arguments`' flags parsed to."""
    return Options(
        host=args.mock_host,
        port=args.mock_port,
        window=args.window,
        strict=args.strict,
        agent=args.agent,
        summary_quality=args.summary_quality,
        latency_s=args.latency,
        native_compaction=args.native_compaction,
        count_tokens=args.count_tokens,
    )


def main(options: Options) -> int:
    """Serve the mock until SIGINT or SIGTERM: 0 then, 1 when it cannot listen."""
    from proxy.demo.servers import bound

    try:
        sock = bound(options.port, options.host)
    except OSError as exc:
        where = _authority(options.host, options.port)
        print(f"compaction-proxy mock: cannot listen on {where}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    # KeyboardInterrupt: where the loop cannot take signals itself (Windows).
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(options, sock))
    return EXIT_OK


def mock_for(options: Options) -> MockUpstream:
    """The mock provider `options` describe."""
    from proxy.adapters.tokenizer import load_encoders
    from proxy.core.tokens import O200K_BASE
    from proxy.demo.workload import SCRIPT

    return MockUpstream(
        window=options.window,
        strict=options.strict,
        agent=SCRIPT if options.agent else None,
        summary_quality=options.summary_quality,
        latency_s=options.latency_s,
        native_compaction=options.native_compaction,
        messages_count_tokens=options.count_tokens,
        # Only on /v1/responses, and only for a request that includes encrypted reasoning
        # (as Codex does): then every response opens with a reasoning item, as o-series do.
        responses_reasoning=True,
        # Loaded now, not on the first request, so that one is not a second slower.
        encoders=load_encoders((O200K_BASE,), timeout_s=TOKENIZER_TIMEOUT_S),
    )


def describe(options: Options, base_url: str, models: tuple[str, ...]) -> str:
    """The line printed at start: where the mock listens and what it plays."""
    plays = [
        f"a {options.window:,}-token window" if options.window else "no window",
        "strict about tool pairing" if options.strict else "lenient",
        "the demo's tool-calling agent" if options.agent else "a fixed answer",
        f"{options.summary_quality} summaries",
    ]
    if options.native_compaction:
        plays.append("native compaction")
    if not options.count_tokens:
        plays.append("no count_tokens")
    if options.latency_s:
        plays.append(f"{options.latency_s:g} s latency")
    return (
        f"compaction-proxy mock: an OpenAI- and Anthropic-compatible provider at {base_url} "
        f"(model {', '.join(models)}; {', '.join(plays)}); Ctrl-C stops it"
    )


async def _serve(options: Options, sock: socket.socket) -> None:
    from proxy.demo.servers import serve, stopped_by_signals

    stop = asyncio.Event()
    with stopped_by_signals(stop):
        upstream = await asyncio.to_thread(mock_for, options)
        async with serve(_forgetful(upstream), sock, lifespan="off"):
            host, port = sock.getsockname()[:2]
            print(describe(options, f"http://{_authority(host, port)}/v1", upstream.models))
            sys.stdout.flush()
            await stop.wait()


def _forgetful(upstream: MockUpstream) -> ASGIApp:
    """`upstream.app`, forgetting each request once answered.

    The mock records every request for tests to read back; served on its own nobody reads
    them, and a mock left running for a day must not hold every body it was sent.
    """
    app: Callable[[Scope, Receive, Send], Awaitable[None]] = upstream.app

    async def forgetting(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            for record in (
                upstream.requests,
                upstream.summary_requests,
                upstream.prompt_tokens,
                upstream.cached_tokens,
            ):
                record.clear()

    return forgetting


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _seconds(value: str) -> float:
    number = float(value)
    if not number >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (got {value})")
    return number
