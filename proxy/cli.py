"""The command line: `compaction-proxy serve [...]` (also `python -m proxy serve`), and
`inspect`, `demo` and `mock` (the mock provider on its own).

Configuration problems exit with code 2 and one line naming the key, never a traceback:
an operator reading a container log should see what to fix, not where Python was.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy import __version__
from proxy.core.policy import STRATEGIES
from proxy.core.urls import redact
from proxy.demo.options import add_arguments as add_demo_arguments
from proxy.demo.options import options_from as demo_options_from
from proxy.errors import ConfigError
from proxy.mock_upstream.command import add_arguments as add_mock_arguments
from proxy.mock_upstream.command import options_from as mock_options_from
from proxy.settings import Settings, load_settings

EXIT_INPUT = 1
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
    return int(args.run(settings, args) or 0)


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
    serve.add_argument(
        "--workers", type=int, help="processes serving the port (default: 1; more need --redis)"
    )
    serve.add_argument("--upstream", metavar="URL", help="upstream base URL, with its /v1")
    serve.add_argument("--redis", metavar="URL", help="Redis URL; empty for the embedded store")
    serve.add_argument(
        "--log-level", choices=["critical", "error", "warning", "info", "debug"], type=str.lower
    )
    serve.set_defaults(run=_serve)
    _add_inspect(commands)
    _add_demo(commands)
    _add_mock(commands)
    return parser


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="show what the proxy would forward for a request, without sending it",
        description="Run a chat completion (or Responses API) request body through the proxy "
        "as `serve` runs it, with the provider replaced by a recorder: token breakdown, "
        "pressure, and the messages it would forward.",
    )
    inspect.add_argument("request", type=Path, metavar="REQUEST.json")
    inspect.add_argument(
        "--config", type=Path, metavar="FILE", help="YAML config (default: config/proxy.yaml)"
    )
    inspect.add_argument("--context-window", type=int, metavar="N", help="the model's window")
    inspect.add_argument("--strategy", choices=STRATEGIES, help="compaction strategy to use")
    inspect.add_argument(
        "--summary-url",
        metavar="URL",
        help="the summary brain's base URL (summary_brain.base_url); without one, summaries "
        "become truncation",
    )
    inspect.add_argument(
        "--force",
        action="store_true",
        help="compact as the operator's /compact does, even under the trigger, waiting for "
        "the summary",
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.set_defaults(run=_inspect)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="watch the proxy compact simulated agents' sessions (no API key, no network)",
        description="Run simulated agents through the proxy to a mock model with a small "
        "window, print what the proxy did each turn and what it saved, then keep serving "
        "the dashboard until Ctrl-C.",
    )
    add_demo_arguments(demo)
    # No --config: the demo configures its own proxy; `main` still loads the settings.
    demo.set_defaults(run=_demo, config=None)


def _add_mock(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mock = commands.add_parser(
        "mock",
        help="run the mock OpenAI- and Anthropic-compatible provider alone, to try a client "
        "without a key",
        description="Serve the demo's mock provider (/v1/chat/completions, /v1/responses, "
        "/v1/messages, /v1/models) until Ctrl-C: point `compaction-proxy serve --upstream` or "
        "any OpenAI or Anthropic client at it.",
    )
    add_mock_arguments(mock)
    # No --config: the mock has no settings; `main` still loads the proxy's.
    mock.set_defaults(run=_mock, config=None)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """CLI flags as a partial settings mapping; flags not given override nothing."""
    flags = {
        ("server", "host"): getattr(args, "host", None),
        ("server", "port"): getattr(args, "port", None),
        ("server", "workers"): getattr(args, "workers", None),
        ("upstream", "base_url"): getattr(args, "upstream", None),
        ("redis", "url"): getattr(args, "redis", None),
        ("log", "level"): getattr(args, "log_level", None),
    }
    overrides: dict[str, Any] = {}
    for (section, key), value in flags.items():
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    return overrides


def _inspect(settings: Settings, args: argparse.Namespace) -> int:
    import asyncio

    from proxy.dry_run import DryRunError, Options, inspect_file, render_text

    options = Options(args.context_window, args.strategy, args.summary_url, args.force)
    try:
        report = asyncio.run(inspect_file(args.request, settings, options))
    except DryRunError as exc:
        print(f"compaction-proxy: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(json.dumps(report.as_json(), ensure_ascii=False) if args.json else render_text(report))
    return 0


def _demo(settings: Settings, args: argparse.Namespace) -> int:
    # The demo's proxy has settings of its own (the mock as upstream, the embedded store):
    # an operator's config file or environment must not point it elsewhere.
    from proxy.demo.command import main as run_demo

    return run_demo(demo_options_from(args))


def _mock(settings: Settings, args: argparse.Namespace) -> int:
    from proxy.mock_upstream.command import main as run_mock

    return run_mock(mock_options_from(args))


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.observability.logs import configure_logging
    from proxy.web import create_app
    from proxy.web.balancer import Balancer
    from proxy.web.workers import WORKER_ARGS

    configure_logging(settings.log.level, settings.log.format)
    # URLs may carry credentials (https://user:pass@host/v1): the log shows them hidden.
    logging.getLogger("proxy").info(
        "compaction-proxy %s forwarding to %s (store: %s)",
        __version__,
        redact(settings.upstream.base_url),
        f"redis at {redact(settings.redis.url)}" if settings.redis.url else "embedded",
    )
    workers = settings.server.workers
    if workers > 1:
        # Each worker process builds the app from the same inputs (it re-reads the config
        # file and inherits the environment); the metrics of all of them are summed at
        # /metrics, whichever worker answers it.
        os.environ[WORKER_ARGS] = json.dumps(
            {"config": str(args.config) if args.config else None, "overrides": _overrides(args)}
        )
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="compaction-proxy-")
    options: dict[str, Any] = {
        "host": settings.server.host,
        "port": settings.server.port,
        "log_level": settings.log.level,
        # Not uvicorn's own handlers and formats: its records go to the root logger's
        # handler, so every line of the process has one format (JSON by default).
        "log_config": None,
        # Relay the upstream's own Server and Date headers instead of adding ours.
        "server_header": False,
        "date_header": False,
        # One line per request is noise at fleet scale; the structured request log
        # (proxy.access, one line per request) replaces it.
        "access_log": settings.log.level == "debug",
        # uvloop and httptools when installed (uvicorn[standard]), the fastest pair.
        "loop": "auto",
        "http": "auto",
    }
    if workers > 1:
        config = uvicorn.Config("proxy.web.workers:worker_app", factory=True, **options)
        return Balancer(config, workers).run()
    uvicorn.run(create_app(settings, freeze_heap=True), **options)
    return 0
