"""aider (PyPI's `aider-chat`) run headless against loopback servers only.

Each run is `aider --message ASK FILE...` in a scratch git repository: one request for the
ask (aider answers and exits), the files added to the chat sent whole in aider's files message
("I have *added these files to the chat* ..."). `--restore-chat-history` makes the runs one
conversation: each reads the earlier turns back from `.aider.chat.history.md` and sends them
again, as a user who starts aider again in the same folder gets. The model is
`openai/<name>` (LiteLLM's OpenAI-compatible route) at `--openai-api-base`, the proxy's `/v1`.

The run has a private `HOME` in a folder of the test's (aider keeps its analytics id and its
caches there), with an empty copy of the model-price list aider would otherwise download;
every proxy variable points at a closed loopback port (`NO_PROXY` lets loopback through), the
update check and analytics are off, and LiteLLM reads its bundled model list
(`LITELLM_LOCAL_MODEL_COST_MAP`). Nothing may leave the machine. Linting, auto-commits and the
repository map are off, so each run makes exactly the model calls its ask needs; aider applies
the model's SEARCH/REPLACE blocks (`--edit-format diff`) to the files on disk, so the next
run's files message carries their newer version.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests import optional
from tests.servers import free_port

KEY: Final = "sk-aider-test-dummy"
"""The key aider sends (`Authorization: Bearer ...`): the tenant its session is stored under."""
FILES_PREFIX: Final = "I have *added these files to the chat* so you can go ahead and edit them."
"""How aider's files message starts (aider/coders/base_prompts.py)."""
SUMMARY_PROMPT: Final = "*Briefly* summarize this partial conversation"
"""How aider's own request to summarize its chat history starts (aider/prompts.py)."""
TIMEOUT_S: Final = 60.0
FENCE: Final = "```"


@dataclass(frozen=True)
class AiderRun:
    """What one `aider --message` run printed, and its exit status."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def summary(self) -> str:
        """For assertion messages: the status and the end of what aider printed."""
        return (
            f"exit {self.returncode}, stdout: {self.stdout[-1500:]}, stderr: {self.stderr[-800:]}"
        )


def scratch_repository(root: Path, files: dict[str, str]) -> None:
    """A git repository at `root` holding `files` (path: content), committed once."""
    root.mkdir(parents=True)
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    identity = ["-c", "user.name=aider test", "-c", "user.email=aider@example.invalid"]
    for command in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *identity, *command], cwd=root, check=True, capture_output=True)


def file_block(path: str, content: str) -> str:
    """One file as aider's files message shows it: its path, then its content fenced."""
    return f"\n{path}\n{FENCE}\n{content}{FENCE}\n"


def edit_block(path: str, search: str, replace: str) -> str:
    """A SEARCH/REPLACE block (aider's `diff` edit format) that aider applies to `path`."""
    return (
        f"{path}\n{FENCE}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n{FENCE}\n"
    )


def run_aider(
    home: Path,
    repository: Path,
    base_url: str,
    model: str,
    ask: str,
    files: Sequence[str],
) -> AiderRun:
    """`aider --message ask files...` in `repository` against `base_url` (the proxy's `/v1`),
    its home in `home`, continuing the chat history the earlier runs left there."""
    aider = optional.require("aider")
    caches = home / ".aider" / "caches"
    caches.mkdir(parents=True, exist_ok=True)
    # Fresh, so aider reads it instead of fetching LiteLLM's price list from the network.
    (caches / "model_prices_and_context_window.json").write_text("{}")
    closed = f"http://127.0.0.1:{free_port()}"
    proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENAI_API_KEY": KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "GIT_AUTHOR_NAME": "aider test",
        "GIT_AUTHOR_EMAIL": "aider@example.invalid",
        "GIT_COMMITTER_NAME": "aider test",
        "GIT_COMMITTER_EMAIL": "aider@example.invalid",
        **dict.fromkeys(proxies, closed),
        **dict.fromkeys(("NO_PROXY", "no_proxy"), "127.0.0.1,localhost"),
    }
    command = [
        aider,
        "--model",
        f"openai/{model}",
        "--openai-api-base",
        base_url,
        "--edit-format",
        "diff",
        "--map-tokens",
        "0",
        "--restore-chat-history",
        "--yes-always",
        "--no-auto-commits",
        "--no-dirty-commits",
        "--no-auto-lint",
        "--no-check-update",
        "--analytics-disable",
        "--no-show-model-warnings",
        "--no-pretty",
        "--no-fancy-input",
        "--no-detect-urls",
        "--no-suggest-shell-commands",
        "--message",
        ask,
        *files,
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=repository,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"aider ran over {TIMEOUT_S} s: {stdout[-1500:]}") from None
    return AiderRun(process.returncode, stdout, stderr, time.monotonic() - started)
