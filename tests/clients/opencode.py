"""opencode (`opencode run`, npm's `opencode-ai`) run headless against loopback servers only.

opencode reaches an OpenAI-compatible server through a provider of its config
(`"npm": "@ai-sdk/openai-compatible"`, `options.baseURL`, the model's `limit.context` and
`limit.output`), written to the workspace's `opencode.json`; its requests are streamed chat
completions with its ten tools and `max_tokens` at the model's output limit, and a separate
request without tools for the session's title. It names its session itself (`ses_...`).

Each run has a private `HOME` and XDG folders in a folder of the test's (opencode keeps its
database, logs and caches there; the user's own are never read). Nothing may leave the
machine: every proxy variable points at a closed loopback port (`NO_PROXY` lets loopback
through); its update check, model-list fetch, default plugins, LSP downloads, sharing and its
reading of Claude Code's files are off. Its permissions allow its tools without asking
(there is no one to ask), but for `webfetch`. Its grep and glob tools run the machine's
ripgrep (`rg`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests import optional
from tests.servers import free_port

KEY: Final = "sk-opencode-test-dummy"
"""The key opencode sends (`Authorization: Bearer ...`): the tenant its session is stored under."""
PROVIDER: Final = "compaction-proxy"
TIMEOUT_S: Final = 120.0
_OFF: Final = (
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_SHARE",
    "OPENCODE_DISABLE_CLAUDE_CODE",
)


@dataclass(frozen=True)
class OpencodeRun:
    """What one `opencode run --format json` did, as its events and exit status say."""

    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    seconds: float

    @property
    def texts(self) -> list[str]:
        """The text parts of the answer, in order."""
        return [e["part"]["text"] for e in self.events if e.get("type") == "text"]

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool parts opencode ran, in order (`tool`, `state.status`, `state.input`)."""
        return [e["part"] for e in self.events if e.get("type") == "tool_use"]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "error"]

    def summary(self) -> str:
        """For assertion messages: the status, the errors, the end of opencode's stderr."""
        return f"exit {self.returncode}, errors {self.errors}, stderr: {self.stderr[-1500:]}"


def config(base_url: str, model: str, *, window: int, output: int) -> dict[str, Any]:
    """opencode's config: a provider of its own at `base_url` (the proxy's `/v1`) serving
    `model` with a `window` of tokens and `output` of them for its answer."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER,
                "options": {"baseURL": base_url, "apiKey": KEY},
                "models": {model: {"name": model, "limit": {"context": window, "output": output}}},
            }
        },
    }


def run_opencode(home: Path, workspace: Path, settings: dict[str, Any], prompt: str) -> OpencodeRun:
    """`opencode run prompt` in `workspace`, configured by `settings` (`config`), its home in
    `home`."""
    opencode = optional.require("opencode")
    home.mkdir(exist_ok=True)
    (workspace / "opencode.json").write_text(json.dumps(settings, indent=2))
    closed = f"http://127.0.0.1:{free_port()}"
    proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        **dict.fromkeys(_OFF, "1"),
        **dict.fromkeys(proxies, closed),
        **dict.fromkeys(("NO_PROXY", "no_proxy"), "127.0.0.1,localhost"),
    }
    started = time.monotonic()
    process = subprocess.Popen(
        [opencode, "run", "--format", "json", prompt],
        cwd=workspace,
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
        raise AssertionError(f"opencode run ran over {TIMEOUT_S} s: {stderr[-1500:]}") from None
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return OpencodeRun(process.returncode, events, stderr, time.monotonic() - started)
