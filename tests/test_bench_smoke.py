"""The benchmark suite still runs: its smallest configuration, end to end, without LiteLLM."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX_TARGETS = (
    "client-visible errors",
    "provider refusals of broken tool pairing, role order or reasoning items",
    "requests over the provider's window after the first calibration",
    "compactions landing above the target",
    "requests per compaction, 8k tool-heavy agent",
    "user-stated rules, constraints, facts, goals, preferences kept",
)
APIS = ("chat completions", "Responses API")


def test_smoke_run_writes_a_report_with_every_section_and_no_errors(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "bench.suite", "--size", "smoke", "--no-litellm", "--no-profile",
        "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    for section in (
        "## Targets", "## Overhead", "### Streaming", "## Mock check", "## Effectiveness: a",
        "## Effectiveness matrix",
    ):  # fmt: skip
        assert section in report, section
    assert "LiteLLM: not measured: skipped (--no-litellm)" in report
    # Every timed request of every path and case was answered (the tables' last column).
    overhead = report[report.index("## Overhead") : report.index("## Mock check")]
    counts = re.findall(r"\| (\d+) / (\d+) \|$", overhead, flags=re.MULTILINE)
    assert counts
    assert all(errors == "0" and int(total) > 0 for errors, total in counts), counts
    _assert_matrix(report)


def _assert_matrix(report: str) -> None:
    """Each workload ran at the smoke size's window over both APIs, without a client-visible
    error or a strict refusal, and every matrix target was judged per API (met or missed:
    the numbers are the policy's business)."""
    start = report.index("## Effectiveness matrix")
    matrix = report[start : report.index("The same cells side by side", start)]
    rows = [line.split(" | ") for line in matrix.splitlines() if line.startswith("| 8,192 | ")]
    workloads = {"tool-heavy agent", "chatty assistant", "typed statements"}
    assert {(row[1], row[3]) for row in rows} == {
        (workload, api) for workload in workloads for api in ("chat", "responses")
    }
    for row in rows:
        calls, errors, refusals = int(row[4]), int(row[14]), int(row[15])
        assert calls > 0, row
        assert errors == 0, row
        assert refusals == 0, row
    targets = report[report.index("## Targets") :]
    for api in APIS:
        for name in MATRIX_TARGETS:
            pattern = re.escape(f"matrix, {api}: {name}") + r".*\*\*(met|MISSED)\*\*"
            assert re.search(pattern, targets), (api, name)
