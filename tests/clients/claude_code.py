"""Claude Code (`claude -p`, npm's `@anthropic-ai/claude-code`) run headless against loopback
servers only.

Each run has a private `HOME` in a folder of the test's (the user's own `~/.claude` is never
read or written; Claude Code keeps its sessions there, so `--resume` finds the conversation a
run of the same folder started), a dummy key sent as `x-api-key`, and `ANTHROPIC_BASE_URL` at
the proxy's root (Claude Code appends `/v1/messages`). Its output reserve is set with
`CLAUDE_CODE_MAX_OUTPUT_TOKENS`, as a user behind a small window would: the 32,000 it asks for
by default would take most of the test's window.

Nothing may leave the machine: every proxy variable points at a closed loopback port
(`NO_PROXY` lets loopback through), and Claude Code's non-essential traffic (update checks,
telemetry, error reports) is off. Tools run without a person to approve them because the
run allows exactly the read-only ones the mock's agent calls (`--allowedTools`), in
`workspace`: not `--dangerously-skip-permissions`, which Claude Code refuses as root.
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

KEY: Final = "sk-ant-claude-code-test-dummy"
"""The key Claude Code sends (`x-api-key`): the tenant its session is stored under."""
MODEL: Final = "claude-sonnet-4-5"
ALLOWED_TOOLS: Final = "Read,Grep,Glob,Bash(cat:*),Bash(ls:*),Bash(wc:*)"
"""What Claude Code may run unasked: reading the workspace, nothing that writes."""
TIMEOUT_S: Final = 60.0
"""A run takes a second or two; a Claude Code waiting on something that never comes fails."""


@dataclass(frozen=True)
class ClaudeRun:
    """What one `claude -p --output-format json` run did, as its result and exit say."""

    returncode: int
    result: dict[str, Any]
    stderr: str
    seconds: float

    @property
    def session_id(self) -> str:
        return str(self.result.get("session_id"))

    @property
    def answer(self) -> str:
        return str(self.result.get("result"))

    @property
    def ok(self) -> bool:
        """Exit 0 with a result that is a success, not an error Claude Code reported."""
        result = self.result
        return (
            self.returncode == 0
            and result.get("subtype") == "success"
            and result.get("is_error") is False
            and result.get("permission_denials") == []
        )

    def summary(self) -> str:
        """For assertion messages: the status, the result, the end of Claude Code's stderr."""
        return f"exit {self.returncode}, result {self.result}, stderr: {self.stderr[-1500:]}"


def run_claude(
    home: Path,
    workspace: Path,
    base_url: str,
    prompt: str,
    *,
    resume: str | None = None,
    max_output_tokens: int,
) -> ClaudeRun:
    """`claude -p prompt` in `workspace` against `base_url` (the proxy's root), its home in
    `home`; with `resume`, continuing that session (its earlier turns sent again)."""
    claude = optional.require("claude")
    home.mkdir(exist_ok=True)
    closed = f"http://127.0.0.1:{free_port()}"
    proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": KEY,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_output_tokens),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        **dict.fromkeys(proxies, closed),
        **dict.fromkeys(("NO_PROXY", "no_proxy"), "127.0.0.1,localhost"),
    }
    command = [claude, "-p", prompt, "--model", MODEL, "--output-format", "json"]
    command += ["--allowedTools", ALLOWED_TOOLS]
    if resume is not None:
        command += ["--resume", resume]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
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
        raise AssertionError(f"claude -p ran over {TIMEOUT_S} s: {stderr[-1500:]}") from None
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"stdout": stdout[-1500:]}
    return ClaudeRun(process.returncode, result, stderr, time.monotonic() - started)
