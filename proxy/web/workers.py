"""The app of one worker process, for `serve --workers N` (N > 1).

uvicorn starts each worker in a fresh process and builds its app by importing a factory, so
the settings cannot be handed over as an object: the parent leaves its inputs (the config
file and the command-line flags) in the environment, which each worker inherits with the
rest of the environment, and each worker reads them as `serve` did. The workers share
sessions, checkpoints and summaries through Redis (the settings refuse more than one worker
on the embedded store), and their metrics through prometheus-client's multiprocess files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi import FastAPI

from proxy.observability.logs import configure_logging
from proxy.settings import load_settings

WORKER_ARGS = "COMPACTION_PROXY_WORKER_ARGS_JSON"
"""The parent's config path and flags, for its workers (not a settings key)."""


def worker_app() -> FastAPI:
    """The proxy app as `serve` configured it, built in a worker process."""
    from proxy.web import create_app

    given = json.loads(os.environ[WORKER_ARGS])
    config = Path(given["config"]) if given["config"] else None
    settings = load_settings(config, given["overrides"])
    configure_logging(settings.log.level, settings.log.format)
    return create_app(settings, freeze_heap=True)
