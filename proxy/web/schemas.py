"""The session API's shapes, for validation of what comes in and for the OpenAPI document
(`/docs`). Field meanings are documented here once; the README points to `/docs`.

Where the API returns one of the core's records as it is (`CompactionRecord`, `TurnPoint`:
their `to_json`), the record's dataclass is the shape, and its field docstrings the
documentation (`use_attribute_docstrings`). The rest are the API's own shapes: envelopes, a
selection of a record's fields (`Session`, `CheckpointInfo`), or a record whose JSON adds to
it (`ContextReport`: see there).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.core import session
from proxy.core.policy import Strategy


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


class Session(_Shape):
    id: str
    tenant: str = Field(description="A hash of the credential the session's requests use.")
    model: str | None
    turns: int = Field(description="Chat completion requests of this session.")
    last_pressure: float | None = Field(
        description="Share of the usable window (window less output reserve) the last "
        "forwarded request filled."
    )
    compactions: int
    tokens_sent: int = Field(description="Prompt tokens the client sent, summed over turns.")
    tokens_forwarded: int = Field(description="Prompt tokens forwarded for them, summed.")
    tokens_saved: int = Field(description="tokens_sent - tokens_forwarded.")
    recalls: int = Field(
        default=0,
        description="context_recall calls the proxy answered in the session (calls its "
        "client never saw).",
    )
    last_seen: float | None = Field(description="Unix time of the last request.")


class SessionList(_Shape):
    object: Literal["list"]
    data: list[Session]
    limit: int
    offset: int
    has_more: bool


class Breakdown(_Shape):
    system: int
    tools: int
    summary: int
    messages: int
    tool_results: int
    placeholders: int
    total: int


class ContextReport(_Shape):
    # Not `session.ContextReport` itself: its `breakdown` is a plain mapping there, and the
    # API's adds `total`; these descriptions would have to move to the core's docstrings.
    window: int
    output_reserved: int
    pressure: float
    trigger: float = Field(description="compression_trigger: compaction starts at this pressure.")
    target: float = Field(description="compaction_target: the pressure compaction aims for.")
    calibration: float = Field(
        description="Provider tokens per token of our count, learned from `usage`."
    )
    tokens: int = Field(description="Our count of the forwarded request (before calibration).")
    breakdown: Breakdown | None = Field(
        description="By category; null when the session's archive has expired."
    )
    working_set: int = Field(
        default=0,
        description="Our count of the client's working set in the request (aider's files "
        "message: what it re-sends whole every request); 0 when it sends none.",
    )


class SessionDetail(Session):
    context: ContextReport | None = Field(description="The last forwarded request.")
    history: list[session.CompactionRecord]
    timeline: list[session.TurnPoint] = Field(description="The last 200 turns, oldest first.")


class Messages(_Shape):
    object: Literal["list"]
    view: Literal["original", "forwarded"]
    data: list[dict[str, Any]]


class CompactOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategy: Strategy | None = Field(
        default=None, description="The compaction strategy; the model's policy when left out."
    )


class CompactResult(_Shape):
    compacted: bool
    strategy: str | None
    tokens_before: int
    tokens_after: int
    summary_wait_s: float = Field(
        description="Seconds this call waited for the summarizer: an explicit compaction "
        "writes its summary at once, where a request's compaction never waits for one."
    )
    context: ContextReport


class CheckpointInfo(_Shape):
    covered: int = Field(description="Messages of the history the checkpoint replaced.")
    strategy: str
    created_at: float
    tokens_before: int
    tokens_after: int


class RevertResult(_Shape):
    reverted: bool
    checkpoint: CheckpointInfo | None


class Deleted(_Shape):
    id: str
    object: Literal["compaction.session"]
    deleted: bool


class ContextConfig(_Shape):
    """The `context` section of the configuration (see config/proxy.yaml)."""
