"""The `compaction-proxy` command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.cli import EXIT_CONFIG, main
from tests.servers import proxy_process

SCRIPT = Path(sys.executable).parent / "compaction-proxy"


def test_bad_value_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("upstream:\n  timeout_s: soon\n")
    assert main(["serve", "--config", str(config)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "upstream.timeout_s" in err


def test_bad_flag_value_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", "/dev/null", "--port", "70000"]) == EXIT_CONFIG
    assert "server.port" in capsys.readouterr().err


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("context: {keep_recnt: 3}\n")
    result = subprocess.run(
        [str(SCRIPT), "serve", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "compaction-proxy: invalid configuration: context.keep_recnt: unknown key"
    )


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--config", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "cannot read config file" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_uses_flags_over_file_and_env(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("upstream: {base_url: 'http://127.0.0.1:9/v1'}\nlog: {level: warning}\n")
    env = {"COMPACTION_PROXY_REDIS__URL": "redis://127.0.0.1:9/0"}
    with proxy_process(
        ["--config", str(config), "--redis", "", "--log-level", "ERROR"], env
    ) as url:
        # --redis "" beat the environment: the embedded store is ready, Redis would not be.
        assert httpx.get(f"{url}/readyz").status_code == 200
        # The upstream from the file is used (and is unreachable): 502, in the OpenAI shape.
        response = httpx.post(f"{url}/v1/chat/completions", json={"messages": []})
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_unreachable"
