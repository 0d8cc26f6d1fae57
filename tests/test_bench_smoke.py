"""The benchmark suite still runs: its smallest configuration, end to end, without LiteLLM."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

from bench.cases.matrix import CellSpec, run_cell
from bench.config import Api
from bench.progress import Progress
from bench.targets import MATRIX_TARGETS as TARGETS
from bench.workloads import BUILDERS, Plan, WorkloadKey
from proxy.adapters.tokenizer import load_encoders
from proxy.core.policy import Strategy
from proxy.core.tokens import O200K_BASE, TokenCounter
from tests import optional

ROOT = Path(__file__).resolve().parent.parent
MATRIX_TARGETS = (
    "client-visible errors",
    "provider refusals of broken tool pairing, role order or reasoning items",
    "requests over the provider's window after the first calibration",
    "compactions landing above the target",
    "requests per compaction, 8k tool-heavy agent",
    "user-stated rules, constraints, facts, goals, preferences kept",
)
APIS = (
    "chat completions",
    "Responses API",
    "Responses API, the client compacting through /v1/responses/compact",
    "Messages API",
)
HANG_S = 600
"""Only a guard against a hung bench, never a speed target (those are the bench's own ratios):
alone on a shared two-core machine the smoke suite took 136 s, beside the other test worker
more than 120."""
THINKING_TARGET = "thinking blocks forwarded byte-identical to those the provider issued"


def test_smoke_run_writes_a_report_with_every_section_and_no_errors(tmp_path: Path) -> None:
    # The suite's store load and growing histories run on a private redis-server.
    optional.require("redis-server")
    command = [
        sys.executable, "-m", "bench.suite", "--size", "smoke", "--no-litellm", "--no-profile",
        "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    for section in (
        "## Targets", "## Overhead", "### Streaming", "## Mock check", "## Effectiveness: a",
        "## Effectiveness matrix", "## Agents with growing histories",
    ):  # fmt: skip
        assert section in report, section
    assert "LiteLLM: not measured: skipped (--no-litellm)" in report
    # Every timed request of every path and case was answered (the tables' last column).
    overhead = report[report.index("## Overhead") : report.index("## Mock check")]
    counts = re.findall(r"\| (\d+) / (\d+) \|$", overhead, flags=re.MULTILINE)
    assert counts
    assert all(errors == "0" and int(total) > 0 for errors, total in counts), counts
    _assert_growth(report)
    _assert_matrix(report)


def _assert_growth(report: str) -> None:
    """Every agent's every step answered, direct, through one worker and two."""
    start = report.index("## Agents with growing histories")
    section = report[start : report.index("\n## ", start + 1)]
    rows = [
        line.split(" | ")
        for line in section.splitlines()
        if line.startswith(("| direct |", "| proxy |", "| proxy-2-workers |"))
    ]
    assert {row[0] for row in rows} == {"| direct", "| proxy", "| proxy-2-workers"}
    assert all(int(row[1]) > 0 and row[2] == "0" for row in rows), rows


def _assert_matrix(report: str) -> None:
    """Each workload ran at the smoke size's window over every API (the Messages API with
    thinking and without), without a client-visible error or a strict refusal, and every
    matrix target was judged per API (met or missed: the numbers are the policy's business),
    the thinking signatures over the Messages API."""
    start = report.index("## Effectiveness matrix")
    matrix = report[start : report.index("The same cells side by side", start)]
    rows = [line.split(" | ") for line in matrix.splitlines() if line.startswith("| 8,192 | ")]
    workloads = {"tool-heavy agent", "chatty assistant", "typed statements"}
    expected = {(w, api) for w in workloads for api in ("chat", "responses", "messages")}
    expected |= {(f"{workload}, client compacting", "responses") for workload in workloads}
    expected |= {(f"{workload}, thinking", "messages") for workload in workloads}
    assert {(row[1], row[3]) for row in rows} == expected
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
    pattern = re.escape(f"matrix, Messages API: {THINKING_TARGET}") + r".*\*\*(met|MISSED)\*\*"
    assert re.search(pattern, targets)


# Issue 21's workloads, which the smoke size leaves out of the suite's run: each is built,
# and one small cell of each runs here (chat completions, the useless summarizer).
SMALL_CELLS: tuple[tuple[WorkloadKey, int, Strategy | None], ...] = (
    ("labelled", 4_096, None),
    ("artifacts", 4_096, None),
    ("oversized-result", 16_384, "truncate"),
    ("fixed-heavy", 16_384, None),
)


def test_the_issue_21_workloads_plant_what_they_check() -> None:
    counter = TokenCounter(load_encoders(names=(O200K_BASE,)).by_name[O200K_BASE])
    plan = Plan(history_tokens=12_000, max_calls=40)
    labelled = BUILDERS["labelled"](plan, counter)
    assert [s.key for s in labelled.stale] == ["Postgres 15 in us-west-2", "Steps 1-2 of 5", "$500"]
    assert {s.key for s in labelled.checks} >= {"MySQL 8 in us-east-1", "$700", "Email Bob"}
    artifacts = BUILDERS["artifacts"](plan, counter)
    results = "\n".join(text or "" for turn in artifacts.turns for text in turn.texts)
    users = "\n".join(turn.text for turn in artifacts.turns)
    for check in artifacts.checks:  # in a tool result's first line, never in the user's words
        assert check.key in results, check.key
        assert check.key not in users, check.key
    listing = BUILDERS["oversized-result"](plan, counter)
    assert listing.result_items == len(json.loads(listing.turns[0].texts[0] or "")) == 4_000
    heavy = BUILDERS["fixed-heavy"](plan, counter)
    head = counter.request({"messages": [{"role": "system", "content": heavy.system}],
                            "tools": list(heavy.tools)})  # fmt: skip
    assert 7_000 <= head <= 8_000
    assert heavy.running_turn


async def test_a_small_cell_of_each_issue_21_workload_runs_and_every_target_is_judged(
    tmp_path: Path,
) -> None:
    encoders = load_encoders(names=(O200K_BASE,))
    counter = TokenCounter(encoders.by_name[O200K_BASE])
    progress = Progress(0, stream=io.StringIO())
    for workload, window, strategy in SMALL_CELLS:
        spec = CellSpec(window, workload, "poor", "chat", strategy)
        built = BUILDERS[workload](Plan(round(1.5 * window), 12), counter)
        cell = await run_cell(spec, built, encoders=encoders, work=tmp_path, progress=progress)
        assert cell.model_calls > 0, cell.name
        assert cell.client_errors == 0, (cell.name, cell.error_samples)
        assert cell.strict_rejections == 0, cell.name
        judged = [t for t in TARGETS if t.applies(cell)]
        assert len(judged) > 4, cell.name  # one target of its own at least
        for target in judged:  # met or missed: the numbers are the proxy's business
            assert target.check(cell)[0] is not None, (cell.name, target.short)


# Issue 22's workload: its values are in files only a tool reads, its questions come last.
def test_the_recall_workload_plants_its_values_in_files_only_and_asks_last() -> None:
    counter = TokenCounter(load_encoders(names=(O200K_BASE,)).by_name[O200K_BASE])
    for plan in (Plan(history_tokens=12_000, max_calls=40), Plan(6_000, 12)):
        built = BUILDERS["recall"](plan, counter)
        read = [json.loads(arguments)["path"] for _, arguments in built.script.calls]
        questions = [turn.text for turn in built.turns[-len(built.asked) :]]
        assert questions == [asked.question for asked in built.asked]
        users = "\n".join(turn.text for turn in built.turns)
        for asked in built.asked:
            assert asked.line in built.files[asked.path]
            assert asked.value not in users
            assert read.count(asked.path) == 1, asked.path


async def test_a_small_recall_cell_runs_streamed_and_every_target_is_judged(
    tmp_path: Path,
) -> None:
    encoders = load_encoders(names=(O200K_BASE,))
    counter = TokenCounter(encoders.by_name[O200K_BASE])
    progress = Progress(0, stream=io.StringIO())
    built = BUILDERS["recall"](Plan(round(2.5 * 4_096), 24), counter)
    variants: tuple[tuple[Api, bool, bool], ...] = (
        ("chat", True, True), ("responses", True, True), ("chat", False, False),
    )  # fmt: skip
    for api, stream, recall in variants:
        spec = CellSpec(4_096, "recall", "poor", api, None, stream, recall)
        cell = await run_cell(spec, built, encoders=encoders, work=tmp_path, progress=progress)
        assert cell.client_errors == 0, (cell.name, cell.error_samples)
        assert len(cell.answers) == len(built.asked), cell.name
        assert cell.unknown_calls == 0, cell.name
        judged = [t for t in TARGETS if t.applies(cell)]
        assert {t.short for t in judged} >= {"recall-hidden", "recall-stable"}, cell.name
        for target in judged:
            assert target.check(cell)[0] is not None, (cell.name, target.short)


def test_the_growth_bench_streams_every_answer_when_asked(tmp_path: Path) -> None:
    """`--stream`: the agents' answers come streamed, through the proxy as directly, and every
    step of every case is answered."""
    command = [
        sys.executable, "-m", "bench.growth", "--steps", "6", "--agents", "2", "--rounds", "1",
        "--no-workers", "--stream", "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "every answer streamed" in done.stdout
    assert "errors, e.g." not in done.stdout
    fleet = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")]
    rows = {row[0]: row for row in fleet if row[0] in ("| direct", "| proxy")}
    assert set(rows) == {"| direct", "| proxy"}
    assert all(row[1] == "12" and row[2] == "0" for row in rows.values()), rows


def test_the_growth_agents_ask_for_a_stream_only_when_told() -> None:
    from bench.growth import agent_bodies

    streamed = json.loads(agent_bodies("a", steps=2, model="m", stream=True)[-1])
    whole = json.loads(agent_bodies("a", steps=2, model="m")[-1])
    assert streamed["stream"] is True
    assert "stream" not in whole
    assert streamed["messages"] == whole["messages"]
