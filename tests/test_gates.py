"""The suite's verdict is the same on every machine: what the coverage gates count, and the
environment the tests run in (tests/gates.py, tests/optional.py, tests/environment.py).

The contexts are checked where they are made: a small suite of its own runs under coverage in
a subprocess, with the suite's conftest as its plugin, and the lines each of its tests reached
are read back by context. The environment is checked the same way: the test that an exported
setting broke runs with that setting exported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import coverage
import pytest

from tests import environment, gates, optional
from tests.redis_server import RedisServer
from tests.servers import COMPACTION_KEY_ENV

ROOT = Path(__file__).resolve().parent.parent
_GATE = re.search(r"--contexts='([^']*)'", (ROOT / "Makefile").read_text(encoding="utf-8"))
assert _GATE is not None
GATE_CONTEXTS = _GATE[1].replace("$$", "$")
"""The contexts the Makefile's gates count (make writes `$` as `$$`)."""

PROBE = """
def plain():
    return "example"  # line 3


def after_optional():
    return "optional"  # line 7


def after_socket():
    return "socket"  # line 11


def drawn():
    return "property"  # line 15


def before_the_switch():
    return "before"  # line 19


def unreachable():
    return "never"  # line 23
"""

SUITE = """
import pytest
from hypothesis import given, strategies as st

import probe
from proxy.adapters.upstream import AiohttpUpstream, UpstreamRequest
from tests import optional
from tests.servers import serve
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

optional.register(optional.Tool("a tool nobody has", lambda: None, "it cannot be had"))
optional.register(optional.Tool("a tool everybody has", lambda: "/bin/sh", "always here"))


def test_an_example_counts():
    probe.plain()


def test_what_runs_before_a_tool_is_asked_for_counts_and_what_runs_after_does_not():
    probe.before_the_switch()
    assert optional.require("a tool everybody has") == "/bin/sh"
    probe.after_optional()


def test_a_missing_tool_skips_the_rest():
    optional.require("a tool nobody has")
    probe.unreachable()


@pytest.fixture
def fixture_that_would_run():
    probe.unreachable()


@pytest.mark.needs("a tool nobody has")
def test_a_needs_marker_skips_before_any_fixture(fixture_that_would_run):
    probe.unreachable()


@pytest.mark.needs("a tool everybody has")
def test_a_needs_marker_makes_the_whole_test_optional():
    probe.after_optional()


async def _events():
    yield b"data: 1\\n\\n"
    yield b"data: 2\\n\\n"


_stream = Starlette(routes=[Route("/x", lambda request: StreamingResponse(_events()))])


async def test_a_stream_read_from_a_socket_leaves_example():
    async with serve(_stream) as url:
        upstream = AiohttpUpstream(url, timeout_s=5)
        await upstream.open()
        try:
            response = await upstream.send(UpstreamRequest("GET", "x", "", []))
            probe.before_the_switch()
            chunks = [chunk async for chunk in response.iter_chunks()]
            response.close()
        finally:
            await upstream.aclose()
    assert b"".join(chunks) == b"data: 1\\n\\ndata: 2\\n\\n"
    probe.after_socket()


@given(st.integers())
def test_a_property_counts_apart(number):
    probe.drawn()
"""


def _lines_by_context(
    tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[int, set[str]]]:
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "test_probe_suite.py").write_text(textwrap.dedent(SUITE))
    data = tmp_path / ".coverage"
    command = [
        sys.executable, "-m", "coverage", "run", f"--data-file={data}",
        f"--include={tmp_path / 'probe.py'}", "-m", "pytest", "-p", "tests.conftest",
        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
        "-q", "-rs", str(tmp_path / "test_probe_suite.py"),
    ]  # fmt: skip
    path = os.pathsep.join([str(tmp_path), str(ROOT)])
    env = {**os.environ, "PYTHONPATH": path, "GATES_BY_TEST": "0", **env}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    covered = coverage.CoverageData(str(data))
    covered.read()
    by_line = covered.contexts_by_lineno(str(tmp_path / "probe.py"))
    return result, {line: set(contexts) for line, contexts in by_line.items()}


def test_each_line_counts_in_the_context_its_test_was_in_when_it_ran(tmp_path: Path) -> None:
    result, contexts = _lines_by_context(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed, 2 skipped" in result.stdout, result.stdout
    assert "a tool nobody has is not available here: it cannot be had" in result.stdout
    assert contexts[3] == {gates.EXAMPLE}
    assert contexts[7] == {gates.OPTIONAL}
    assert contexts[11] == {gates.SOCKET}
    assert contexts[15] == {gates.PROPERTY}
    # Before a tool is asked for, and before a stream's first read, the test still counts.
    assert contexts[19] == {gates.EXAMPLE}
    assert 23 not in contexts  # the skips came first, fixtures included
    assert "coverage contexts (tests/gates.py): 1 example, 1 property, 4 optional, 1 socket" in (
        result.stdout
    )


def test_contexts_can_name_their_tests_and_the_gates_read_them_the_same(tmp_path: Path) -> None:
    result, contexts = _lines_by_context(tmp_path, GATES_BY_TEST="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert contexts[3] == {f"{gates.EXAMPLE}|test_probe_suite.py::test_an_example_counts"}
    assert {context.partition("|")[0] for context in contexts[11]} == {gates.SOCKET}
    counted = re.compile(GATE_CONTEXTS)
    gated = {line for line, named in contexts.items() if any(map(counted.match, named))}
    # The function bodies the gates count (their `def` lines ran at import, context ""):
    assert gated & {3, 7, 11, 15, 19, 23} == {3, 19}


def test_this_test_runs_in_example_and_leaves_it_when_it_asks_for_a_tool() -> None:
    assert gates.running() == gates.EXAMPLE
    optional.find("redis-server")  # found or not, what follows depends on the machine
    assert gates.running() == gates.OPTIONAL
    gates.leave_example(gates.SOCKET)  # a test out of "example" stays where it is
    assert gates.running() == gates.OPTIONAL


def test_a_helper_may_not_ask_for_a_tool_outside_a_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a helper module asks for at import would be counted for no test at all: refused.
    # (Here it asks outside any test, as it would while pytest imports the helper.)
    monkeypatch.setattr(gates, "_running", None)
    with pytest.raises(RuntimeError, match=r"tests\.redis_server asks for an optional tool"):
        RedisServer(tmp_path)


def test_the_environment_loses_the_proxys_settings_the_sdks_keys_and_outbound_proxies() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "TIKTOKEN_CACHE_DIR": "/encodings",
        COMPACTION_KEY_ENV: "an-operators-key",
        "COMPACTION_PROXY_UPSTREAM__BASE_URL": "http://vllm:8000/v1",
        "compaction_proxy_redis__url": "redis://elsewhere",
        "COMPACTION_PROXY_REAL_LLM": "1",
        "OPENAI_API_KEY": "sk-mine",
        "OPENAI_BASE_URL": "http://elsewhere/v1",
        "ANTHROPIC_BASE_URL": "http://elsewhere",
        "HTTPS_PROXY": "http://corp:3128",
        "no_proxy": "internal",
        "PROMETHEUS_MULTIPROC_DIR": "/tmp/metrics",
    }
    cleared = environment.clean(environ)
    assert environ == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "TIKTOKEN_CACHE_DIR": "/encodings",
        "COMPACTION_PROXY_REAL_LLM": "1",  # the suite's own switch for the real model
    }
    assert cleared == sorted(cleared)
    assert len(cleared) == 9


def test_the_suite_itself_runs_without_them() -> None:
    assert not [name for name in os.environ if name.upper().startswith("COMPACTION_PROXY_")
                and name not in environment.SUITE_VARIABLES]  # fmt: skip


def test_an_operators_exported_settings_do_not_change_a_verdict() -> None:
    # The test that failed with a compaction key exported (it asserts the proxy refuses to
    # start without one), run with one exported, and a Redis URL and an upstream beside it.
    exported = {
        **os.environ,
        COMPACTION_KEY_ENV: "an-operators-key-of-32-bytes!!!!",
        "COMPACTION_PROXY_UPSTREAM__BASE_URL": "http://127.0.0.1:9/v1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
        "tests/test_serve_workers.py::test_workers_answering_compaction_need_a_key",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=ROOT, env=exported, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert f"left out of the environment (tests/environment.py): {COMPACTION_KEY_ENV}" in (
        result.stdout
    )


def _run_data(folder: Path, arcs: dict[str, set[tuple[int, int]]]) -> Path:
    """A run's coverage data in `folder` (as if it were a checkout), with `arcs` by context."""
    data = coverage.CoverageData(str(folder / ".coverage"))
    for context, reached in arcs.items():
        data.set_context(context)
        data.add_arcs({str(folder / "proxy/core/plan.py"): reached})
        data.add_arcs({str(folder / "tests/test_x.py"): {(1, 2)}})  # outside the gates
    data.write()
    return folder / ".coverage"


def test_two_runs_are_compared_by_what_their_gates_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
    here = _run_data(tmp_path / "a", {"example": {(1, 2)}, "optional": {(2, 3)}})
    there = _run_data(tmp_path / "b", {"example|tests/t.py::test_t": {(1, 2)}, "socket": {(5, 6)}})
    assert gates.gated_arcs(here) == {("proxy/core/plan.py", 1, 2)}
    assert gates.main([str(here), str(there)]) == 0  # what the other contexts reach differs
    more = _run_data(tmp_path / "c", {"example": {(1, 2), (2, 4)}})
    assert gates.main([str(here), str(more)]) == 1
    assert "> proxy/core/plan.py: 2 -> 4" in capsys.readouterr().out
    assert gates.GATE_CONTEXTS == GATE_CONTEXTS  # the Makefile's
