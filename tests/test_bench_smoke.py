"""The benchmark suite still runs: its smallest configuration, end to end, without LiteLLM."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX_TARGETS = (
    "matrix: requests over the provider's window after the first calibration",
    "matrix: compactions landing above the target",
    "matrix: requests per compaction, 8k tool-heavy agent",
    "matrix: user-stated rules, constraints, facts, goals, preferences kept",
)


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
    """Each workload ran at the smoke size's window, without a client-visible error, and
    every matrix target was judged (met or missed: the numbers are the policy's business)."""
    start = report.index("## Effectiveness matrix")
    matrix = report[start : report.index("Typed statements kept", start)]
    rows = [line.split(" | ") for line in matrix.splitlines() if line.startswith("| 8,192 | ")]
    assert {row[1] for row in rows} == {"tool-heavy agent", "chatty assistant", "typed statements"}
    for row in rows:
        calls, errors = int(row[3]), int(row[13])
        assert calls > 0, row
        assert errors == 0, row
    targets = report[report.index("## Targets") :]
    for name in MATRIX_TARGETS:
        assert re.search(re.escape(name) + r".*\*\*(met|MISSED)\*\*", targets), name
