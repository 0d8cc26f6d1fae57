"""The demo's options, and the arguments that set them (for `compaction-proxy demo` and
`python -m proxy.demo` alike)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Final, Literal

Api = Literal["chat", "responses", "messages", "both"]
APIS: Final[tuple[Api, ...]] = ("chat", "responses", "messages", "both")


@dataclass(frozen=True, slots=True)
class Options:
    agents: int = 3
    turns: int = 16
    port: int | None = None
    """Where the proxy listens: None for 8080, or any free port when 8080 is taken; 0 for any
    free port."""
    wait: bool = True
    """Keep serving after the sessions (for the dashboard) until SIGINT or SIGTERM."""
    api: Api = "chat"
    """What the agents speak: chat completions, the Responses API, or half of them each."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's flags, on `parser`."""
    defaults = Options()
    parser.add_argument(
        "--agents",
        type=positive_int,
        default=defaults.agents,
        metavar="N",
        help="agents (default: 3)",
    )
    parser.add_argument(
        "--turns",
        type=positive_int,
        default=defaults.turns,
        metavar="N",
        help="user turns per agent (default: 16)",
    )
    # Not `--port`'s usual destination: the CLI reads `port` into the settings, which do not
    # take 0, and the demo's proxy is configured by the demo alone.
    parser.add_argument(
        "--port",
        dest="demo_port",
        type=port_number,
        metavar="P",
        help="port of the proxy (default: 8080, or a free one if taken; 0: a free one)",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="exit after the final table instead of serving the dashboard until Ctrl-C",
    )
    parser.add_argument(
        "--api",
        choices=APIS,
        default=defaults.api,
        help="what the agents speak: chat completions, the Responses API (a reasoning model, "
        "stateless, as Codex is), the Messages API (the anthropic SDK with thinking on, as "
        "Claude Code drives it), or half of them chat and half Responses (default: chat)",
    )


def options_from(args: argparse.Namespace) -> Options:
    """The options `add_arguments`' flags parsed to."""
    return Options(
        agents=args.agents,
        turns=args.turns,
        port=args.demo_port,
        wait=not args.no_wait,
        api=args.api,
    )


def positive_int(value: str) -> int:
    """An argparse type: an integer of at least 1."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return number


def port_number(value: str) -> int:
    """An argparse type: a port from 0 (any free one) to 65535."""
    number = int(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535 (got {value})")
    return number
