"""The command line: `compaction-proxy serve [...]` (also `python -m proxy serve`).

Configuration problems exit with code 2 and one line naming the key, never a traceback:
an operator reading a container log should see what to fix, not where Python was.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy import __version__
from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings

EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `compaction-proxy` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config, _overrides(args))
    except ConfigError as exc:
        print(f"compaction-proxy: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    return int(args.run(settings) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compaction-proxy",
        description="An OpenAI-compatible proxy that keeps conversations inside the window.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument(
        "--config", type=Path, metavar="FILE", help="YAML config (default: config/proxy.yaml)"
    )
    serve.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: 8080)")
    serve.add_argument("--upstream", metavar="URL", help="upstream base URL, with its /v1")
    serve.add_argument("--redis", metavar="URL", help="Redis URL; empty for the embedded store")
    serve.add_argument(
        "--log-level", choices=["critical", "error", "warning", "info", "debug"], type=str.lower
    )
    serve.set_defaults(run=_serve)
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """CLI flags as a partial settings mapping; flags not given override nothing."""
    flags = {
        ("server", "host"): args.host,
        ("server", "port"): args.port,
        ("upstream", "base_url"): args.upstream,
        ("redis", "url"): args.redis,
        ("log", "level"): args.log_level,
    }
    overrides: dict[str, Any] = {}
    for (section, key), value in flags.items():
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    return overrides


def _serve(settings: Settings) -> int:
    import uvicorn

    from proxy.web import create_app

    logging.basicConfig(
        level=settings.log.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("proxy").info(
        "compaction-proxy %s forwarding to %s (store: %s)",
        __version__,
        settings.upstream.base_url,
        "redis" if settings.redis.url else "embedded",
    )
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.log.level,
        # Relay the upstream's own Server and Date headers instead of adding ours.
        server_header=False,
        date_header=False,
        # One line per request is noise at fleet scale; the structured request log replaces it.
        access_log=settings.log.level == "debug",
        # uvloop and httptools when installed (uvicorn[standard]), the fastest pair.
        loop="auto",
        http="auto",
    )
    return 0
