"""Context policy: the compaction settings that apply to one model.

The settings layer converts the `context:` section and each `models:` entry into frozen
`ContextPolicy` values once at startup; request handling only looks them up.

`ContextPolicy` is the one declaration of these keys: their names, types, defaults, meaning
and valid ranges. The ranges are `annotated_types` constraints on the types (data, not
checks: pydantic enforces them where the settings are read, `proxy.settings` derives its
`context` and `models:` models from this class, and the core itself never re-checks them).

Model names are matched case-insensitively (environment variables cannot keep case). A
`models:` key is either an exact model name or a shell-style pattern (`gpt-4o*`, `*llama*`);
an exact name wins, then the most specific pattern (the most non-wildcard characters).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, get_args

from annotated_types import Ge, Gt, Interval

Strategy = Literal["auto", "trim_tool_results", "clear_tool_results", "summarize", "truncate"]
"""`auto` runs every layer cheapest first; the others run one layer alone."""

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

Tokens = Annotated[int, Gt(0)]
"""A positive number of tokens."""
Count = Annotated[int, Ge(0)]
"""A number of messages or turns; 0 is allowed (it switches the feature off where it says so)."""
Share = Annotated[float, Interval(gt=0, le=1)]
"""A share of the usable input (or of the window): 0 < x <= 1."""

_WILDCARDS = frozenset("*?[]")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """How to keep one model's requests inside its window.

    `context_window` is the model's total window in tokens (prompt and output together);
    None means "not configured": the window is then detected or defaulted later.
    """

    context_window: Tokens | None = None
    output_reserved: Annotated[int, Ge(0)] = 4096
    """The output reserved when a request states none (capped at a quarter of the window)."""
    safety_margin: Annotated[float, Interval(ge=0, lt=0.5)] = 0.03
    """Share of the window kept free for the error of our token estimate."""
    strategy: Strategy = "auto"
    keep_recent: Count = 10
    """The most messages the recent window keeps (it is also bounded in tokens)."""
    compression_trigger: Share = 0.85
    """Compact when the prompt passes this share of the usable input."""
    prepare_at: Share | None = None
    """Write the summary of the next compaction in the background from this share of the
    usable input on, so that no request waits for a summary (None: `preparation_level`)."""
    compaction_target: Share = 0.45
    """Every compaction lands at or below this share of the usable input (below the trigger:
    see `check`)."""
    summary_max_tokens: Tokens = 1024
    """The summary's cap; within it the summary gets `summary_share` of the usable input."""
    summary_share: Annotated[float, Interval(gt=0, lt=1)] = 0.06
    ledger_share: Annotated[float, Interval(ge=0, lt=1)] = 0.10
    """Share of the usable input the verbatim ledger of the user's words may take."""
    auto_compact: bool = True
    tool_result_max_share: Share = 0.5
    """A single tool result larger than this share of the window is cut."""
    cooldown_turns: Count = 2
    max_context_turns: Count = 0
    """Only this many recent user turns are kept whole (0: off)."""
    pin_first_user: bool = True
    recall: bool = True
    """Let the model recall what compaction removed: placeholders and notes name an id, and
    a request that offers tools also offers `context_recall`, which the proxy answers from its
    archive (`proxy.core.recall`)."""
    recall_max_rounds: Count = 2
    """How many times one request may be answered with recalled content before the model
    must answer (0: the tool is offered, but its calls are removed from the answer)."""
    recall_max_share: Share = 0.25
    """The most of the usable input one recalled result may take; a larger one is cut to its
    head and tail."""

    def check(self) -> None:
        """Raise ValueError if the fields contradict each other (each is valid alone)."""
        # Hysteresis: compacting to at or above the trigger would fire again next turn.
        if self.compaction_target >= self.compression_trigger:
            raise ValueError("compaction_target must be below compression_trigger")
        if self.prepare_at is not None and self.prepare_at > self.compression_trigger:
            raise ValueError("prepare_at must be at or below compression_trigger")

    @property
    def preparation_level(self) -> float:
        """Where summaries start being prepared: `prepare_at`, else 0.15 below the trigger
        (0.70 for the default 0.85), never below half the trigger. A request grows the
        prompt by a few percent of the window at most in most agents, so this leaves several
        requests for a summary to be written before the trigger is reached."""
        if self.prepare_at is not None:
            return min(self.prepare_at, self.compression_trigger)
        return max(self.compression_trigger - 0.15, self.compression_trigger / 2)

    def replace(self, **changes: Any) -> ContextPolicy:
        """A copy with `changes` applied (the keys a `models:` entry overrides)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ModelPolicies:
    """The default policy plus per-model overrides, looked up by model name."""

    default: ContextPolicy = ContextPolicy()
    overrides: Mapping[str, ContextPolicy] = field(default_factory=dict)
    windows: Mapping[str, int] = field(default_factory=dict)
    """The windows `models:` entries set explicitly (the default's is only a fallback)."""

    def __post_init__(self) -> None:
        for name in ("overrides", "windows"):
            lowered = {key.lower(): value for key, value in getattr(self, name).items()}
            object.__setattr__(self, name, lowered)

    def for_model(self, model: str | None) -> ContextPolicy:
        """The policy for `model`: its exact entry, else its most specific pattern, else default."""
        return _lookup(self.overrides, model) or self.default

    def configured_window(self, model: str | None) -> int | None:
        """The window a `models:` entry sets for `model`, if one does."""
        return _lookup(self.windows, model)


def _lookup(table: Mapping[str, _T], model: str | None) -> _T | None:
    if not model:
        return None
    wanted = model.lower()
    if wanted in table:
        return table[wanted]
    matches = [
        (_specificity(name), value)
        for name, value in table.items()
        if _WILDCARDS & set(name) and fnmatch.fnmatchcase(wanted, name)
    ]
    return max(matches, key=lambda match: match[0])[1] if matches else None


def _specificity(pattern: str) -> int:
    return sum(1 for char in pattern if char not in _WILDCARDS)
