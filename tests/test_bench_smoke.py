"""The benchmark suite still runs: its smallest configuration, end to end, without LiteLLM."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_smoke_run_writes_a_report_with_every_section_and_no_errors(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "bench.suite", "--size", "smoke", "--no-litellm", "--no-profile",
        "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    for section in ("## Targets", "## Overhead", "### Streaming", "## Mock check", "## Effect"):
        assert section in report, section
    assert "LiteLLM: not measured: skipped (--no-litellm)" in report
    # Every timed request of every path and case was answered (the tables' last column).
    overhead = report[report.index("## Overhead") : report.index("## Mock check")]
    counts = re.findall(r"\| (\d+) / (\d+) \|$", overhead, flags=re.MULTILINE)
    assert counts
    assert all(errors == "0" and int(total) > 0 for errors, total in counts), counts
