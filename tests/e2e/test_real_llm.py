"""Thirty turns through `compaction-proxy serve` in front of llama.cpp with a 2,048-token window.

The proxy runs as its own process on a private Redis. In the first run it knows the model's
window; in the second it believes the window is four times larger, so the first overflow
comes from llama.cpp itself and must be caught, learned from and retried. Either way the
client never sees an error, the summaries are the real model's, and the session can be read
back from Redis afterwards.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import ModelServer
from tests.e2e.conversation import (
    PLANTED,
    QUESTION,
    TICKET,
    Conversation,
    RunReport,
    read_session,
    user_turn,
)
from tests.redis_server import RedisServer
from tests.servers import proxy_process

pytestmark = pytest.mark.real_llm

TURNS = 30


def proxy_config(model: str, *, window: int, strategy: str) -> dict[str, Any]:
    """Small reserves for a small window; the model summarizes its own conversation."""
    return {
        "context": {
            "strategy": strategy,
            "output_reserved": 256,
            "keep_recent": 2,
            "summary_max_tokens": 128,
            # The summarizer cuts spans into parts that fit the model's own (learned) window.
            "summary_brain": {"model": model},
        },
        "models": {model: {"context_window": window}},
        "log": {"level": "warning"},
    }


def run(
    name: str, llm: ModelServer, redis: RedisServer, folder: Path, config: dict[str, Any]
) -> RunReport:
    """The whole conversation through a fresh proxy process; the session read back after."""
    path = folder / "proxy.yaml"
    path.write_text(json.dumps(config))
    args = ["--config", str(path), "--upstream", llm.base_url, "--redis", redis.url]
    started = time.monotonic()
    with (
        proxy_process(args) as proxy,
        openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-e2e", max_retries=0, timeout=300) as sdk,
    ):
        chat = Conversation(sdk, llm.model, llm.prompt_tokens)
        for turn in range(1, TURNS):
            chat.say(user_turn(turn))
        answer = chat.say(QUESTION)
    seconds = time.monotonic() - started
    stored = read_session(redis.url, chat.turns[-1].session, chat.sent(), llm.model)
    return RunReport(name, chat.turns, stored, TICKET in answer, seconds)


def check_common(report: RunReport, llm: ModelServer) -> None:
    """What both runs promise: one session, every prompt fitted, the model's own summaries,
    and the whole session readable in Redis."""
    turns, stored = report.turns, report.stored
    assert len(turns) == TURNS  # every turn answered: an error status would have raised
    assert len({turn.session for turn in turns}) == 1
    assert turns[0].prompt_tokens == turns[0].history_tokens  # counted as llama.cpp does
    assert turns[-1].history_tokens > 2.5 * llm.n_ctx  # the history outgrew the window
    assert max(turn.prompt_tokens for turn in turns) < llm.n_ctx
    summaries = [record for record in stored.state.history if record.strategy == "summarize"]
    assert summaries, stored.state.history
    assert {record.summarizer_model for record in summaries} == {llm.model}
    assert all(record.summarizer_tokens > 0 for record in summaries)
    assert stored.state.turns == TURNS
    assert stored.state.model == llm.model
    assert len(stored.archived) == 2 * TURNS - 1  # the last request, every message of it
    assert stored.archived[-1]["content"] == QUESTION
    assert stored.checkpoint is not None
    assert stored.checkpoint == stored.checkpoints[-1]


def check_ledger(report: RunReport) -> None:
    """Whatever condensed a planted fact (a summary, a truncation, the emergency cut after an
    overflow) carries it verbatim, and so does every compaction after it: the ledger's
    promise, kept through the real model's summaries and its answers, which imitate the
    block they read (`tests/core/test_plan_imitations.py`)."""
    for turn, fact in PLANTED.items():
        first = report.stored.first_condensing(turn)
        assert first is not None
        later = report.stored.checkpoints[report.stored.checkpoints.index(first) :]
        for checkpoint in later:
            assert fact in json.dumps(checkpoint.messages), (checkpoint.strategy, fact)
    assert report.stored.facts_kept()


def test_summaries_keep_thirty_turns_inside_a_known_window(
    model_server: ModelServer,
    redis_server: RedisServer,
    tmp_path: Path,
    reports: list[RunReport],
) -> None:
    config = proxy_config(model_server.model, window=model_server.n_ctx, strategy="summarize")
    report = run("window 2048 configured", model_server, redis_server, tmp_path, config)
    reports.append(report)
    check_common(report, model_server)
    # Summaries are written in the background: a compaction that comes before its summary
    # is ready truncates, and the summary is folded into the next one.
    applied = {turn.applied for turn in report.turns}
    assert "summarize" in applied
    assert applied <= {"none", "summarize", "truncate"}
    assert {c.strategy for c in report.stored.checkpoints} <= {"summarize", "truncate"}
    # Each summary folds in the previous one and the ledger carries what the user said, so
    # no rolling summary paraphrases a planted fact away.
    check_ledger(report)


def test_an_overflow_from_llama_cpp_is_learned_and_retried(
    model_server: ModelServer,
    redis_server: RedisServer,
    tmp_path: Path,
    reports: list[RunReport],
) -> None:
    config = proxy_config(model_server.model, window=4 * model_server.n_ctx, strategy="auto")
    report = run("window 8192 believed", model_server, redis_server, tmp_path, config)
    reports.append(report)
    check_common(report, model_server)
    assert "emergency" in {turn.applied for turn in report.turns}
    overflows = [record for record in report.stored.state.history if record.trigger == "overflow"]
    assert overflows
    assert report.stored.learned_window == model_server.n_ctx
    check_ledger(report)
