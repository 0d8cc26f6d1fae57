"""The servers of the overhead cases: the fast mock, our proxy and LiteLLM's, each a process.

The proxy runs as `compaction-proxy serve` with a generated configuration where nothing
compacts (a window of a million tokens) except for the model `mock-compact` (16,000 tokens),
which the compaction cases use. LiteLLM's proxy runs from its own virtualenv
(`bench/.venv-litellm`, made by `make bench`), configured to route both model names to the
same mock with its `openai/` provider. When LiteLLM cannot be started, the stack says why and
the suite goes on without it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.measures import DIRECT, LITELLM, PROXY
from bench.mock_server import MODELS
from bench.processes import ProcessMeter, Server, StartError, free_port, python_module, start

BENCH_DIR = Path(__file__).resolve().parent
LITELLM_VENV = BENCH_DIR / ".venv-litellm"
LITELLM_INSTALL_LOG = BENCH_DIR / ".venv-litellm.log"
COMPACT_MODEL = "mock-compact"
COMPACT_WINDOW = 16_000
NO_COMPACTION_WINDOW = 1_000_000


@dataclass(frozen=True, slots=True)
class Target:
    """Where a case sends its requests, and the process whose cost it reports."""

    name: str
    url: str
    meter: ProcessMeter


@dataclass(slots=True)
class Stack:
    mock: Server
    proxy: Server
    litellm: Server | None
    litellm_problem: str | None
    litellm_version: str | None
    servers: list[Server] = field(default_factory=list)

    @property
    def targets(self) -> list[Target]:
        pairs = [(DIRECT, self.mock), (PROXY, self.proxy)]
        if self.litellm is not None:
            pairs.append((LITELLM, self.litellm))
        return [
            Target(name, f"{server.base_url}/chat/completions", server.meter)
            for name, server in pairs
        ]


COMPACTION_KEY = "bench-compaction-key-of-32-bytes!"
"""In front of the mock the proxy answers compaction requests, which on a shared store (Redis,
several workers) needs a key every replica shares."""


def proxy_config(mock_url: str) -> dict[str, object]:
    return {
        "upstream": {"base_url": mock_url, "timeout_s": 120},
        "context": {"context_window": NO_COMPACTION_WINDOW},
        "models": {COMPACT_MODEL: {"context_window": COMPACT_WINDOW}},
        "log": {"level": "warning"},
        "responses": {"compaction_key": COMPACTION_KEY},
    }


def litellm_config(mock_url: str) -> dict[str, object]:
    models = [
        {
            "model_name": name,
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": mock_url,
                "api_key": "sk-bench",
            },
        }
        for name in MODELS
    ]
    return {"model_list": models, "litellm_settings": {"drop_params": True}}


# uvicorn's access log off, as it is for our proxy at log level warning: a fair comparison.
_QUIET_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"err": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
    "root": {"level": "WARNING", "handlers": ["err"]},
    "loggers": {
        name: {"level": "WARNING", "handlers": ["err"], "propagate": False}
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "LiteLLM", "LiteLLM Proxy")
    },
}


def proxy_command(config: Path, port: int) -> list[str]:
    script = Path(sys.executable).with_name("compaction-proxy")
    base = [str(script)] if script.exists() else python_module("proxy")
    return [*base, "serve", "--config", str(config), "--port", str(port)]


def _start_litellm(mock_url: str, work: Path) -> tuple[Server | None, str | None, str | None]:
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        reason = "not installed: bench/.venv-litellm/bin/litellm is missing"
        if LITELLM_INSTALL_LOG.exists():
            errors = [
                line.strip()
                for line in LITELLM_INSTALL_LOG.read_text(errors="replace").splitlines()
                if line.startswith("ERROR")
            ]
            reason += f"; the install failed: {' | '.join(errors[-2:]) or 'see its log'}"
        else:
            reason += " (make bench creates it)"
        return None, reason, None
    config = work / "litellm.yaml"
    config.write_text(yaml.safe_dump(litellm_config(mock_url)))
    logging = work / "litellm-logging.json"
    logging.write_text(json.dumps(_QUIET_LOGGING))
    port = free_port()
    command = [
        str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
        "--telemetry", "False", "--log_config", str(logging),
    ]  # fmt: skip
    # No network here: LiteLLM's model price map comes from its package, not GitHub.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    try:
        server = start(LITELLM, command, port=port, log=work / "litellm.log", env=env)
    except StartError as exc:
        return None, f"did not start: {exc}", None
    return server, None, _litellm_version()


def _litellm_version() -> str | None:
    metadata = list((LITELLM_VENV / "lib").glob("python*/site-packages/litellm-*.dist-info"))
    return (
        metadata[0].name.removeprefix("litellm-").removesuffix(".dist-info") if metadata else None
    )


@contextmanager
def running_stack(
    work: Path, *, latency_ms: float, chunks: int, with_litellm: bool
) -> Iterator[Stack]:
    """The mock, the proxy and (when wanted and possible) LiteLLM, stopped on exit."""
    servers: list[Server] = []
    try:
        mock_port = free_port()
        mock = start(
            "mock",
            python_module(
                "bench.mock_server", "--port", str(mock_port),
                "--upstream-latency-ms", str(latency_ms), "--chunks", str(chunks),
            ),
            port=mock_port,
            log=work / "mock.log",
        )  # fmt: skip
        servers.append(mock)
        config = work / "proxy.yaml"
        config.write_text(yaml.safe_dump(proxy_config(mock.base_url)))
        proxy_port = free_port()
        command = proxy_command(config, proxy_port)
        proxy = start(
            PROXY, command, port=proxy_port, log=work / "proxy.log", ready_path="/healthz"
        )
        servers.append(proxy)
        litellm: Server | None = None
        problem: str | None = "skipped (--no-litellm)"
        version: str | None = None
        if with_litellm:
            litellm, problem, version = _start_litellm(mock.base_url, work)
            if litellm is not None:
                servers.append(litellm)
        yield Stack(mock, proxy, litellm, problem, version, servers)
    finally:
        for server in reversed(servers):
            server.stop()
