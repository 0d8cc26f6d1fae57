"""A small cell of each of issue 38's client shapes runs with every one of its targets judged;
with a window where nothing compacts, each makes its planned calls (the "unbounded" count the
no-repeat target compares with)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bench.cases.matrix import CellSpec, run_cell
from bench.progress import Progress
from bench.targets import MATRIX_TARGETS
from bench.workloads import BUILDERS, FACTS, Plan, WorkloadKey
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE, TokenCounter


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders(names=(O200K_BASE,))


@pytest.fixture(scope="module")
def counter(encoders: Encoders) -> TokenCounter:
    return TokenCounter(encoders.by_name[O200K_BASE])


SMALL: tuple[tuple[WorkloadKey, int, int], ...] = (
    ("aider", 8_192, 8),
    ("paste-per-turn", 8_192, 15),
    ("schema-heavy", 6_144, 20),
    ("fixed-heavy-pastes", 16_384, 9),
)


async def test_a_small_cell_of_each_shape_runs_and_its_own_targets_are_judged(
    tmp_path: Path, encoders: Encoders, counter: TokenCounter
) -> None:
    progress = Progress(0, stream=io.StringIO())
    for workload, window, calls in SMALL:
        spec = CellSpec(window, workload, "poor", "chat", stream=workload == "aider")
        built = BUILDERS[workload](Plan(round(2.5 * window), calls, window=window), counter)
        cell = await run_cell(spec, built, encoders=encoders, work=tmp_path, progress=progress)
        assert cell.client_errors == 0, (cell.name, cell.error_samples)
        assert cell.strict_rejections == 0, cell.name
        assert cell.running_verbatim is not None
        assert cell.running_verbatim.judged > 0, cell.name
        own = [t for t in MATRIX_TARGETS if t.applies(cell) and t.short != "summary-cache"]
        assert len(own) > 5, cell.name
        for target in own:  # met or missed: the numbers are the proxy's business
            assert target.check(cell)[0] is not None, (cell.name, target.short)


@pytest.mark.parametrize("workload", ["long-turn", "paste-per-turn"])
async def test_with_a_window_where_nothing_compacts_each_turn_makes_its_planned_calls(
    workload: WorkloadKey, tmp_path: Path, encoders: Encoders, counter: TokenCounter
) -> None:
    # An 8k cell's session (the sizes follow the window) against a window of a million.
    spec = CellSpec(1_048_576, workload, "poor", "chat")
    built = BUILDERS[workload](Plan(2 * 8_192, 120, window=8_192), counter)
    cell = await run_cell(
        spec, built, encoders=encoders, work=tmp_path, progress=Progress(0, stream=io.StringIO())
    )
    assert cell.compactions == 0
    assert cell.model_calls == cell.planned_calls == built.calls
    assert cell.unfinished == 0
    assert cell.newest_whole is not None
    assert cell.newest_whole.held == cell.newest_whole.judged > 0
    if workload == "long-turn":
        assert cell.calls_named is not None
        assert cell.calls_named.held == cell.calls_named.judged
    else:
        assert cell.kept() == (len(FACTS), len(FACTS))
