"""Claude Code itself (`claude -p`) through a running proxy, in a window far smaller than its
conversation, the proxy compacting it several times.

The mock plays the model with Claude Code's own tools: each turn it has Claude Code `Read`
the workspace's notes (the absolute path from Claude Code's system prompt), `cat` them with
`Bash` and `Grep` them for the checksum, then answers with the checksum the last result
showed. Claude Code runs every call for real and sends back real results, about 1,500 tokens
each, on top of its fixed head of about 29,000 (its system prompt and some thirty tools).
`TURNS` runs continue one conversation (`--resume` the first's session), the test writing a
new checksum into the notes before each: a turn's answer names its own only if Claude Code
ran that turn's tools and the model saw their results.

Claude Code believes it has a 200,000-token window behind a base URL that is not Anthropic's,
so its own auto-compaction never fires here: the proxy alone keeps the conversation inside
the mock's `WINDOW`, compacting at its trigger.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from proxy.mock_upstream import AgentScript, MockUpstream, Recorded
from tests.clients.claude_code import KEY, ClaudeRun, run_claude
from tests.clients.stack import Stack, running_stack

pytestmark = pytest.mark.needs("claude")

WINDOW: Final = 52_000
OUTPUT: Final = 4_096
"""Claude Code's output reserve (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`), and the proxy's with it."""
TURNS: Final = 5
ROUNDS: Final = 8
"""Tool calls per turn, one a round."""
ANSWER: Final = "Done: the notes' checksum is"
NOTES: Final = "notes.txt"
CALLS: Final = (
    ("Read", json.dumps({"file_path": "{workspace}/notes.txt"})),
    ("Bash", json.dumps({"command": "cat notes.txt", "description": "Show the notes"})),
    ("Read", json.dumps({"file_path": "{workspace}/notes.txt"})),
    ("Bash", json.dumps({"command": "cat notes.txt", "description": "Show the notes"})),
    ("Glob", json.dumps({"pattern": "*.txt"})),
    ("Read", json.dumps({"file_path": "{workspace}/notes.txt"})),
    ("Bash", json.dumps({"command": "cat notes.txt", "description": "Show the notes"})),
    ("Grep", json.dumps({"pattern": "checksum", "output_mode": "content"})),
)
SCRIPT: Final = AgentScript(
    calls=CALLS, rounds_per_turn=ROUNDS, answer=ANSWER, quote=r"checksum (ck-[0-9a-f]+)"
)
PROMPT: Final = "Read notes.txt and tell me the parser's checksum."


def notes(turn: int) -> str:
    """About 3,000 tokens, the checksum on one line in the middle."""
    lines = [
        f"line {n}: the parser module keeps field {n} as an integer, default {n * 17}."
        for n in range(160)
    ]
    lines[80] = f"The parser's checksum {checksum(turn)} covers every field."
    return "\n".join(lines) + "\n"


def checksum(turn: int) -> str:
    return f"ck-{0xC0FFEE + turn * 4099:x}"


def test_claude_code_runs_a_long_task_through_several_compactions(tmp_path: Path) -> None:
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    log_path = tmp_path / "proxy.log"
    runs: list[ClaudeRun] = []
    with (
        log_path.open("wb") as log,
        running_stack(tmp_path, SCRIPT, window=WINDOW, log=log) as stack,
    ):
        for turn in range(TURNS):
            (workspace / NOTES).write_text(notes(turn))
            resume = runs[0].session_id if runs else None
            run = run_claude(
                home, workspace, stack.proxy_url, PROMPT, resume=resume, max_output_tokens=OUTPUT
            )
            runs.append(run)
            assert run.ok, run.summary()
        # The access line of the last answer is written once its stream is relayed, and the
        # session's record in the background: both may trail Claude Code's exit a moment.
        requests = _agent_requests(stack.upstream)
        lines = _conversation(_until_logged(log_path, len(requests)))
        compacting = [line for line in lines if line["action"] != "none"]
        sessions = _until_recorded(stack, len(compacting))
        counted = stack.compactions_counted()
    upstream = stack.upstream
    context = (
        f"{len(runs)} runs in {[round(r.seconds, 1) for r in runs]} s (first request after"
        f" {[r.result.get('time_to_request_ms') for r in runs]} ms), {len(requests)} requests,"
        f" prompts {upstream.prompt_tokens}, compactions "
        f"{[(line['action'], line['tokens_before'], line['tokens_after']) for line in compacting]}"
    )
    print(f"claude code: {context}")

    # Every run finished its turn with the checksum it read that turn: Claude Code ran the
    # model's calls on the real files and sent their results back, through every compaction.
    for turn, run in enumerate(runs):
        assert run.answer == f"{ANSWER} {checksum(turn)}", run.summary()
        assert run.session_id == runs[0].session_id, run.summary()
        assert run.result["num_turns"] == ROUNDS + 1, run.summary()  # its calls and answer
    assert len(requests) == TURNS * (ROUNDS + 1), context

    # The proxy handled every request of the loop as one conversation (one session), across
    # the five processes, and compacted it several times, in several turns.
    assert len(lines) == len(requests), context
    assert {line["status"] for line in lines} == {200}, context
    assert len(compacting) >= 3, context
    # In several turns, and in the middle of Claude Code's tool loop, not only on a prompt.
    places = [divmod(lines.index(line), ROUNDS + 1) for line in compacting]
    assert len({turn for turn, _ in places}) >= 2, places
    assert any(index > 0 for _, index in places), places
    assert all(line["tokens_after"] < line["tokens_before"] for line in compacting), context
    assert [s["compactions"] for s in sessions if s["compactions"]] == [len(compacting)], sessions
    assert counted == len(compacting), context

    # Claude Code's history outgrew the window; what reached the model never did, and the
    # strict model refused nothing: tool pairing, roles, breakpoints, and the signature of
    # every thinking block that came back, byte for byte.
    assert lines[-1]["tokens_before"] > WINDOW, context
    assert upstream.overflows == upstream.strict_rejections == 0, context
    assert max(upstream.prompt_tokens) <= WINDOW, context
    assert all(_thinks(r) for r in requests), "Claude Code no longer asks for thinking"
    assert {r.json()["max_tokens"] for r in requests} == {OUTPUT}
    assert _thinking_blocks(requests[-1]) >= ROUNDS, context


def _agent_requests(upstream: MockUpstream) -> list[Recorded]:
    """The requests of Claude Code's agent loop (with its tools), not the proxy's summaries
    nor Claude Code's side requests (a title, without tools)."""
    summaries = {id(r) for r in upstream.summary_requests}
    return [
        r
        for r in upstream.requests
        if r.path == "/v1/messages" and r.json().get("tools") and id(r) not in summaries
    ]


def _conversation(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The access lines of the session most requests belong to: Claude Code's conversation,
    not a side request of its own (those are sessions of their own)."""
    if not lines:
        return lines
    [(session, _)] = Counter(line["session"] for line in lines).most_common(1)
    return [line for line in lines if line["session"] == session]


def _thinks(request: Recorded) -> bool:
    thinking = request.json().get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _thinking_blocks(request: Recorded) -> int:
    """The thinking blocks the request sends back (each checked by the strict mock)."""
    return sum(
        isinstance(block, dict) and block.get("type") == "thinking"
        for message in request.json()["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )


def _until_logged(path: Path, count: int) -> list[dict[str, Any]]:
    """The proxy's access lines for the Messages API, once there are `count` of them."""
    deadline = time.monotonic() + 5
    while True:
        lines = [
            entry
            for entry in map(json.loads, path.read_text().splitlines())
            if entry.get("api") == "messages"
        ]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def _until_recorded(stack: Stack, compactions: int) -> list[dict[str, Any]]:
    """The sessions of Claude Code's key (the session API), once they record `compactions`."""
    deadline = time.monotonic() + 5
    while True:
        reply = httpx.get(
            f"{stack.base_url}/compaction/sessions", headers={"x-api-key": KEY}, timeout=10
        )
        reply.raise_for_status()
        sessions: list[dict[str, Any]] = reply.json()["data"]
        recorded = sum(session["compactions"] for session in sessions)
        if recorded >= compactions or time.monotonic() > deadline:
            return sessions
        time.sleep(0.05)
