"""`compaction-proxy inspect`: a dry run on request files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import EXIT_INPUT, main
from proxy.mock_upstream import MockUpstream, Reply
from tests.builders import assistant, assistant_calls, system, tool_result, user
from tests.servers import free_port, serve_in_thread

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def agent_request(turns: int = 40) -> dict[str, Any]:
    """A coding agent's request after `turns` tool calls reading large files, answered, and
    its next ask (the calls are history: a running turn's results are cut, not cleared)."""
    messages = [system("You are a coding agent."), user("Fix the failing test in src/app.py.")]
    for i in range(turns):
        messages += [
            assistant_calls(f"call_{i}", name="read_file", arguments={"path": f"src/m{i}.py"}),
            tool_result(f"call_{i}", f"# module {i}\n" + "def f():\n    return 1\n" * 200),
        ]
    messages += [assistant("I found it."), user("Now run the tests.")]
    return {"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS, "temperature": 0}


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(agent_request()))
    return path


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args, "--config", "/dev/null"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_report_of_a_compaction(
    request_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = inspect(capsys, str(request_file), "--context-window", "32000", "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {
        "tokens_before",
        "tokens_after",
        "pressure_before",
        "strategy_applied",
        "messages",
    }
    assert report["pressure_before"] > 0.75
    assert report["strategy_applied"] == "clear_tool_results"
    assert report["tokens_after"] < report["tokens_before"] / 2
    assert report["messages"][:2] == agent_request()["messages"][:2]


def test_text_report(request_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = inspect(capsys, str(request_file), "--context-window", "32000")
    assert code == 0
    assert "window: 32000 tokens (--context-window)" in out
    assert "tool_results" in out
    assert "placeholders" in out
    assert "action: clear_tool_results" in out
    assert "tool result cleared to save context" in out


def test_under_the_trigger_nothing_happens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "small.json"
    path.write_text(
        json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    )
    code, out, _ = inspect(capsys, str(path))
    assert code == 0
    # A well-known model: its window is known offline, and no upstream is asked for it.
    assert "window: 128000 tokens, output reserve: 4096" in out
    assert "(compacts at 85%, down to 45%)" in out
    assert "action: none\n" in out
    assert "asked" not in out


def test_summary_without_url_truncates(
    request_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = (str(request_file), "--context-window", "32000", "--strategy", "summarize")
    code, out, _ = inspect(capsys, *args, "--force")
    assert code == 0
    assert "action: truncate" in out
    # The proxy's own warning, as `serve` logs it: the summarizer could not be used.
    assert "summary failed, truncating instead" in out
    assert "give --summary-url (or summary_brain.base_url) to summarize" in out


@pytest.fixture
def summarizer() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream(default=Reply(content="## Goal\n- fix the failing test"))
    with serve_in_thread(upstream.app) as base_url:
        yield upstream, f"{base_url}/v1"


def test_forced_summary_waits_for_the_summarizer(
    request_file: Path, capsys: pytest.CaptureFixture[str], summarizer: tuple[MockUpstream, str]
) -> None:
    upstream, url = summarizer
    args = (str(request_file), "--context-window", "32000", "--strategy", "summarize")
    code, out, _ = inspect(capsys, *args, "--summary-url", url, "--force", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["strategy_applied"] == "summarize"
    asked = upstream.last.json()
    assert asked["model"] == "gpt-4o-mini"
    assert "The turns to summarize" in asked["messages"][1]["content"]
    task = report["messages"][1]["content"]
    assert "- fix the failing test" in task
    assert "src/m0.py" in task  # a path the summary lost, appended from the ledger


def test_at_the_trigger_the_summary_is_written_for_the_next_compaction(
    request_file: Path, capsys: pytest.CaptureFixture[str], summarizer: tuple[MockUpstream, str]
) -> None:
    # As `serve` does: no request waits for a summary; this one is truncated at once, and
    # what it dropped is summarized in the background, for the next compaction.
    upstream, url = summarizer
    args = (str(request_file), "--context-window", "32000", "--strategy", "summarize")
    code, out, _ = inspect(capsys, *args, "--summary-url", url)
    assert code == 0
    assert "action: truncate" in out
    assert "--force waits for the summary" in out
    assert "- fix the failing test" not in out
    # In parts: the dropped span is longer than the summarizer's window.
    summaries = [r.json()["messages"][1]["content"] for r in upstream.requests]
    assert summaries
    assert all("The turns to summarize" in summary for summary in summaries)


def test_summarizer_failure_truncates(
    request_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = (str(request_file), "--context-window", "32000", "--strategy", "summarize")
    code, out, _ = inspect(capsys, *args, "--summary-url", url)
    assert code == 0
    assert "action: truncate" in out
    assert "failed" in out


def test_summarizer_credentials_in_its_url_go_as_basic_auth_and_are_never_shown(
    request_file: Path, capsys: pytest.CaptureFixture[str], summarizer: tuple[MockUpstream, str]
) -> None:
    upstream, url = summarizer
    with_secret = url.replace("http://", "http://brain:s3cret@")
    args = (str(request_file), "--context-window", "32000", "--strategy", "summarize")
    code, out, _ = inspect(capsys, *args, "--summary-url", with_secret, "--json")
    assert code == 0
    assert ("authorization", "Basic YnJhaW46czNjcmV0") in upstream.last.headers
    dead = f"http://brain:s3cret@127.0.0.1:{free_port()}/v1"
    code, out, err = inspect(capsys, *args, "--summary-url", dead)
    assert "failed" in out
    assert "brain:***@" in out
    assert "s3cret" not in out + err


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("{]", "is not a chat completion request")],
)
def test_unreadable_request_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    code, _, err = inspect(capsys, str(path))
    assert code == EXIT_INPUT
    assert message in err


def responses_request(turns: int = 40) -> dict[str, Any]:
    """The same agent on the Responses API: instructions, then items."""
    items: list[Any] = [{"role": "user", "content": "Fix the failing test in src/app.py."}]
    for i in range(turns):
        items += [
            {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "gAAA" * 8},
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"src/m{i}.py"}),
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{i}",
                "output": f"# module {i}\n" + "def f():\n    return 1\n" * 200,
            },
        ]
    # Answered, and the next ask: the calls are history (a running turn's are cut).
    items += [
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "I found it."}]},
        {"role": "user", "content": "Now run the tests."},
    ]  # fmt: skip
    tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
    return {"model": "gpt-4o-mini", "instructions": "You are a coding agent.", "input": items,
            "tools": tools}  # fmt: skip


def test_a_responses_api_request_is_inspected_and_given_back_as_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "responses.json"
    path.write_text(json.dumps(responses_request()))
    code, out, _ = inspect(capsys, str(path), "--context-window", "32000", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["strategy_applied"] == "clear_tool_results"
    assert report["tokens_after"] < report["tokens_before"] / 2
    assert report["messages"][0] == {"role": "system", "content": "You are a coding agent."}
    sent = report["input"]
    assert sent[0] == responses_request()["input"][0]
    assert sum(item.get("type") == "reasoning" for item in sent) == 40  # kept, with their calls
    code, _, err = inspect(capsys, str(_written(tmp_path, '{"input": 3}')))
    assert code == EXIT_INPUT
    assert "is not a Responses API request" in err


def _written(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "written.json"
    path.write_text(content)
    return path


def test_force_compacts_under_the_trigger_as_the_operator_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _written(tmp_path, json.dumps(agent_request(turns=8)))
    code, out, _ = inspect(capsys, str(path), "--json")
    assert code == 0
    untouched = json.loads(out)
    assert untouched["strategy_applied"] is None
    assert untouched["tokens_after"] == untouched["tokens_before"]
    args = ("--force", "--strategy", "clear_tool_results", "--json")
    code, out, _ = inspect(capsys, str(path), *args)
    assert code == 0
    forced = json.loads(out)
    assert forced["strategy_applied"] == "clear_tool_results"
    assert forced["tokens_before"] == untouched["tokens_before"]
    assert forced["tokens_after"] < forced["tokens_before"]
    assert forced["messages"][:2] == agent_request()["messages"][:2]


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockUpstream]:
    upstream = MockUpstream(window=16384, models=("local-model",))
    with serve_in_thread(upstream.app) as base_url:
        monkeypatch.setenv("COMPACTION_PROXY_UPSTREAM__BASE_URL", f"{base_url}/v1")
        yield upstream


def test_the_upstream_is_asked_for_the_window_and_sent_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: MockUpstream
) -> None:
    request = {**agent_request(turns=12), "model": "local-model", "stream": True}
    code, out, _ = inspect(capsys, str(_written(tmp_path, json.dumps(request))))
    assert code == 0
    assert "window: 16384 tokens, output reserve: 4096" in out
    assert "/v1/models answered 200" in out
    assert "action: clear_tool_results" in out
    assert [(r.method, r.path) for r in provider.requests] == [("GET", "/v1/models")]


def test_offline_an_unknown_model_gets_the_default_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("COMPACTION_PROXY_UPSTREAM__BASE_URL", dead)
    request = {"model": "local-model", "messages": [{"role": "user", "content": "hi"}]}
    code, out, _ = inspect(capsys, str(_written(tmp_path, json.dumps(request))))
    assert code == 0
    assert "window: 128000 tokens" in out
    assert f"asked {dead}/models: The upstream at {dead} could not be reached" in out
    assert "action: none" in out


def test_a_request_the_proxy_would_refuse_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instructions = system("Follow these rules. " * 3000)
    request = {"model": "gpt-4o-mini", "messages": [instructions, user("hi")]}
    path = _written(tmp_path, json.dumps(request))
    code, _, err = inspect(capsys, str(path), "--context-window", "4096")
    assert code == EXIT_INPUT
    assert "serve would answer 400 (context_length_exceeded)" in err


def test_the_configured_hooks_run_as_in_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "hooks:\n"
        "  - on: turn_start\n"
        "    condition: {type: tool_calls, threshold: 3}\n"
        "    action: {type: inject_message, role: system, message: Stay on the failing test.}\n"
    )
    path = _written(tmp_path, json.dumps(agent_request(turns=4)))
    code = main(["inspect", str(path), "--config", str(config), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["strategy_applied"] is None
    assert report["messages"][-1] == {"role": "system", "content": "Stay on the failing test."}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--context-window", "0"), "invalid option: context_window: Input should be greater"),
        (("--summary-url", "ftp://brain:s3cret@host/v1"), "summary_brain.base_url: Value error"),
    ],
)
def test_an_option_the_settings_refuse_exits_1_without_its_value(
    request_file: Path, capsys: pytest.CaptureFixture[str], option: tuple[str, str], message: str
) -> None:
    code, out, err = inspect(capsys, str(request_file), *option)
    assert code == EXIT_INPUT
    assert message in err
    assert "s3cret" not in out + err


def test_a_request_whose_history_the_provider_keeps_is_not_a_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = {"model": "gpt-4o-mini", "previous_response_id": "resp_1", "input": "go on"}
    code, _, err = inspect(capsys, str(_written(tmp_path, json.dumps(request))))
    assert code == EXIT_INPUT
    assert "serve would not compact this request (server_state)" in err


def messages_request(turns: int = 40) -> dict[str, Any]:
    """The same agent on the Messages API, as Claude Code sends it: system blocks, thinking
    before each call, every result in the next user message."""
    messages: list[Any] = [{"role": "user", "content": "Fix the failing test in src/app.py."}]
    for i in range(turns):
        thinking = {"type": "thinking", "thinking": f"Read m{i}.", "signature": f"sig{i}=="}
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file",
                "input": {"path": f"src/m{i}.py"}}  # fmt: skip
        output = f"# module {i}\n" + "def f():\n    return 1\n" * 200
        messages += [
            {"role": "assistant", "content": [thinking, call]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output}]},
        ]  # fmt: skip
    # Answered, and the next ask: the calls are history (a running turn's are cut).
    messages[-1]["content"].append({"type": "text", "text": "Now run the tests."})
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    return {"model": "claude-sonnet-4-6", "max_tokens": 4096,
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": messages, "tools": tools}  # fmt: skip


def test_a_messages_api_request_is_inspected_and_given_back_as_it_would_be_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages_request()))
    code, out, _ = inspect(capsys, str(path), "--context-window", "32000", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["strategy_applied"] == "clear_tool_results"
    assert report["tokens_after"] < report["tokens_before"] / 2
    assert report["messages"][0]["role"] == "system"
    assert not any("_source" in message for message in report["messages"])
    sent = report["forwarded"]
    assert sent["system"] == [{"type": "text", "text": "You are a coding agent."}]
    assert sent["messages"][0] == messages_request()["messages"][0]
    thinking = [b for m in sent["messages"] if m["role"] == "assistant" for b in m["content"]
                if b["type"] == "thinking"]  # fmt: skip
    assert len(thinking) == 40  # kept, byte for byte, with their calls
    assert thinking[0] == messages_request()["messages"][1]["content"][0]
    code, out, _ = inspect(capsys, str(path), "--context-window", "32000")
    assert code == 0
    assert "action: clear_tool_results" in out
    code, _, err = inspect(capsys, str(_written(tmp_path, '{"system": "s", "messages": 3}')))
    assert code == EXIT_INPUT
    assert "is not a Messages API request" in err


@pytest.mark.parametrize(
    "body",
    [
        {"model": "claude-haiku-4-5", "stream": True,
         "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]},
    ],
)  # fmt: skip
def test_a_messages_api_request_is_told_by_its_model_or_its_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any]
) -> None:
    path = _written(tmp_path, json.dumps(body))
    code, out, err = inspect(capsys, str(path), "--context-window", "32000", "--json")
    assert code == 0, err
    assert "forwarded" in json.loads(out)
