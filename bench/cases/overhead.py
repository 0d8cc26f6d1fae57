"""The overhead cases: the same requests sent directly, through our proxy and LiteLLM's.

Each case warms every target up, then runs `rounds` rounds; in each round every target gets
its block of requests, the order rotating from round to round so that drifts in the machine's
load fall on all of them alike. Around each block the server process's CPU time is read; its
peak memory is read at the end of the case.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from bench.config import Size
from bench.conversation import (
    ExtendedConversations,
    FixedPool,
    FreshConversations,
    GrowingConversations,
    agent_history,
    chat_history,
)
from bench.load import client_session, run_block
from bench.measures import LITELLM, CaseResult, Measure
from bench.progress import Progress
from bench.stack import COMPACT_MODEL, Stack, Target
from proxy.core.tokens import TokenCounter

MODEL = "mock-model"
BASE_HISTORY = 10_000
COMPACT_HISTORY = 14_000
"""Tokens of each compaction case's conversation: past the trigger of `mock-compact`'s
16,000-token window (three quarters of the window less the 4,096-token output reserve)."""
PRIMED = 8
"""Conversations compacted before the "summary cached" case, which then extends them."""


class Source(Protocol):
    def take(self, target: str, count: int) -> list[bytes]: ...


@dataclass(frozen=True, slots=True)
class CaseSpec:
    key: str
    title: str
    source: Source
    requests: int
    rounds: int
    concurrency: int = 1
    stream: bool = False
    history_tokens: int = BASE_HISTORY
    litellm_share: float = 1.0
    warmup: int = 20
    prime: Callable[[Stack], Awaitable[None]] | None = None

    def count(self, target: str) -> int:
        """Requests per round for `target`: at least twice the concurrency, so that a block
        runs at its concurrency for most of its time."""
        share = self.litellm_share if target == LITELLM else 1.0
        floor = 2 * self.concurrency if self.concurrency > 1 else 1
        return max(floor, round(self.requests * share / self.rounds))


def _rounds(size: Size, requests: int, concurrency: int) -> int:
    return size.rounds if concurrency > 1 else max(size.rounds, requests // size.block)


def specs(size: Size, counter: TokenCounter) -> list[CaseSpec]:
    """Every overhead case of a run of `size`."""
    base = agent_history(counter, BASE_HISTORY)
    cases = [_concurrency_case(size, base, c) for c in size.concurrencies]
    cases.append(
        CaseSpec(
            "stream",
            "streaming, concurrency 1",
            FixedPool(base, model=MODEL, stream=True, variants=64),
            size.stream_requests,
            _rounds(size, size.stream_requests, 1),
            stream=True,
            litellm_share=size.litellm_share,
        )
    )
    for tokens in size.history_sizes:
        cases.append(
            CaseSpec(
                f"history-{tokens // 1000}k",
                f"{tokens // 1000}k-token conversations, a new turn each request, no compaction",
                GrowingConversations(agent_history(counter, tokens), model=MODEL),
                size.history_requests,
                _rounds(size, size.history_requests, 1),
                history_tokens=tokens,
                litellm_share=size.litellm_share,
            )
        )
    return cases + _compaction_cases(size, counter)


def _concurrency_case(size: Size, history: list[dict[str, object]], concurrency: int) -> CaseSpec:
    requests = size.latency_requests if concurrency == 1 else size.throughput_requests
    share = size.litellm_share if concurrency == 1 else size.litellm_throughput_share
    return CaseSpec(
        f"c{concurrency}",
        f"non-streaming, concurrency {concurrency}",
        FixedPool(history, model=MODEL, stream=False, variants=max(64, concurrency)),
        requests,
        _rounds(size, requests, concurrency),
        concurrency=concurrency,
        litellm_share=share,
        warmup=max(20, concurrency * 2),
    )


def _compaction_cases(size: Size, counter: TokenCounter) -> list[CaseSpec]:
    history = chat_history(counter, COMPACT_HISTORY)
    primed = FreshConversations(history, model=COMPACT_MODEL)
    # The "fresh" case's conversations are numbered after the primed ones: never seen before.
    fresh = FreshConversations(history, model=COMPACT_MODEL)
    for target in ("direct", "proxy", LITELLM):
        fresh.take(target, PRIMED)

    async def prime(stack: Stack) -> None:
        async with client_session(PRIMED) as session:
            url = f"{stack.proxy.base_url}/chat/completions"
            block = await run_block(session, url, primed.take("proxy", PRIMED), concurrency=1)
        if block.errors or sum(block.compaction.values()) < PRIMED:
            raise RuntimeError(
                f"priming the checkpoints failed: {block.error_samples} {dict(block.compaction)}"
            )

    extended = ExtendedConversations(
        [primed.conversation(n) for n in range(PRIMED)], model=COMPACT_MODEL
    )
    return [
        CaseSpec(
            "compaction-cached",
            "compaction turn, summary cached (the checkpoint exists)",
            extended,
            size.compaction_cached,
            _rounds(size, size.compaction_cached, 1),
            history_tokens=COMPACT_HISTORY,
            litellm_share=size.litellm_share,
            warmup=0,
            prime=prime,
        ),
        CaseSpec(
            "compaction-fresh",
            "compaction turn, nothing prepared (truncated now, summarized after)",
            fresh,
            size.compaction_fresh,
            _rounds(size, size.compaction_fresh, 1),
            history_tokens=COMPACT_HISTORY,
            litellm_share=size.litellm_share,
            warmup=0,
        ),
    ]


async def run_case(spec: CaseSpec, stack: Stack, *, progress: Progress) -> CaseResult:
    """Run one case over every target of `stack`."""
    targets = stack.targets
    result = CaseResult(
        spec.key, spec.title, spec.concurrency, spec.stream, spec.history_tokens,
        {target.name: Measure(target.name) for target in targets},
    )  # fmt: skip
    if spec.prime is not None:
        await spec.prime(stack)
    async with client_session(spec.concurrency) as session:
        for target in targets:
            if spec.warmup:
                bodies = spec.source.take(target.name, spec.warmup)
                await run_block(
                    session, target.url, bodies, concurrency=spec.concurrency, stream=spec.stream
                )
            target.meter.reset_peak()
        for index in range(spec.rounds):
            shift = index % len(targets)
            for target in targets[shift:] + targets[:shift]:
                await _round(spec, session, target, result.measures[target.name], progress)
    for target in targets:
        result.measures[target.name].peak_rss_mib = target.meter.peak_rss_mib()
    return result


async def _round(
    spec: CaseSpec,
    session: aiohttp.ClientSession,
    target: Target,
    measure: Measure,
    progress: Progress,
) -> None:
    bodies = spec.source.take(target.name, spec.count(target.name))
    before = target.meter.cpu_seconds()
    block = await run_block(
        session, target.url, bodies, concurrency=spec.concurrency, stream=spec.stream,
        tick=progress.tick,
    )  # fmt: skip
    measure.add(block, target.meter.cpu_seconds() - before, len(bodies))


def planned_requests(spec: CaseSpec, targets: list[str]) -> int:
    """Requests the case will time, for the progress bar."""
    return sum(spec.count(name) * spec.rounds for name in targets)
