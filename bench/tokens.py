"""What does counting a long conversation cost, cold and cached?

Builds an agent-like history of about `--tokens` tokens (user turns, replies, tool calls with
JSON arguments, JSON and log tool results), then times, in interleaved rounds:

- cold: a fresh `TokenCounter` counting the whole history (every message encoded);
- warm: the same counter counting it again (every message only hashed and looked up);
- warm + 1: the history with one new message, as on a conversation's next turn;
- tiktoken: one plain `encode_ordinary` of the same text, the floor for encoding it;
- approximate: the fallback encoder counting the history cold.

Needs the encodings: set TIKTOKEN_CACHE_DIR (here: ../shared/tiktoken).

    python -m bench.tokens [--tokens 100000] [--rounds 7] [--encoding o200k_base]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from proxy.adapters.tokenizer import TiktokenEncoder, load_encoders
from proxy.core.messages import Message, text
from proxy.core.tokens import ApproximateEncoder, TokenCounter

_PHRASE = (
    "the proxy keeps long agent conversations inside the model context window by clearing "
    "old tool results summarising older turns and truncating only as a last resort while "
    "every tool call keeps its answer and the system prompt is never touched"
)
_WORDS = _PHRASE.split()


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _tool_result(rng: random.Random, index: int) -> str:
    if index % 2:
        rows = [
            {"id": rng.randrange(10**6), "path": f"src/module_{i}.py", "lines": rng.randrange(900)}
            for i in range(rng.randrange(5, 40))
        ]
        return json.dumps(rows)
    return "\n".join(
        f"2025-05-01T12:00:{i % 60:02d}Z INFO worker-{i % 4} handled req_{rng.randrange(16**8):08x}"
        for i in range(rng.randrange(5, 40))
    )


def _exchange(rng: random.Random, index: int) -> list[Message]:
    call_id = f"call_{index:06d}"
    arguments = json.dumps({"query": _prose(rng, 6), "limit": rng.randrange(100)})
    return [
        {"role": "user", "content": _prose(rng, rng.randrange(10, 60))},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "search", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": _tool_result(rng, index)},
        {"role": "assistant", "content": _prose(rng, rng.randrange(20, 120))},
    ]


def build_history(counter: TokenCounter, tokens: int) -> list[Message]:
    """An agent-like conversation of at least `tokens` tokens."""
    rng = random.Random(7)
    history: list[Message] = [{"role": "system", "content": _prose(rng, 200)}]
    total, index = counter.messages(history), 0
    while total < tokens:
        exchange = _exchange(rng, index)
        history += exchange
        total += sum(counter.message(message) for message in exchange)
        index += 1
    return history


def _plain_text(history: list[Message]) -> str:
    """Everything the counter encodes, as one string."""
    parts = [text(message) for message in history]
    for message in history:
        for call in message.get("tool_calls") or []:
            parts += [call["function"]["name"], call["function"]["arguments"]]
    return "\n".join(parts)


def _time_ms(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def _round(encoder: TiktokenEncoder, history: list[Message], plain: str) -> dict[str, float]:
    """One round of every measurement, in milliseconds."""
    counter = TokenCounter(encoder)
    new_message: Message = {"role": "user", "content": "And one more question, please."}
    return {
        "cold (every message encoded)": _time_ms(lambda: counter.messages(history)),
        "warm (every message cached)": _time_ms(lambda: counter.messages(history)),
        "warm + 1 new message": _time_ms(lambda: counter.messages([*history, new_message])),
        "tiktoken encode_ordinary, same text": _time_ms(
            lambda: encoder.encoding.encode_ordinary(plain)
        ),
        "approximate encoder, cold": _time_ms(
            lambda: TokenCounter(ApproximateEncoder()).messages(history)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--encoding", default="o200k_base")
    args = parser.parse_args()
    encoder = load_encoders(names=(args.encoding,)).by_name.get(args.encoding)
    if not isinstance(encoder, TiktokenEncoder):
        raise SystemExit(f"{args.encoding} did not load: set TIKTOKEN_CACHE_DIR (see above)")
    history = build_history(TokenCounter(encoder), args.tokens)
    plain = _plain_text(history)
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, ms in _round(encoder, history, plain).items():
            samples.setdefault(name, []).append(ms)
    total = TokenCounter(encoder).messages(history)
    print(
        f"{len(history)} messages, {total:,} tokens ({encoder.name}), "
        f"{len(plain):,} characters of text; median of {args.rounds} rounds"
    )
    cold = statistics.median(samples["cold (every message encoded)"])
    print("| count | ms | vs cold |")
    print("|---|---:|---:|")
    for name, values in samples.items():
        ms = statistics.median(values)
        print(f"| {name} | {ms:.2f} | {ms / cold:.2f}x |")


if __name__ == "__main__":
    main()
