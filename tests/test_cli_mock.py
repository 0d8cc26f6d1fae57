"""`compaction-proxy mock`: the mock provider on its own, as a process a user starts."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.servers import proxy_process, taken_port

SCRIPT = Path(sys.executable).parent / "compaction-proxy"
CONSOLE: tuple[str, ...] = (str(SCRIPT), "mock")
MODULE: tuple[str, ...] = (sys.executable, "-m", "proxy.mock_upstream")
START_TIMEOUT_S = 60
EXIT_TIMEOUT_S = 30
LISTENING = re.compile(r"^compaction-proxy mock: .* at (http://127\.0\.0\.1:\d+/v1) \(")
ANSWER = "Hello from the mock upstream."


@contextmanager
def mock_process(
    args: list[str], command: tuple[str, ...] = CONSOLE
) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """The mock running as its own process on a free port: the process, its base URL (with
    `/v1`) and the line it printed at start."""
    popen = subprocess.Popen(
        [*command, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with popen as process:  # closes the pipes and reaps the process, whatever happens
        try:
            line = _first_line(process)
            found = LISTENING.match(line)
            assert found is not None, f"printed {line!r}"
            yield process, found.group(1), line
        finally:
            if process.poll() is None:
                process.kill()


def _first_line(process: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.put(stdout.readline()))
    reader.start()
    try:
        return lines.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        raise AssertionError("the mock printed nothing") from None
    finally:
        if reader.is_alive():
            process.kill()  # so the reader's readline returns
        reader.join(EXIT_TIMEOUT_S)


def _sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-no-key-needed", base_url=base_url, max_retries=0)


def _long_conversation(pairs: int) -> list[Any]:
    """A chat history of `pairs` user and assistant turns of about 120 tokens each."""
    messages: list[Any] = [{"role": "system", "content": "You are a careful assistant."}]
    for turn in range(pairs):
        remark = " ".join(f"step {turn}.{n} of the migration went through" for n in range(20))
        messages += [
            {"role": "user", "content": f"Turn {turn}: {remark}"},
            {"role": "assistant", "content": f"Noted turn {turn}: {remark}"},
        ]
    messages.append({"role": "user", "content": "What is left to do?"})
    return messages


def test_sdk_gets_chat_and_responses_answers() -> None:
    with mock_process([]) as (_, base_url, line), _sdk(base_url) as sdk:
        chat = sdk.chat.completions.create(
            model="mock-model", messages=[{"role": "user", "content": "Hi"}]
        )
        chunks = sdk.chat.completions.create(
            model="mock-model", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        response = sdk.responses.create(model="mock-model", input="Hi")
        models = [model.id for model in sdk.models.list()]
    assert chat.choices[0].message.content == ANSWER
    assert chat.usage is not None
    assert chat.usage.prompt_tokens > 0
    assert streamed == ANSWER
    assert response.output_text == ANSWER
    assert models == ["mock-model"]
    assert "no window" in line
    assert line.endswith("Ctrl-C stops it\n")


def test_window_refuses_an_oversized_request_with_openais_400() -> None:
    with mock_process(["--window", "1000"]) as (_, base_url, line), _sdk(base_url) as sdk:
        small = sdk.chat.completions.create(
            model="mock-model", messages=[{"role": "user", "content": "Hi"}]
        )
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.chat.completions.create(model="mock-model", messages=_long_conversation(10))
        listed = httpx.get(f"{base_url}/models").json()["data"][0]
    assert small.choices[0].message.content == ANSWER
    assert refused.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in refused.value.message
    assert listed["context_length"] == 1000  # so a proxy in front can read the window
    assert "a 1,000-token window" in line


def test_agent_plays_tool_calls_when_tools_are_offered() -> None:
    tool: Any = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    with mock_process(["--agent", "--strict"]) as (_, base_url, line), _sdk(base_url) as sdk:
        reply = sdk.chat.completions.create(
            model="mock-model", messages=[{"role": "user", "content": "Fix it"}], tools=[tool]
        )
    calls = reply.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls if call.type == "function"] == ["read_file"]
    assert "the demo's tool-calling agent" in line
    assert "strict about tool pairing" in line


def test_proxy_in_front_of_the_mock_compacts_what_the_mock_would_refuse() -> None:
    """The README's two terminals: the mock, and `serve --upstream` pointed at it."""
    messages = _long_conversation(30)
    with mock_process(["--window", "4000"]) as (_, mock_url, _line):
        with _sdk(mock_url) as direct, pytest.raises(openai.BadRequestError):
            direct.chat.completions.create(model="mock-model", messages=messages)
        env = {"COMPACTION_PROXY_LOG__LEVEL": "warning"}
        with (
            proxy_process(["--config", "/dev/null", "--upstream", mock_url], env) as proxy_url,
            _sdk(f"{proxy_url}/v1") as sdk,
        ):
            raw = sdk.chat.completions.with_raw_response.create(
                model="mock-model", messages=messages
            )
    assert raw.status_code == 200
    assert raw.headers["x-compaction-applied"] != "none"
    assert raw.parse().choices[0].message.content == ANSWER


@pytest.mark.parametrize(
    ("command", "signum"),
    [(CONSOLE, signal.SIGTERM), (CONSOLE, signal.SIGINT), (MODULE, signal.SIGTERM)],
    ids=["console-SIGTERM", "console-SIGINT", "module-SIGTERM"],
)
def test_signal_ends_it_with_code_0(command: tuple[str, ...], signum: signal.Signals) -> None:
    with mock_process([], command) as (process, base_url, _line):
        assert httpx.get(f"{base_url}/models").status_code == 200
        process.send_signal(signum)
        assert process.wait(EXIT_TIMEOUT_S) == 0
        assert process.stderr is not None
        assert process.stderr.read() == ""


def test_busy_port_exits_1_with_one_line() -> None:
    with taken_port() as port:
        result = subprocess.run(
            [*CONSOLE, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
    assert result.returncode == 1
    assert result.stderr == (
        f"compaction-proxy mock: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


@pytest.mark.parametrize(
    ("flag", "value", "complaint"),
    [
        ("--window", "0", "must be at least 1"),
        ("--latency", "-1", "must be 0 or more seconds"),
        ("--summary-quality", "great", "invalid choice: 'great'"),
    ],
)
def test_bad_values_are_refused(
    flag: str, value: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from proxy.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["mock", flag, value])
    assert exited.value.code == 2
    assert complaint in capsys.readouterr().err
