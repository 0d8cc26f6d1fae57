"""The compaction turn's added latency with a slow summarizer: this version beside another.

An agent (the OpenAI SDK) talks to the proxy (in this process) in front of
`proxy.mock_upstream` on a real socket; the mock answers every request after the provider's
latency and summary requests after the summarizer's on top. Reported per version: the median
turn, the compaction turns, and what a compaction turn adds to the median (its own latency
minus the median turn's). With `--before REF` the same session runs again on the proxy of
git revision REF (checked out in a temporary worktree, run in a subprocess), side by side.

    python -m bench.summary_latency [--summary-latency-s 2] [--latency-s 0.2] [--turns 40]
                                    [--before REF] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
import openai
from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.mock_upstream import MockUpstream
from proxy.mock_upstream.summarizer import is_summary_request
from proxy.settings import Settings
from proxy.web import create_app

WINDOW = 8000
WORDS = "the build failed again on the staging cluster while the queue kept growing "
CONTEXT = {"context_window": WINDOW, "output_reserved": 500, "keep_recent": 4}


class SlowSummaries:
    """`app`, with summary requests answered `delay_s` later (works with any mock version)."""

    def __init__(self, app: ASGIApp, delay_s: float) -> None:
        self.app, self.delay_s = app, delay_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            if is_summary_request(json.loads(body)):
                await asyncio.sleep(self.delay_s)
        except ValueError:
            pass
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def session(latency_s: float, summary_latency_s: float, turns: int) -> dict[str, Any]:
    """One agent session; each turn's strategy and seconds, and the summary calls."""
    from tests.servers import serve  # a real socket for the mock, as in the tests

    provider = MockUpstream(window=WINDOW, latency_s=latency_s)
    slow = SlowSummaries(provider.app, summary_latency_s)
    done: list[tuple[str, float]] = []
    async with serve(slow) as base:
        settings = Settings.model_validate(
            {"upstream": {"base_url": f"{base}/v1"}, "context": CONTEXT}
        )
        app = create_app(settings)
        async with LifespanManager(app):
            http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), timeout=120)
            client = openai.AsyncOpenAI(
                api_key="sk-bench", base_url="http://proxy/v1", http_client=http, max_retries=0
            )
            messages: list[Any] = [{"role": "system", "content": "Be brief."}]
            for _ in range(turns):
                messages.append({"role": "user", "content": f"turn {len(messages)}: " + WORDS * 30})
                started = time.perf_counter()
                raw = await client.chat.completions.with_raw_response.create(
                    model="mock-model", messages=messages
                )
                done.append((raw.headers["x-compaction-applied"], time.perf_counter() - started))
                answer = raw.parse().choices[0].message.content
                messages.append({"role": "assistant", "content": answer})
            await http.aclose()
    return report(done, provider.summary_calls)


def report(done: list[tuple[str, float]], summary_calls: int) -> dict[str, Any]:
    median = statistics.median(seconds for _, seconds in done)
    compacting = [(strategy, seconds) for strategy, seconds in done if strategy != "none"]
    added = [seconds - median for _, seconds in compacting]
    return {
        "turns": len(done),
        "median_turn_ms": round(median * 1000, 1),
        "compaction_turns": [s for s, _ in compacting],
        "compaction_turn_ms": [round(seconds * 1000, 1) for _, seconds in compacting],
        "added_ms_max": round(max(added, default=0.0) * 1000, 1),
        "added_ms_median": round(statistics.median(added) * 1000, 1) if added else 0.0,
        "slowest_turn_ms": round(max(seconds for _, seconds in done) * 1000, 1),
        "summary_calls": summary_calls,
    }


def before(ref: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same session on the proxy of git revision `ref`, in a worktree and a subprocess
    (this script and the test helpers it uses come from here, the proxy from there)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), ref],
            check=True,
            capture_output=True,
        )
        # This script alone (as `bench.summary_latency`) first on the path, then the
        # worktree: its `proxy`, its mock and its test helpers.
        shim = Path(tmp) / "shim" / "bench"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text("")
        (shim / "summary_latency.py").write_text(Path(__file__).read_text())
        try:
            command = [
                sys.executable, "-c",
                "import sys, runpy; sys.path[:0] = sys.argv[1:3]; del sys.argv[1:3]; "
                "runpy.run_module('bench.summary_latency', run_name='__main__')",
                str(shim.parent), str(tree), "--json",
                "--latency-s", str(args.latency_s),
                "--summary-latency-s", str(args.summary_latency_s),
                "--turns", str(args.turns),
            ]  # fmt: skip
            out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tmp)
            result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
            return result
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-s", type=float, default=0.2)
    parser.add_argument("--summary-latency-s", type=float, default=2.0)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--before", metavar="REF")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    after = asyncio.run(session(args.latency_s, args.summary_latency_s, args.turns))
    if args.json:
        print(json.dumps(after))
        return
    rows = {"this version": after}
    if args.before:
        rows[f"before ({args.before})"] = before(args.before, args)
    print(
        f"compaction turn with a {args.summary_latency_s:g} s summarizer "
        f"(provider latency {args.latency_s:g} s, {args.turns} turns, {WINDOW}-token window)"
    )
    print(f"{'':24} {'median turn':>12} {'compactions':>12} {'added max':>10} {'summaries':>10}")
    for name, row in rows.items():
        print(
            f"{name:24} {row['median_turn_ms']:>10} ms {len(row['compaction_turns']):>12} "
            f"{row['added_ms_max']:>7} ms {row['summary_calls']:>10}"
        )


if __name__ == "__main__":
    main()
