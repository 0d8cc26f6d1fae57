"""PNG charts beside the report, drawn with matplotlib (the `bench` extra, never a runtime
dependency). Without matplotlib the report says so and has no charts."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

from bench.measures import DIRECT, LITELLM, PROXY, CaseResult
from bench.report import Run

_COLORS = {DIRECT: "#888888", PROXY: "#1f77b4", LITELLM: "#d62728"}
_LABELS = {DIRECT: "direct", PROXY: "compaction-proxy", LITELLM: "LiteLLM proxy"}


def _pyplot() -> Any:
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _positive(value: float) -> float:
    """Log scales need positive values: noise can make an added latency negative."""
    return value if value > 0 and not math.isnan(value) else 0.01


def _added_latency(plt: Any, cases: list[CaseResult], path: Path) -> None:
    cases = [c for c in cases if not c.stream]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.2
    for offset, (target, q) in enumerate(
        [(PROXY, 0.5), (PROXY, 0.99), (LITELLM, 0.5), (LITELLM, 0.99)]
    ):
        if not any(target in c.measures for c in cases):
            continue
        values = [_positive(c.added(target, q)) for c in cases]
        xs = [i + (offset - 1.5) * width for i in range(len(cases))]
        label = f"{_LABELS[target]} p{int(q * 100)}"
        ax.bar(xs, values, width, label=label, color=_COLORS[target], alpha=1.0 - 0.45 * (q > 0.5))
    ax.set_yscale("log")
    ax.set_ylabel("added latency, ms (log)")
    ax.set_xticks(range(len(cases)), [c.key for c in cases], rotation=20)
    ax.set_title("Latency added over a direct request")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput(plt: Any, cases: list[CaseResult], path: Path) -> None:
    cases = [c for c in cases if c.is_concurrency]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for target in (DIRECT, PROXY, LITELLM):
        points = [(c.concurrency, c.measures[target].rps) for c in cases if target in c.measures]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=_LABELS[target], color=_COLORS[target])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("requests per second (log)")
    ax.set_title("Throughput, 10k-token history, non-streaming")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _history(plt: Any, cases: list[CaseResult], path: Path) -> None:
    cases = [c for c in cases if c.key.startswith("history-")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for target in (PROXY, LITELLM):
        for q, style in ((0.5, "-"), (0.99, "--")):
            points = [
                (c.history_tokens, _positive(c.added(target, q)))
                for c in cases
                if target in c.measures
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                label = f"{_LABELS[target]} p{int(q * 100)}"
                ax.plot(xs, ys, style, marker="o", label=label, color=_COLORS[target])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("history tokens (log)")
    ax.set_ylabel("added latency, ms (log)")
    ax.set_title("Cost against history size, nothing to compact")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _session(plt: Any, run: Run, path: Path) -> None:
    direct = next(s for s in run.sessions if not s.via_proxy)
    proxied = next(s for s in run.sessions if s.via_proxy)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(proxied.sent_tokens, label="sent by the client", color=_COLORS[DIRECT])
    ax.plot(proxied.forwarded_tokens, label="forwarded by the proxy", color=_COLORS[PROXY])
    ax.plot(proxied.cached_tokens, ":", label="cached (through the proxy)", color=_COLORS[PROXY])
    ax.plot(direct.cached_tokens, ":", label="cached (direct)", color=_COLORS[DIRECT])
    ax.set_xlabel("model call")
    ax.set_ylabel("prompt tokens")
    ax.set_title(f"Agent session: {proxied.label}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(run: Run, out: Path) -> list[tuple[str, str]]:
    """Write the charts into `out`; (file name, caption) of each. Raises ImportError without
    matplotlib."""
    plt = _pyplot()
    charts: list[tuple[str, str]] = []
    if run.cases:
        _added_latency(plt, run.cases, out / "added_latency.png")
        charts.append(("added_latency.png", "Added latency per case"))
        if any(c.is_concurrency for c in run.cases):
            _throughput(plt, run.cases, out / "throughput.png")
            charts.append(("throughput.png", "Throughput against concurrency"))
        if any(c.key.startswith("history-") for c in run.cases):
            _history(plt, run.cases, out / "history.png")
            charts.append(("history.png", "Added latency against history size"))
    if any(s.via_proxy for s in run.sessions) and any(not s.via_proxy for s in run.sessions):
        _session(plt, run, out / "session.png")
        charts.append(("session.png", "Prompt tokens per model call in the agent session"))
    return charts
