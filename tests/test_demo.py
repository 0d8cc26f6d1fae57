"""`make demo`: simulated agents through the real proxy to the mock provider, end to end."""

from __future__ import annotations

import asyncio
import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from proxy.cli import main as cli_main
from proxy.demo.agents import Exchange, TurnReport
from proxy.demo.display import Progress
from proxy.demo.options import Options
from proxy.demo.runner import Result, run
from tests.servers import free_port, taken_port

SCRIPT = Path(sys.executable).parent / "compaction-proxy"
# Generous: the machine may be busy with other work; a slow demo is not a broken one.
PROCESS_TIMEOUT_S = 240
TURN_LINE = re.compile(r"^\[\s*\d+/(\d+)\] agent-\d+ ", re.MULTILINE)
DASHBOARD = re.compile(r"Dashboard: +(http://127\.0\.0\.1:(\d+)/dashboard#token=[\w-]+)")


AGENT_ROW = re.compile(
    r"^(agent-\d+) \S+ \((?:whole|streamed)\) +(chat|responses|messages) ", re.MULTILINE
)


def _totals_row(output: str) -> dict[str, str]:
    """The table's `all` row, by column name."""
    names = ("sent", "forwarded", "saved", "compactions", "summaries", "cached", "errors")
    row = next(line for line in output.splitlines() if line.startswith("all "))
    return dict(zip(names, row.split()[1:], strict=False))


def _number(cell: str) -> int:
    return int(cell.replace(",", ""))


async def test_demo_compacts_agent_sessions_without_errors() -> None:
    out = io.StringIO()
    result = await run(Options(agents=2, turns=10, port=0, wait=False), out)
    assert result is not None
    totals = result.totals
    assert totals.errors == 0
    assert totals.overflows == totals.rejections == 0
    assert totals.compactions.total() >= 1
    assert totals.forwarded_tokens < totals.sent_tokens
    # What the agents read in `usage` is what the provider counted, request for request.
    assert sum(agent.forwarded_tokens for agent in result.agents) == totals.forwarded_tokens
    assert all(agent.facts_kept == len(agent.facts) for agent in result.agents)
    text = out.getvalue()
    assert len(TURN_LINE.findall(text)) == 20
    assert "\r" not in text  # not a terminal: no progress bar drawn in place
    # Without waiting the proxy stops with the demo: no dashboard address that would not answer.
    assert "/dashboard" not in text
    assert result.admin_token not in text
    assert "The proxy stops with the demo (--no-wait)" in text
    assert "Ctrl-C" not in text


async def test_responses_demo_compacts_reasoning_agents_and_lists_their_sessions() -> None:
    out = io.StringIO()
    stop = asyncio.Event()
    options = Options(agents=2, turns=8, port=0, wait=True, api="responses")
    demo = asyncio.create_task(run(options, out, stop))
    try:
        dashboard = await _printed(out, DASHBOARD, demo)
        base_url, token = dashboard.group(1).split("/dashboard#token=")
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            listed = await client.get(
                "/v1/compaction/sessions", headers={"authorization": f"Bearer {token}"}
            )
    finally:
        stop.set()
        result = await demo
    assert isinstance(result, Result)
    totals = result.totals
    assert [agent.api for agent in result.agents] == ["responses", "responses"]
    assert totals.errors == 0
    assert totals.compactions.total() >= 1
    # The mock played a reasoning model, strictly: reasoning items went back to it with
    # their calls and answers, before and after compaction, and none was refused.
    assert totals.reasoning_returned > 0
    assert totals.overflows == totals.rejections == 0
    assert totals.forwarded_tokens < totals.sent_tokens
    # Its summaries were asked over the Responses API as the conversation's prefix, each
    # thousands of tokens: counted as such, not as their tool schemas alone.
    assert totals.summary_calls > 0
    assert totals.summary_tokens > 1_000 * totals.summary_calls
    assert all(agent.facts_kept == len(agent.facts) for agent in result.agents)
    assert listed.status_code == 200
    rows = {row["id"]: row for row in listed.json()["data"]}
    assert set(rows) == {agent.session for agent in result.agents}
    for agent in result.agents:
        row = rows[agent.session]
        assert row["turns"] == agent.requests
        assert row["compactions"] == agent.compactions.total()
    assert AGENT_ROW.findall(out.getvalue()) == [
        ("agent-1", "responses"),
        ("agent-2", "responses"),
    ]


async def test_messages_demo_compacts_thinking_agents_with_no_refusal() -> None:
    out = io.StringIO()
    options = Options(agents=2, turns=8, port=0, wait=False, api="messages")
    result = await run(options, out)
    assert isinstance(result, Result)
    totals = result.totals
    assert [agent.api for agent in result.agents] == ["messages", "messages"]
    # The strict mock verified every thinking signature and every tool pair: none refused.
    assert totals.errors == totals.overflows == totals.rejections == 0
    assert totals.compactions.total() >= 1
    assert totals.forwarded_tokens < totals.sent_tokens
    assert totals.summary_calls > 0
    assert all(agent.facts_kept == len(agent.facts) for agent in result.agents)
    assert AGENT_ROW.findall(out.getvalue()) == [("agent-1", "messages"), ("agent-2", "messages")]


async def _printed(
    out: io.StringIO, pattern: re.Pattern[str], demo: asyncio.Task[object]
) -> re.Match[str]:
    """`pattern`'s match in what the demo printed to `out`, once it is there."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while time.monotonic() < deadline and not demo.done():
        found = pattern.search(out.getvalue())
        if found is not None:
            return found
        await asyncio.sleep(0.05)
    demo.result()  # the demo's own error, if it raised one
    raise AssertionError("never printed " + pattern.pattern + ":\n" + out.getvalue())


def test_progress_redraws_its_bar_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out, agents=1, turns=2, live=True)
    progress.start()
    exchange = Exchange(9000, "abcdef0123", "clear_tool_results", 8500, 4200, 0.41)
    progress.turn(TurnReport("agent-1", 1, exchange))
    progress.close()
    text = out.getvalue()
    assert "[###############...............] 1/2 turns" in text
    assert "\r\x1b[Kagent-1   1/2  abcdef01         9,000      0.41  clear_tool_results  " in text
    assert "8,500 -> 4,200\n" in text
    assert re.search(r"\r\x1b\[K1 turn in \d+\.\d s\n$", text)


@pytest.mark.parametrize(
    ("args", "apis"),
    [([], ["chat", "chat"]), (["--api", "both"], ["chat", "responses"])],
    ids=["chat", "both"],
)
def test_module_runs_offline_without_tiktoken_files(
    tmp_path: Path, args: list[str], apis: list[str]
) -> None:
    port = free_port()
    # Nor the package that carries them: an empty one of that name first on the path.
    (tmp_path / "site" / "quicktok").mkdir(parents=True)
    (tmp_path / "site" / "quicktok" / "__init__.py").write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        # No encoding files, and a download that fails at once: the approximate count.
        "TIKTOKEN_CACHE_DIR": str(tmp_path),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    command = [sys.executable, "-m", "proxy.demo", "--agents", "2", "--turns", "8", *args]
    result = subprocess.run(
        [*command, "--no-wait", "--port", str(port)],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROCESS_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    assert "tokenizer approximate" in result.stdout
    assert len(TURN_LINE.findall(result.stdout)) == 16
    totals = _totals_row(result.stdout)
    assert totals["errors"] == "0"
    assert int(totals["compactions"]) >= 1
    assert _number(totals["forwarded"]) < _number(totals["sent"])
    assert [api for _, api in AGENT_ROW.findall(result.stdout)] == apis
    assert f"proxy     http://127.0.0.1:{port}/v1 " in result.stdout
    assert DASHBOARD.search(result.stdout) is None  # --no-wait: the proxy has stopped


@contextmanager
def _demo_process(args: list[str]) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """`compaction-proxy demo ARGS` running, with its output lines arriving on a queue."""
    command = [str(SCRIPT), "demo", *args]
    popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with popen as process:  # closes the pipe and reaps the process, whatever happens
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(process, lines))
        reader.start()
        try:
            yield process, lines
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(PROCESS_TIMEOUT_S)


def _read_lines(process: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    for line in process.stdout or ():
        lines.put(line)


def _wait_for(lines: queue.Queue[str], pattern: re.Pattern[str]) -> re.Match[str]:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        found = pattern.search(line)
        if found is not None:
            return found
    raise AssertionError("never printed " + pattern.pattern + ":\n" + "".join(seen))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_command_serves_the_dashboard_until_signalled(signum: signal.Signals) -> None:
    with _demo_process(["--agents", "1", "--turns", "2", "--port", "0"]) as (process, lines):
        dashboard = _wait_for(lines, DASHBOARD)
        page = httpx.get(dashboard.group(1).partition("#")[0], timeout=30)
        assert page.status_code == 200
        process.send_signal(signum)
        assert process.wait(PROCESS_TIMEOUT_S) == 0


def test_busy_port_exits_1_with_one_line() -> None:
    with taken_port() as port:
        result = subprocess.run(
            [sys.executable, "-m", "proxy.demo", "--no-wait", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"compaction-proxy demo: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize("flag", ["--agents", "--turns"])
def test_counts_below_one_are_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["demo", flag, "0"])
    assert exited.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_an_unknown_api_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["demo", "--api", "assistants"])
    assert exited.value.code == 2
    assert "invalid choice: 'assistants'" in capsys.readouterr().err
