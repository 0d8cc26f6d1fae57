"""How big a run is: the presets of `python -m bench.suite --size NAME`.

Request counts are per target and per case, split evenly over the rounds. LiteLLM's proxy
is one to two orders of magnitude slower, so it gets a share of the throughput cases'
requests (enough for stable percentiles, not so many that it dominates the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from bench.workloads import WORKLOADS, WorkloadKey
from proxy.mock_upstream import SummaryQuality

Api = Literal["chat", "responses", "messages"]
"""The API a matrix cell's client speaks: chat completions, the Responses API or Anthropic's
Messages API."""
APIS: Final[tuple[Api, ...]] = ("chat", "responses", "messages")


@dataclass(frozen=True, slots=True)
class Size:
    name: str
    rounds: int
    """Rounds of the cases at higher concurrency (each block long enough for a rate)."""
    block: int
    """Requests per target in one round of the cases at concurrency 1: short blocks, many
    rounds, so that the machine's drifts fall on every target alike."""
    latency_requests: int
    """Concurrency 1, non-streaming, 10k-token history."""
    throughput_requests: int
    """Each higher concurrency."""
    concurrencies: tuple[int, ...]
    stream_requests: int
    history_requests: int
    history_sizes: tuple[int, ...]
    compaction_fresh: int
    compaction_cached: int
    litellm_share: float
    """LiteLLM's requests as a share of the others' in the cases at concurrency 1."""
    litellm_throughput_share: float
    """...and in the cases at higher concurrency."""
    session_calls: int
    """Model calls of each scripted agent session."""
    profile_seconds: float
    """py-spy's recording of the proxy for each missed overhead target (0: none)."""
    mock_check_requests: int
    matrix_windows: tuple[int, ...]
    """The effectiveness matrix's windows (each with every workload)."""
    matrix_summarizers: tuple[SummaryQuality, ...]
    matrix_history: float
    """How long each matrix session grows the client's history, in windows."""
    matrix_max_calls: int
    """...but no more model calls than this per cell."""
    matrix_apis: tuple[Api, ...] = APIS
    """Each cell runs once per API: the same workload over chat completions, over the
    Responses API and over the Messages API."""
    matrix_workloads: tuple[WorkloadKey, ...] = WORKLOADS
    """The workloads of the matrix (`--workload` picks among all of them whatever the size)."""


SIZES = {
    "default": Size(
        name="default",
        rounds=3,
        block=100,
        latency_requests=1500,
        throughput_requests=4500,
        concurrencies=(1, 32, 256),
        stream_requests=900,
        history_requests=450,
        history_sizes=(1_000, 10_000, 100_000),
        compaction_fresh=90,
        compaction_cached=450,
        litellm_share=0.34,
        litellm_throughput_share=0.15,
        session_calls=120,
        profile_seconds=8.0,
        mock_check_requests=1500,
        matrix_windows=(4_096, 8_192, 32_768, 131_072),
        matrix_summarizers=("poor", "good"),
        matrix_history=3.5,
        matrix_max_calls=240,
    ),
    "quick": Size(
        name="quick",
        rounds=2,
        block=50,
        latency_requests=300,
        throughput_requests=1000,
        concurrencies=(1, 32, 256),
        stream_requests=200,
        history_requests=100,
        history_sizes=(1_000, 10_000, 100_000),
        compaction_fresh=20,
        compaction_cached=100,
        litellm_share=0.5,
        litellm_throughput_share=0.3,
        session_calls=45,
        profile_seconds=3.0,
        mock_check_requests=300,
        matrix_windows=(4_096, 8_192, 32_768, 131_072),
        matrix_summarizers=("poor", "good"),
        matrix_history=2.5,
        matrix_max_calls=120,
    ),
    "smoke": Size(
        name="smoke",
        rounds=1,
        block=20,
        latency_requests=20,
        throughput_requests=64,
        concurrencies=(1, 32),
        stream_requests=10,
        history_requests=6,
        history_sizes=(1_000, 10_000),
        compaction_fresh=3,
        compaction_cached=6,
        litellm_share=1.0,
        litellm_throughput_share=1.0,
        session_calls=12,
        profile_seconds=0.0,
        mock_check_requests=20,
        matrix_windows=(8_192,),
        matrix_summarizers=("poor",),
        matrix_history=1.5,
        matrix_max_calls=24,
        # The three first workloads: `tests/test_bench_smoke.py` runs a small cell of each
        # of the others on its own, in seconds.
        matrix_workloads=("tool-heavy", "chatty", "typed"),
    ),
}
