"""The benchmark suite: the proxy's overhead and effectiveness, measured, with LiteLLM's proxy
on the same cases. `make bench` runs it; `make bench-quick` a smaller run.

    python -m bench.suite [--size default|quick|smoke] [--no-litellm] [--no-profile]
                          [--no-overhead] [--no-sessions] [--no-store-load] [--no-growth]
                          [--no-matrix | --matrix-only] [--workload NAME ...] [--api NAME ...]
                          [--upstream-latency-ms 0] [--chunks 64] [--out bench/results]

1. Overhead: a fast mock upstream (`bench/mock_server.py`), `compaction-proxy serve` and
   LiteLLM's proxy in front of it, each its own process; the same requests sent directly and
   through each proxy, interleaved in rounds (`bench/cases/overhead.py`).
2. Effectiveness: a long scripted agent session through the proxy against a mock with a small
   window, and straight to the mock (`bench/cases/session.py`).
3. The effectiveness matrix: windows x workloads x summarizers x APIs (chat completions, the
   Responses API and Anthropic's Messages API), each cell a scripted session through a proxy
   on its default settings (`bench/cases/matrix.py`, `bench/cases/matrix_clients.py`,
   `bench/workloads/`), what its forwarded requests show judged by `bench/forwarded.py`,
   for the recall workload `bench/recall.py`, for issue 38's client shapes
   `bench/shapes.py`; `--workload` and `--api` run only some.
4. The store under load: concurrent streams, each its own conversation, through the proxy on
   a private redis-server; its store errors and what Redis kept (`bench/cases/store_load.py`).
   Then agents whose histories grow as real agents' do, one and eight at once, through one
   worker and two (`bench/growth.py`).
5. A Markdown report with every target met or missed, PNG charts, and a py-spy profile of
   the proxy for each missed overhead target, in `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import uvloop

from bench import charts, growth
from bench.cases import matrix, overhead, store_load
from bench.cases.mock_check import check_mocks
from bench.cases.session import PLANS, run_session
from bench.config import APIS, SIZES, Size
from bench.conversation import FixedPool, agent_history
from bench.profiling import profile_case, py_spy
from bench.progress import Progress
from bench.report import Run, render
from bench.stack import Stack, running_stack
from bench.targets import (
    growth_verdicts,
    matrix_verdicts,
    overhead_verdicts,
    session_verdicts,
    store_load_verdict,
)
from bench.workloads import WORKLOADS, Workload, WorkloadKey
from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.tokens import O200K_BASE, ApproximateEncoder, TokenCounter

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
_PACKAGES = ("compaction-proxy", "uvicorn", "fastapi", "starlette", "aiohttp", "uvloop", "orjson")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    versions = []
    for name in _PACKAGES:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {_cpu_model()}, Linux {platform.release()}",
        "Python": platform.python_version(),
        "packages": ", ".join(versions),
        "load average at start": load,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--no-profile", action="store_true", help="no py-spy profiles")
    parser.add_argument("--no-overhead", action="store_true", help="skip the overhead cases")
    parser.add_argument("--no-sessions", action="store_true", help="skip the agent sessions")
    parser.add_argument(
        "--no-store-load", action="store_true", help="skip the store under load (Redis)"
    )
    parser.add_argument(
        "--no-growth", action="store_true", help="skip the agents with growing histories"
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--no-matrix", action="store_true", help="skip the effectiveness matrix")
    only.add_argument(
        "--matrix-only",
        action="store_true",
        help="only the effectiveness matrix (no overhead, sessions or LiteLLM)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        choices=WORKLOADS,
        default=[],
        help="only this workload in the matrix (repeatable; any workload, whatever the size)",
    )
    parser.add_argument(
        "--api",
        action="append",
        choices=APIS,
        default=[],
        help="only this API in the matrix (repeatable)",
    )
    parser.add_argument("--upstream-latency-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=64, help="content chunks per stream")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser


async def _overhead(
    run: Run, stack: Stack, specs: list[overhead.CaseSpec], progress: Progress
) -> None:
    for spec in specs:
        progress.step(f"overhead: {spec.key}")
        run.cases.append(await overhead.run_case(spec, stack, progress=progress))
    run.verdicts += overhead_verdicts({case.key: case for case in run.cases})


async def _profiles(
    run: Run, stack: Stack, specs: list[overhead.CaseSpec], seconds: float, out: Path
) -> None:
    by_key = {spec.key: spec for spec in specs}
    missed = {v.case for v in run.verdicts if v.status == "missed" and v.case in by_key}
    for key in sorted(k for k in missed if k is not None):
        try:
            run.profiles.append(await profile_case(by_key[key], stack, seconds=seconds, out=out))
        except RuntimeError as exc:
            run.problems.append(f"no profile of `{key}`: {exc}")


async def _sessions(
    run: Run, size: Size, encoders: Encoders, out: Path, progress: Progress
) -> None:
    for plan in PLANS:
        progress.step(f"session: {plan.label}")
        result = await run_session(
            plan, calls=size.session_calls, encoders=encoders, work=out, progress=progress
        )
        run.sessions.append(result)
    direct = next(s for s in run.sessions if not s.via_proxy)
    run.verdicts += session_verdicts(direct, [s for s in run.sessions if s.via_proxy])


def _matrix_plan(
    size: Size, counter: TokenCounter, workloads: Sequence[WorkloadKey]
) -> list[tuple[matrix.CellSpec, Workload]]:
    specs = matrix.cell_specs(size, workloads)
    return [(spec, matrix.workload_for(spec, size, counter)) for spec in specs]


async def _matrix(
    run: Run,
    cells: list[tuple[matrix.CellSpec, Workload]],
    encoders: Encoders,
    out: Path,
    progress: Progress,
) -> None:
    work = out / "matrix"
    work.mkdir(parents=True, exist_ok=True)
    for spec, workload in cells:
        progress.step(f"matrix: {spec.slug.removeprefix('matrix-')}")
        run.cells.append(
            await matrix.run_cell(spec, workload, encoders=encoders, work=work, progress=progress)
        )
    run.verdicts += matrix_verdicts(run.cells)


async def _overhead_part(
    args: argparse.Namespace, run: Run, counter: TokenCounter, progress: Progress
) -> None:
    """The mock check, the overhead cases and the profiles, with the servers running."""
    size: Size = SIZES[args.size]
    out: Path = args.out
    specs = overhead.specs(size, counter)
    targets = ["direct", "proxy", *([] if args.no_litellm else ["litellm"])]
    progress.add_total(sum(overhead.planned_requests(spec, targets) for spec in specs))
    progress.step("starting the mock, the proxy and LiteLLM's proxy")
    with running_stack(
        out,
        latency_ms=args.upstream_latency_ms,
        chunks=args.chunks,
        with_litellm=not args.no_litellm,
    ) as stack:
        run.litellm = (
            f"litellm[proxy] {stack.litellm_version} (bench/.venv-litellm)"
            if stack.litellm is not None
            else f"not measured: {stack.litellm_problem}"
        )
        progress.step("mock check")
        history = agent_history(counter, overhead.BASE_HISTORY)
        pool = FixedPool(history, model=overhead.MODEL, stream=False, variants=64)
        run.mock_check = await check_mocks(
            stack.mock.base_url, pool, requests=size.mock_check_requests, work=out,
            progress=progress,
        )  # fmt: skip
        await _overhead(run, stack, specs, progress)
        if size.profile_seconds and not args.no_profile:
            if py_spy() is None:
                run.problems.append("no profiles: py-spy is missing (the `bench` extra has it)")
            else:
                progress.step("profiling the missed targets")
                await _profiles(run, stack, specs, size.profile_seconds, out)


def _size(args: argparse.Namespace) -> Size:
    """The run's size, its matrix on the `--api`s given only."""
    size: Size = SIZES[args.size]
    return dataclasses.replace(size, matrix_apis=tuple(args.api)) if args.api else size


async def _run(args: argparse.Namespace, run: Run) -> None:
    size = _size(args)
    encoders = load_encoders(names=(O200K_BASE,))
    if O200K_BASE not in encoders.by_name:
        run.problems.append(
            "o200k_base did not load (set TIKTOKEN_CACHE_DIR): token counts are approximate"
        )
    counter = TokenCounter(encoders.by_name.get(O200K_BASE, ApproximateEncoder()))
    progress = Progress(4 * size.mock_check_requests * (not args.no_overhead))
    if not args.no_sessions:
        progress.add_total(len(PLANS) * size.session_calls)
    # Planned before anything runs: the progress bar counts every cell's calls.
    cells = [] if args.no_matrix else _matrix_plan(size, counter, args.workload)
    progress.add_total(sum(workload.calls for _, workload in cells))
    if not args.no_overhead:
        await _overhead_part(args, run, counter, progress)
    if not args.no_sessions:
        await _sessions(run, size, encoders, args.out, progress)
    if not args.no_store_load:
        progress.step("store under load")
        result = await store_load.run_store_load(args.out, streams=store_load.STREAMS[size.name])
        if result.problem is not None:
            run.problems.append(f"store under load not measured: {result.problem}")
        run.verdicts.append(store_load_verdict(result))
    if not args.no_growth:
        progress.step("agents with growing histories")
        # Its own servers and event loop, in a thread: this loop only waits for it.
        grown = await asyncio.to_thread(
            growth.run_growth, args.out / "growth", growth.SIZES[size.name]
        )
        run.growth = grown
        run.verdicts += growth_verdicts(grown)
    if cells:
        await _matrix(run, cells, encoders, args.out, progress)
    progress.close()


def _settings(args: argparse.Namespace) -> dict[str, str]:
    size = _size(args)
    return {
        "size": (
            f"{size.name} (rounds of {size.block} requests per path at concurrency 1, "
            f"{size.rounds} rounds at higher concurrency)"
        ),
        "matrix": (
            "not run (--no-matrix)"
            if args.no_matrix
            else f"windows {', '.join(f'{w:,}' for w in size.matrix_windows)}; "
            f"summarizers {', '.join(size.matrix_summarizers)}; APIs "
            f"{', '.join(size.matrix_apis)}; sessions grow to "
            f"{size.matrix_history:g} windows of history, at most {size.matrix_max_calls} "
            "model calls per cell; workloads "
            f"{', '.join(args.workload or size.matrix_workloads)}"
        ),
        "upstream latency": f"{args.upstream_latency_ms:g} ms",
        "stream": f"{args.chunks} content chunks, sent back to back",
        "command": "python -m bench.suite " + " ".join(sys.argv[1:]),
    }


def main() -> int:
    args = _parser().parse_args()
    if args.matrix_only:
        args.no_overhead = args.no_sessions = args.no_litellm = args.no_store_load = True
        args.no_growth = True
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(machine(), _settings(args))
    start = time.monotonic()
    uvloop.run(_run(args, run))
    run.settings["duration"] = f"{time.monotonic() - start:.0f} s"
    try:
        run.charts = charts.draw(run, args.out)
    except ImportError as exc:
        run.problems.append(f"no charts: {exc} (make bench installs the `bench` extra)")
    report = args.out / "report.md"
    report.write_text(render(run))
    for verdict in run.verdicts:
        print(f"{verdict.status:>12}  {verdict.name}: {verdict.measured}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
