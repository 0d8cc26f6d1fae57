"""The real model's fixtures: llama.cpp's server, a private Redis, and the runs' numbers.

Every test here is marked `real_llm` and is skipped unless COMPACTION_PROXY_REAL_LLM=1 and the
model server's venv (llama-cpp-python) and the GGUF are present; `make e2e` sets up all three.
The model server has a venv of its own so that the proxy never depends on llama-cpp-python.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from proxy.core.messages import Message
from tests import optional
from tests.e2e.conversation import RunReport
from tests.servers import free_port

ENABLE = "COMPACTION_PROXY_REAL_LLM"
VENV_VARIABLE = "COMPACTION_PROXY_LLM_VENV"
GGUF_VARIABLE = "COMPACTION_PROXY_LLM_GGUF"
ROOT = Path(__file__).resolve().parents[2]
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"

# Loading 250 MB of weights takes a second or two; a slow disk gets some slack.
_START_TIMEOUT_S = 120
_REPORTS = pytest.StashKey[list[RunReport]]()
_GEMMA_ROLES = {"user": "user", "assistant": "model"}


@dataclass(frozen=True, slots=True)
class ModelServer:
    """llama.cpp's OpenAI-compatible server, serving one model."""

    base_url: str
    """With its `/v1`, as an OpenAI SDK's base URL."""
    model: str
    n_ctx: int
    """The window llama.cpp really has: longer prompts get a `context_length_exceeded` 400."""

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        """What llama.cpp would count for `messages`: llama-cpp-python's "gemma" chat format
        rendered here (it drops system messages), tokenized by the server itself."""
        turns = [
            f"<start_of_turn>{_GEMMA_ROLES[message['role']]}\n{message['content']}<end_of_turn>\n"
            for message in messages
            if message["role"] in _GEMMA_ROLES
        ]
        prompt = "".join(turns) + "<start_of_turn>model\n"
        root = self.base_url.removesuffix("/v1")
        response = httpx.post(f"{root}/extras/tokenize/count", json={"input": prompt}, timeout=30)
        response.raise_for_status()
        return int(response.json()["count"])


def _paths() -> tuple[Path, Path]:
    """The model server's Python and the GGUF (`make e2e`'s, unless the environment says)."""
    venv = Path(os.environ.get(VENV_VARIABLE) or ROOT / ".venv-llm")
    gguf = Path(os.environ.get(GGUF_VARIABLE) or venv / "models" / GGUF_NAME)
    return venv / "bin" / "python", gguf


def _model_server_python() -> str | None:
    """The model server's Python, where `make e2e` asked for the model and set it up."""
    python, gguf = _paths()
    ready = os.environ.get(ENABLE) == "1" and python.is_file() and gguf.is_file()
    return str(python) if ready else None


optional.register(
    optional.Tool(
        "the real model",
        _model_server_python,
        f"set {ENABLE}=1, with the model server's venv and the GGUF in place "
        f"({VENV_VARIABLE}, {GGUF_VARIABLE}): `make e2e` does all three",
    )
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Skipped where the model is missing, and never counted by the coverage gates.
    for item in items:
        if item.get_closest_marker("real_llm") is not None:
            item.add_marker(pytest.mark.needs("the real model"))


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """Gemma 3 270M on llama.cpp, a 2,048-token window, on a free loopback port."""
    python, gguf = _paths()
    port = free_port()
    model, n_ctx = "gemma-3-270m", 2048
    command = [
        str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", model,
        "--n_ctx", str(n_ctx), "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port),
        # Decoding one token at a time syncs its threads at every layer: on a busy 2-core
        # machine a second thread made it 20 times slower. Prompts are big batches: 2 threads.
        "--n_threads", "1", "--n_threads_batch", str(os.cpu_count() or 1),
        # The server computes every prompt token's logits by default (for `logprobs`): with
        # Gemma's 262k vocabulary that, and attention without flash, tripled prompt time.
        "--logits_all", "false", "--flash_attn", "true",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_for_models(process, base_url, log)
        yield ModelServer(base_url, model, n_ctx)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_models(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"llama.cpp's server exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama.cpp's server did not answer /v1/models in {_START_TIMEOUT_S} s")


@pytest.fixture
def reports(request: pytest.FixtureRequest) -> list[RunReport]:
    """Where a run leaves its numbers, printed at the end of the session."""
    return request.config.stash.setdefault(_REPORTS, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    found = config.stash.get(_REPORTS, [])
    if found:
        terminalreporter.section("real model runs")
        for report in found:
            terminalreporter.write_line(report.describe())
