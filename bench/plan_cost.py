"""What does the plan of a compaction turn cost on a long tool-heavy history, turn after turn?

Builds a coding agent's history of about `--tokens` tokens (48k by default): a system prompt,
the task, then turns of a user message, two tool calls (`read_file` with a path argument,
`grep`) whose results are about `--result-tokens` tokens each of source and search hits
(`bench.workloads.tool_output`), and a reply; `--results` tool results in all. The window is
set so that the history is just past the trigger (90 % of the usable input). With the default
strategy the compaction clears the old results (which reaches the target); `--strategy
summarize` summarizes everything before the recent window instead (the summary checked
against the span's facts).

Then, as the service would, with one token counter and (where the code has one) one
`Mentions` cache for the whole session, it plans `--turns` compaction turns: each turn the
client sends the history grown by one more turn, the plan is made (`plan_compaction`) and
completed with a summary (`NeedsSummary.complete`) when it asks for one. The counter is
warm (the service counts every message as it arrives, before planning) and each request has
its own table of digests, as in the service; the timer covers the plan and its completion.

Each session is run `--runs` times in one process (fresh caches each time) and the median of
each turn is reported. Run it on two trees to compare (the numbers are the plan's, so the
same machine, one after the other):

    python -m bench.plan_cost                     # this tree
    git worktree add /tmp/before HEAD && cp bench/plan_cost.py /tmp/before/bench/ \\
        && (cd /tmp/before && python -m bench.plan_cost)   # the previous commit
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import time
from typing import Any

from bench.workloads import tool_output
from proxy.adapters.tokenizer import load_encoders
from proxy.core.budget import Budget, request_budget
from proxy.core.digests import Digests
from proxy.core.messages import Message
from proxy.core.plan import NeedsSummary, Situation, plan_compaction
from proxy.core.policy import STRATEGIES, ContextPolicy
from proxy.core.tokens import ApproximateEncoder, TextEncoder, TokenCounter

_SUMMARY = "\n".join(
    [
        "## Goal",
        "- fix the failing parser tests in the api module",
        "## Decisions",
        "- keep the public interface; rewrite the tokenizer loop",
        "## Done",
        "- read the parser and its tests; ran the suite twice",
        "## Pending",
        "- the two failures in the jobs module",
        "## Next step",
        "- patch the loop and run the tests again",
    ]
)
_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("read_file", "grep", "run_tests")
]


def _call(call_id: str, name: str, arguments: str) -> Message:
    function = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def _turn(index: int, result_tokens: int, counter: TokenCounter) -> list[Message]:
    """One user turn: a question, a file read, a search, the answer."""
    path = f"src/api/handler_{index}.py"
    read, search = f"call_r{index}", f"call_g{index}"
    return [
        {"role": "user", "content": f"Now look at {path} and tell me why step {index} fails."},
        _call(read, "read_file", f'{{"path": "{path}"}}'),
        {
            "role": "tool",
            "tool_call_id": read,
            "content": tool_output("read_file", result_tokens, index, counter),
        },
        _call(search, "grep", f'{{"pattern": "handler_{index}", "path": "src"}}'),
        {
            "role": "tool",
            "tool_call_id": search,
            "content": tool_output("grep", result_tokens, 1000 + index, counter),
        },
        {"role": "assistant", "content": f"Step {index} fails because the loop exits early."},
    ]


def _history(turns: int, result_tokens: int, counter: TokenCounter) -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent. Use the tools."},
        {"role": "user", "content": "The task: make the parser tests in src/api pass."},
    ]
    for index in range(turns):
        messages += _turn(index, result_tokens, counter)
    return messages


def _budget(tokens: int) -> Budget:
    """A window in which `tokens` is 90 % of the usable input."""
    window = int((tokens / 0.9 + 4096) / 0.97)
    return request_budget(window, {}, output_reserved=4096, margin_share=0.03)


def _mentions() -> Any:
    """A `Mentions` cache where this tree has one (None before it did)."""
    try:
        return importlib.import_module("proxy.core.mentions").Mentions()
    except ImportError:
        return None


def _session(args: argparse.Namespace, encoder: TextEncoder) -> list[float]:
    """One session of compaction turns; what each plan took, in milliseconds."""
    counter, mentions = TokenCounter(encoder), _mentions()
    turns = args.results // 2
    messages = _history(turns, args.result_tokens, counter)
    budget = _budget(counter.messages(messages))
    body = {"model": "gpt-4o", "tools": _TOOLS}
    took = []
    for turn in range(args.turns):
        if turn:
            messages = [*messages, *_turn(turns + turn, args.result_tokens, counter)]
        # As the service does: one table of digests per request, shared by the caches, and
        # every message counted on arrival, before the plan.
        digests = Digests()
        keyed = counter.for_request(digests)
        keyed.messages(messages)
        extra = () if mentions is None else (mentions.for_request(digests),)
        situation = Situation(messages, body, ContextPolicy(strategy=args.strategy), budget)
        gc.collect()
        start = time.perf_counter()
        plan = plan_compaction(situation, keyed, *extra)
        if isinstance(plan, NeedsSummary):
            plan.complete(_SUMMARY)
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=60)
    parser.add_argument("--result-tokens", type=int, default=800)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--encoding", default="o200k_base")
    parser.add_argument("--strategy", default="auto", choices=STRATEGIES)
    args = parser.parse_args()
    encoder = load_encoders(names=(args.encoding,)).by_name.get(args.encoding)
    if encoder is None:
        encoder = ApproximateEncoder()
    sessions = [_session(args, encoder) for _ in range(args.runs)]
    counter = TokenCounter(encoder)
    history = _history(args.results // 2, args.result_tokens, counter)
    cached = "with" if _mentions() is not None else "without"
    print(
        f"{len(history)} messages, {counter.messages(history):,} tokens ({encoder.name}), "
        f"{args.results} tool results; strategy {args.strategy}; {cached} a Mentions cache; "
        f"median of {args.runs} runs, ms per compaction turn (plan + complete)"
    )
    for turn in range(args.turns):
        median = statistics.median(session[turn] for session in sessions)
        print(f"  turn {turn + 1}: {median:8.1f}")


if __name__ == "__main__":
    main()
