"""Codex itself (`codex exec`) through a running proxy, compacting on its own, both ways a
user points it at the proxy: a provider of its own, and the built-in OpenAI provider.

The mock plays the model: it has Codex read a file of its workspace with `exec_command`
(`cat`, in Codex's read-only sandbox) `CALLS` times, then answers. Each result is about a
thousand tokens on top of Codex's fixed head of about eight thousand (its instructions and
tools), and Codex compacts at `COMPACT_AT` tokens of a `WINDOW`: every four or five calls,
so the task runs through several compactions before its answer. With its own provider
Codex compacts locally (an ordinary `/v1/responses` turn with its summarization prompt,
which the proxy forwards); with the built-in one remotely (`compaction_trigger`, which the
proxy answers in front of any provider but OpenAI, with its own item, then expands when
Codex sends the item back). The proxy's own compaction by pressure never starts: Codex's
comes first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from proxy.mock_upstream import AgentScript, Recorded
from tests.clients.codex import KEY, Provider, config_toml, run_codex
from tests.clients.stack import Stack, running_stack

pytestmark = pytest.mark.needs("codex")

WINDOW: Final = 24_000
COMPACT_AT: Final = 14_000
CALLS: Final = 20
ANSWER: Final = "Done: every field of the parser is an integer with a default."
PROMPT: Final = "Read notes.txt, as many times as you need, and summarize the parser's fields."
NOTES: Final = "\n".join(
    f"line {n}: the parser module keeps field {n} as an integer, default {n * 17}."
    for n in range(60)
)
"""About a thousand tokens, read by every call."""

SCRIPT: Final = AgentScript(
    calls=(("exec_command", json.dumps({"cmd": "cat notes.txt"})),) * CALLS,
    # Rounds are counted from the last user message, which a local compaction renews: the
    # calls' count ends the task, not the rounds'.
    rounds_per_turn=CALLS,
    cycle=False,
    answer=ANSWER,
)
_HANDSHAKES = re.compile(
    r'^compaction_proxy_requests_total\{route="responses",status="426"\} (\S+)$'
)


@pytest.mark.parametrize("provider", ["custom", "builtin"])
def test_codex_runs_its_task_to_the_end_through_several_compactions(
    tmp_path: Path, provider: Provider
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text(NOTES)
    with running_stack(tmp_path, SCRIPT, window=WINDOW) as stack:
        config = config_toml(provider, stack.base_url, window=WINDOW, compact_at=COMPACT_AT)
        run = run_codex(tmp_path, workspace, config, PROMPT)
        sessions = _sessions(stack)
        handshakes = _refused_handshakes(stack)
    context = run.summary()
    assert run.returncode == 0, context
    assert run.errors == [], context
    assert [item["text"] for item in run.items("agent_message")] == [ANSWER], context
    commands = run.items("command_execution")
    assert [(c["status"], c["exit_code"]) for c in commands] == [("completed", 0)] * CALLS
    assert NOTES.splitlines()[-1] in commands[-1]["aggregated_output"]

    upstream = stack.upstream
    # Codex's requests, not the summaries the proxy asked the model for.
    summaries = {id(r) for r in upstream.summary_requests}
    requests = [r for r in upstream.requests if r.path == "/v1/responses"]
    requests = [r for r in requests if id(r) not in summaries]
    kinds = [_metadata(r)["request_kind"] for r in requests]
    # Codex numbers its context windows, one more after each of its compactions: every
    # window reached the model, and the model saw no overflow and no broken call pairing.
    windows = {r.header("x-codex-window-id") for r in requests}
    assert len(windows) >= 4, (kinds, windows)
    assert upstream.overflows == upstream.strict_rejections == 0
    assert max(upstream.prompt_tokens) <= WINDOW

    # The whole run is one session, named by Codex's thread: its history started anew after
    # each compaction, its thread did not.
    assert [s["id"] for s in sessions] == [run.thread_id], sessions
    assert sessions[0]["turns"] == len(requests)

    if provider == "custom":
        # Compacted locally: the summarization turns reached the model, forwarded.
        assert kinds.count("compaction") == len(windows) - 1, kinds
        assert handshakes == 0  # a provider of its own: no WebSocket
    else:
        # Compacted remotely: the proxy answered each trigger, so none reached the model;
        # the model saw the proxy's blocks, never its items.
        assert "compaction" not in kinds, kinds
        assert sessions[0]["compactions"] == len(windows) - 1, sessions
        types = {_type(item) for r in requests for item in r.json()["input"]}
        assert not types & {"compaction", "compaction_trigger"}, types
        # One WebSocket, refused with the 426 on which Codex took HTTPS at once: no retries.
        assert handshakes == 1
        assert "Reconnecting" not in run.stderr
        assert "Falling back from WebSockets" not in run.stderr
    print(
        f"codex {provider}: {len(requests)} requests, {len(windows)} windows, {run.seconds:.1f} s"
    )


def _sessions(stack: Stack) -> list[dict[str, Any]]:
    """The sessions of Codex's key, as the session API lists them."""
    reply = httpx.get(
        f"{stack.base_url}/compaction/sessions",
        headers={"authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    reply.raise_for_status()
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def _refused_handshakes(stack: Stack) -> int:
    text = httpx.get(f"{stack.proxy_url}/metrics", timeout=5).text
    found = [_HANDSHAKES.match(line) for line in text.splitlines()]
    return sum(round(float(match.group(1))) for match in found if match)


def _metadata(request: Recorded) -> dict[str, Any]:
    """Codex's `x-codex-turn-metadata` header: what kind of request this is, and more."""
    value: dict[str, Any] = json.loads(request.header("x-codex-turn-metadata") or "{}")
    return value


def _type(item: dict[str, Any]) -> str:
    return str(item.get("type", "message"))
