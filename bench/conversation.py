"""The conversations the overhead cases send, built once and serialized before timing.

Three kinds of request streams:

- `FixedPool`: the same history for every request (a fleet of same-sized conversations),
  each variant its own conversation (a distinct first user message), in turn;
- `GrowingConversations`: conversations that gain a turn with every request, as a client
  resends its whole history each time (what the proxy's caches must make cheap);
- `FreshConversations`: a new conversation for every request (each one to be compacted
  afresh), and `ExtendedConversations`: those conversations each extended by one turn (each
  request finds the checkpoint its conversation's compaction left).

Bodies are serialized the way client SDKs do (`json.dumps`, default separators), and each
target gets its own cursor, so every target is sent the same sequence of requests.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

from bench.tokens import build_history
from proxy.core.messages import Message
from proxy.core.tokens import TokenCounter

_PHRASE = (
    "the service keeps a queue of pending jobs and retries each failed upload after a short "
    "backoff while the scheduler reports progress to the dashboard and the operator reviews "
    "alerts about latency memory and disk usage before the nightly deploy"
)
_WORDS = _PHRASE.split()


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def agent_history(counter: TokenCounter, tokens: int) -> list[Message]:
    """An agent-like history (tool calls, JSON and log results) of about `tokens` tokens."""
    return build_history(counter, tokens)


def chat_history(counter: TokenCounter, tokens: int) -> list[Message]:
    """A plain chat (user and assistant prose, a few facts) of about `tokens` tokens: nothing
    but a summary can shrink it."""
    rng = random.Random(11)
    history: list[Message] = [{"role": "system", "content": "You are a careful assistant."}]
    total, turn = counter.messages(history), 0
    while total < tokens:
        fact = f" Ticket OPS-{1000 + turn} tracks this step." if turn % 5 == 0 else ""
        pair: list[Message] = [
            {"role": "user", "content": _prose(rng, rng.randrange(30, 90)) + fact},
            {"role": "assistant", "content": _prose(rng, rng.randrange(60, 200))},
        ]
        history += pair
        total += counter.messages(pair)
        turn += 1
    return history


def with_identity(history: list[Message], name: str) -> list[Message]:
    """The same history as a conversation of its own: its first two body messages name it
    (the first is the pinned task; the second starts what a compaction summarizes, so no
    conversation finds another's summary of the same words)."""
    copy = list(history)
    named = 0
    for index, message in enumerate(copy):
        if message.get("role") not in ("system", "developer") and named < 2:
            copy[index] = {**message, "content": f"[{name}] {message.get('content') or ''}"}
            named += 1
    return copy


def short_turn(index: int) -> list[Message]:
    """A short turn (about 30 tokens): a user message, the answer to it."""
    rng = random.Random(index)
    return [
        {"role": "user", "content": f"Step {index}: " + _prose(rng, 8)},
        {"role": "assistant", "content": _prose(rng, 14)},
    ]


def next_turn(index: int) -> list[Message]:
    """Turn `index` of a conversation's continuation: a user message, the answer to it."""
    rng = random.Random(index)
    return [
        {"role": "user", "content": f"Step {index}: " + _prose(rng, 25)},
        {"role": "assistant", "content": _prose(rng, 40)},
    ]


class _Encoder:
    """Serializes a request around a list of messages, as client SDKs do."""

    def __init__(self, model: str, stream: bool) -> None:
        extra: dict[str, Any] = {"stream": True} if stream else {}
        head = json.dumps({"model": model, **extra, "messages": []})
        # `{"model": ..., "messages": [` + messages + `]}`: the messages are joined as text,
        # so a growing conversation is not serialized whole again for every request.
        self.prefix, self.suffix = head[:-2], head[-2:]

    def body(self, encoded_messages: list[str]) -> bytes:
        return (self.prefix + ", ".join(encoded_messages) + self.suffix).encode()


def _encoded(messages: list[Message]) -> list[str]:
    return [json.dumps(message) for message in messages]


class FixedPool:
    """`variants` conversations of the same history, sent in turn."""

    def __init__(self, history: list[Message], *, model: str, stream: bool, variants: int) -> None:
        encoder = _Encoder(model, stream)
        self._bodies = [
            encoder.body(_encoded(with_identity(history, f"pool {n}"))) for n in range(variants)
        ]
        self._cursor: defaultdict[str, int] = defaultdict(int)

    def take(self, target: str, count: int) -> list[bytes]:
        start = self._cursor[target]
        self._cursor[target] += count
        return [self._bodies[(start + i) % len(self._bodies)] for i in range(count)]


class GrowingConversations:
    """`conversations` conversations of one history, each gaining a short turn with every
    request it gets (they take turns): the history stays near its size over a long run."""

    def __init__(
        self, history: list[Message], *, model: str, conversations: int = 32, stream: bool = False
    ) -> None:
        self._encoder = _Encoder(model, stream)
        self._bases = [
            _encoded(with_identity(history, f"growing {n}")) for n in range(conversations)
        ]
        self._turns: list[str] = []
        self._cursor: defaultdict[str, int] = defaultdict(int)

    def take(self, target: str, count: int) -> list[bytes]:
        start = self._cursor[target]
        self._cursor[target] += count
        bodies = []
        for k in range(start, start + count):
            conversation, turn = k % len(self._bases), k // len(self._bases)
            while len(self._turns) < 2 * turn + 1:
                self._turns += _encoded(short_turn(len(self._turns) // 2))
            # Its turn-th request ends with user message `turn`, after each earlier turn.
            bodies.append(
                self._encoder.body(self._bases[conversation] + self._turns[: 2 * turn + 1])
            )
        return bodies


class FreshConversations:
    """A new conversation for every request: the same history under a new identity."""

    def __init__(self, history: list[Message], *, model: str) -> None:
        self._history = history
        self._encoder = _Encoder(model, stream=False)
        self._cursor: defaultdict[str, int] = defaultdict(int)

    def conversation(self, number: int) -> list[Message]:
        return with_identity(self._history, f"conversation {number}")

    def take(self, target: str, count: int) -> list[bytes]:
        start = self._cursor[target]
        self._cursor[target] += count
        return [self._encoder.body(_encoded(self.conversation(start + i))) for i in range(count)]


class ExtendedConversations:
    """Each of `conversations` extended by one new turn, in turn: every request continues a
    conversation the proxy has already compacted (its checkpoint exists)."""

    def __init__(self, conversations: list[list[Message]], *, model: str) -> None:
        self._encoded = [_encoded(messages) for messages in conversations]
        self._encoder = _Encoder(model, stream=False)
        self._cursor: defaultdict[str, int] = defaultdict(int)

    def take(self, target: str, count: int) -> list[bytes]:
        start = self._cursor[target]
        self._cursor[target] += count
        bodies = []
        for i in range(start, start + count):
            base = self._encoded[i % len(self._encoded)]
            bodies.append(self._encoder.body([*base, *_encoded(next_turn(i)[:1])]))
        return bodies
