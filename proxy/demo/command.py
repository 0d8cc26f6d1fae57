"""The demo as a command: its exit code, Ctrl-C, and a missing SDK said in one line.

SIGINT and SIGTERM stop the demo cleanly (servers shut down, exit code 0), whether they
come during the sessions or while the dashboard is being served.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
from typing import Final

from proxy.demo.options import Options

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1


def main(options: Options) -> int:
    """Run the demo; 0 when it worked or was stopped, 1 when it could not run or saw errors."""
    # The agents are the official SDK, which the proxy itself never needs.
    if importlib.util.find_spec("openai") is None:
        print(
            "compaction-proxy demo: the demo's agents need the openai package "
            "(pip install openai, or make demo, which installs it)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    # The proxy's own warnings (a tokenizer that could not load, a failed summary) as lines.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_main(options))
    except KeyboardInterrupt:  # where the loop cannot take signals itself (Windows)
        return EXIT_OK


async def _main(options: Options) -> int:
    from proxy.demo.runner import run
    from proxy.demo.servers import PortUnavailableError, stopped_by_signals

    stop = asyncio.Event()
    try:
        with stopped_by_signals(stop):
            result = await run(options, sys.stdout, stop)
    except PortUnavailableError as exc:
        print(f"compaction-proxy demo: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if result is not None and result.totals.errors else EXIT_OK
