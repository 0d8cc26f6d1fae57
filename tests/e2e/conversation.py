"""The client's side of a real run: a long conversation through the proxy, and what it left.

Each user turn is a log excerpt of about 150 tokens, so thirty turns with their answers are
three times the model's 2,048-token window. Facts are planted in early turns (a ticket id, a
path) that the proxy must carry through its summaries; the last turn asks for them back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from redis.asyncio import Redis

from proxy.adapters.store import RedisStore
from proxy.core.messages import Message
from proxy.core.session import Checkpoint, SessionState, chain_hashes, split_head
from proxy.settings import RedisSettings

TICKET = "ZX-4411"
CONFIG_PATH = "/etc/relay/queues.d/billing.yaml"
PLANTED = {2: TICKET, 4: CONFIG_PATH}
"""The facts, by the turn whose user message states them."""
FACTS = {
    2: f"File everything under ticket {TICKET}.",
    4: f"The queue settings live in {CONFIG_PATH}; never edit them by hand.",
}
QUESTION = "Last question: which ticket id and which config file did I mention? Name both."
# A few seconds per answer on two cores; enough for a sentence.
MAX_TOKENS = 48

_EVENTS = (
    "retried the payment batch after a 502 from the card gateway",
    "flushed 3,200 rows to the ledger table in 41 ms",
    "lost its lease on queue billing-high and reconnected",
    "logged a slow query on invoices (2.7 s, full scan)",
    "restarted after the health check timed out twice",
    "dropped 12 duplicate webhook deliveries",
)


def user_turn(turn: int) -> str:
    """Turn `turn`'s message: a fact when one is planted there, then a log excerpt."""
    lines = [f"Incident review, part {turn}. {FACTS.get(turn, '')}".rstrip(), "Log excerpt:"]
    lines += [
        f"- worker-{(turn * 7 + n) % 13} {_EVENTS[(turn + n) % len(_EVENTS)]}" for n in range(7)
    ]
    lines.append("In one sentence, what stands out in this excerpt?")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's outcome as the client saw it, headers included."""

    applied: str
    tokens_before: int
    tokens_after: int
    prompt_tokens: int
    """llama.cpp's own count of the prompt it was sent (the forwarded one)."""
    history_tokens: int
    """The same count for the client's whole history, as the client sent it."""
    seconds: float
    session: str


@dataclass
class Conversation:
    """A client that resends its whole history every turn, as agents do."""

    sdk: openai.OpenAI
    model: str
    count: Callable[[Sequence[Message]], int]
    """The model's token count of a list of messages."""
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    def say(self, text: str) -> str:
        """Send one user turn; returns the answer (any error status raises)."""
        self.messages.append({"role": "user", "content": text})
        started = time.monotonic()
        params: dict[str, Any] = {"model": self.model, "messages": self.messages}
        raw = self.sdk.chat.completions.with_raw_response.create(
            **params, max_tokens=MAX_TOKENS, temperature=0
        )
        completion = raw.parse()
        seconds = time.monotonic() - started
        answer = completion.choices[0].message.content or ""
        self.messages.append({"role": "assistant", "content": answer})
        self.turns.append(
            Turn(
                applied=raw.headers["x-compaction-applied"],
                tokens_before=int(raw.headers["x-compaction-tokens-before"]),
                tokens_after=int(raw.headers["x-compaction-tokens-after"]),
                prompt_tokens=completion.usage.prompt_tokens if completion.usage else 0,
                history_tokens=self.count(self.messages[:-1]),
                seconds=seconds,
                session=raw.headers["x-session-id"],
            )
        )
        return answer

    def sent(self) -> list[Message]:
        """The last request's messages (the history without the last answer)."""
        return self.messages[:-1]


@dataclass(frozen=True, slots=True)
class Stored:
    """What Redis holds about the conversation after the run."""

    state: SessionState
    archived: list[Message]
    checkpoint: Checkpoint | None
    """The checkpoint the last request was forwarded with (the store's own lookup)."""
    checkpoints: list[Checkpoint]
    """Every checkpoint along the conversation, oldest first (read by the key schema)."""
    learned_window: int | None

    def first_condensing(self, turn: int) -> Checkpoint | None:
        """The first checkpoint that condensed turn `turn`'s user message."""
        index = 2 * (turn - 1)  # the body alternates user and assistant, from turn 1
        return next((c for c in self.checkpoints if c.covered > index), None)

    def facts_kept(self) -> bool:
        """Whether the last request was forwarded with every planted fact still in it."""
        frozen = json.dumps(self.checkpoint.messages) if self.checkpoint else ""
        return all(fact in frozen for fact in PLANTED.values())


def read_session(redis_url: str, session: str, sent: list[Message], model: str) -> Stored:
    """The session `session` as stored, read back through the proxy's own store adapter, and
    its checkpoints straight from Redis by the key schema in
    `proxy/adapters/store/redis_store.py`."""
    return asyncio.run(_read(redis_url, session, sent, model))


async def _read(redis_url: str, session: str, sent: list[Message], model: str) -> Stored:
    store = RedisStore.connect(RedisSettings(url=redis_url))
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        found = await store.list_sessions(None)
        tenant, _, state = next(entry for entry in found if entry[1] == session)
        hashes = chain_hashes(split_head(sent)[1])
        # Each checkpoint is keyed by the chain hash of the prefix it replaced, and the client
        # only ever appended, so all of them are among the last request's chain hashes.
        tag = f"cp:{{s:{tenant}:{session}}}"
        values = await client.hmget(f"{tag}:checkpoints", hashes)
        return Stored(
            state=state,
            archived=await store.archived(tenant, session),
            checkpoint=await store.find_checkpoint(tenant, session, hashes),
            checkpoints=[Checkpoint.from_json(json.loads(v)) for v in values if v is not None],
            learned_window=await store.learned_window(tenant, model),
        )
    finally:
        await client.aclose()
        await store.aclose()


@dataclass(frozen=True, slots=True)
class RunReport:
    """A run's numbers, for the end of the test session and bench/README.md."""

    name: str
    turns: list[Turn]
    stored: Stored
    recalled: bool
    """Whether the model's last answer named the planted ticket id (not asserted: 270M)."""
    seconds: float

    @property
    def tokens_sent(self) -> int:
        """The client's prompts: every turn's whole history, in the model's tokens."""
        return sum(turn.history_tokens for turn in self.turns)

    @property
    def tokens_forwarded(self) -> int:
        """What llama.cpp received instead, by its own count."""
        return sum(turn.prompt_tokens for turn in self.turns)

    def describe(self) -> str:
        history = self.stored.state.history
        summaries = [record for record in history if record.strategy == "summarize"]
        overflows = sum(record.trigger == "overflow" for record in history)
        applied = {
            header: [number for number, turn in enumerate(self.turns, 1) if turn.applied == header]
            for header in sorted({turn.applied for turn in self.turns} - {"none"})
        }
        compacted = "; ".join(f"{header} on turns {numbers}" for header, numbers in applied.items())
        return (
            f"{self.name}: {len(self.turns)} turns in {self.seconds:.0f} s; the last request "
            f"{self.turns[-1].history_tokens:,} tokens, forwarded as "
            f"{self.turns[-1].prompt_tokens:,}; all turns: sent {self.tokens_sent:,}, "
            f"forwarded {self.tokens_forwarded:,} (largest "
            f"{max(turn.prompt_tokens for turn in self.turns):,}); {len(history)} compactions: "
            f"{len(summaries)} summaries by the model "
            f"({sum(record.summarizer_tokens for record in summaries):,} tokens), "
            f"{overflows} overflows caught and retried; {compacted or 'no compaction'}; "
            f"learned window {self.stored.learned_window}; planted facts in the last "
            f"forwarded prompt: {'yes' if self.stored.facts_kept() else 'no'}; the model "
            f"recalled {TICKET}: {'yes' if self.recalled else 'no'}"
        )
