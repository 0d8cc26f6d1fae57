"""The session API's shapes, for validation of what comes in and for the OpenAPI document
(`/docs`). Field meanings are documented here once; the README points to `/docs`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.core.policy import Strategy


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


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


class CompactionRecord(_Shape):
    at: float
    trigger: str = Field(description="pressure, hook, overflow or manual.")
    strategy: str
    tokens_before: int
    tokens_after: int
    summarizer_model: str | None
    summarizer_tokens: int
    steps: list[str] = Field(
        default_factory=list,
        description="Every reduction used, in order (clear_tool_results, summarize, truncate, "
        "release_task, trim_recent, cap_recent, ...).",
    )


class TurnPoint(_Shape):
    turn: int
    at: float
    pressure: float
    tokens_before: int = Field(description="What the client's request counts (calibrated).")
    tokens_after: int = Field(description="What was forwarded for it (calibrated).")
    action: str = Field(description="`none`, or the compaction applied on this turn.")


class SessionDetail(Session):
    context: ContextReport | None = Field(description="The last forwarded request.")
    history: list[CompactionRecord]
    timeline: list[TurnPoint] = Field(description="The last 200 turns, oldest first.")


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
