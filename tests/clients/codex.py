"""Codex (`codex exec`, npm's `@openai/codex`) run headless against loopback servers only.

Each run has a private `CODEX_HOME` and `HOME` in a folder of the test's (the user's own
`~/.codex` is never read or written), a dummy key, and a `config.toml` that points Codex's
model provider at the proxy in one of the two ways a user would:

- `custom`: a provider of its own, `[model_providers.compaction-proxy]` with `base_url` and
  `wire_api = "responses"`. Codex compacts locally: an ordinary `/v1/responses` turn with its
  own summarization prompt.
- `builtin`: the built-in OpenAI provider, `openai_base_url`. Codex first opens a WebSocket on
  `/v1/responses`, and compacts remotely: a streamed `/v1/responses` whose `input` ends with
  `compaction_trigger`, expecting one `compaction` item back.

Nothing may leave the machine: every proxy variable points at a closed loopback port
(`NO_PROXY` lets loopback through), and Codex's plugin sync, apps, update check and analytics
are off. `--strict-config` makes a Codex that no longer knows a key fail loudly rather than
fall back to OpenAI. Codex runs its tool calls in its read-only sandbox, in `workspace`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from tests import optional
from tests.servers import free_port

Provider = Literal["custom", "builtin"]
KEY: Final = "sk-codex-test-dummy"
"""The key Codex sends (`Authorization: Bearer ...`): the tenant its session is stored under."""
MODEL: Final = "mock-model"
METADATA_WARNING: Final = "Model metadata for `mock-model` not found"
"""Codex's note about a model it has no metadata for, shown as an error item: not an error."""


@dataclass(frozen=True)
class CodexRun:
    """What one `codex exec --json` run did, as its event stream and exit status say."""

    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    seconds: float

    def items(self, kind: str) -> list[dict[str, Any]]:
        """The completed items of type `kind` (`agent_message`, `command_execution`...)."""
        return [
            event["item"]
            for event in self.events
            if event["type"] == "item.completed" and event["item"].get("type") == kind
        ]

    @property
    def thread_id(self) -> str:
        return str(next(e["thread_id"] for e in self.events if e["type"] == "thread.started"))

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Failed turns, error events and error items (but Codex's note on model metadata)."""
        failed = [e for e in self.events if e["type"] in ("error", "turn.failed")]
        noted = [i for i in self.items("error") if METADATA_WARNING not in i.get("message", "")]
        return failed + noted

    def summary(self) -> str:
        """For assertion messages: the status, the errors, the end of Codex's stderr."""
        return f"exit {self.returncode}, errors {self.errors}, stderr: {self.stderr[-1500:]}"


def config_toml(provider: Provider, base_url: str, *, window: int, compact_at: int) -> str:
    """Codex's `config.toml` with `provider` pointed at `base_url` (the proxy's `/v1`), a
    `window` of tokens and its own compaction at `compact_at` tokens."""
    top = [
        f'model = "{MODEL}"',
        f"model_context_window = {window}",
        f"model_auto_compact_token_limit = {compact_at}",
        "check_for_update_on_startup = false",
    ]
    tables = ["[analytics]", "enabled = false", "", "[features]", "plugins = false", "apps = false"]
    if provider == "builtin":
        # Not the OPENAI_BASE_URL variable: Codex ignores it.
        top.append(f'openai_base_url = "{base_url}"')
    else:
        # `openai`, `ollama` and `lmstudio` are Codex's reserved provider ids.
        top.append('model_provider = "compaction-proxy"')
        tables += [
            "",
            "[model_providers.compaction-proxy]",
            'name = "compaction-proxy"',
            f'base_url = "{base_url}"',
            'env_key = "OPENAI_API_KEY"',
            'wire_api = "responses"',
        ]
    return "\n".join([*top, "", *tables, ""])


def run_codex(
    folder: Path, workspace: Path, config: str, prompt: str, *, timeout_s: float = 60
) -> CodexRun:
    """`codex exec` of `prompt` in `workspace`, configured by `config`, its home in `folder`."""
    codex = optional.require("codex")
    home = folder / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(config)
    closed = f"http://127.0.0.1:{free_port()}"
    proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "OPENAI_API_KEY": KEY,
        "CODEX_API_KEY": KEY,
        **dict.fromkeys(proxies, closed),
        **dict.fromkeys(("NO_PROXY", "no_proxy"), "127.0.0.1,localhost"),
    }
    command = [
        codex,
        "exec",
        "--json",
        "--ephemeral",
        "--strict-config",
        "--skip-git-repo-check",
        "--color",
        "never",
        "--sandbox",
        "read-only",
        "--cd",
        str(workspace),
        prompt,
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"codex exec ran over {timeout_s} s: {stderr[-1500:]}") from None
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return CodexRun(process.returncode, events, stderr, time.monotonic() - started)
