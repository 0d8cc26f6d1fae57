"""Hooks: configured rules that turn the facts of a turn into actions.

A hook fires `on` an event (`turn_start`, before forwarding; `turn_end`, after the answer)
when its condition holds and its own cooldown (seconds) has passed since it last fired. The
core only decides which actions are due; the service performs them (compacts, injects the
message, logs the line) and records when each hook fired.

With `auto_compact` on and no compaction hook declared, the default hook is the one the
`context` settings describe: at turn start, when pressure reaches `compression_trigger`,
compact (subject to the turn cooldown; user hooks compact whatever the pressure and the
turn cooldown, since they are explicit).

The conditions and actions below are also the `hooks:` section's schema: `proxy.settings`
validates each `condition:`/`action:` mapping straight into one of these classes, picked by
its `type:` key, the class name in snake_case (`ContextPressure` is `context_pressure`). So
a new condition or action is one class here, added to the `Condition` or `Action` union;
its fields are its config keys, and their `annotated_types` constraints are their ranges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Gt

from proxy.core.policy import Count, Strategy, Tokens

Event = Literal["turn_start", "turn_end"]
Role = Literal["system", "developer", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What a condition can look at, and what a message template can say."""

    turn: int
    tokens: int
    messages: int
    pressure: float
    tool_calls: int


@dataclass(frozen=True, slots=True)
class ContextPressure:
    """The prompt fills at least `threshold` of the usable input."""

    threshold: Annotated[float, Gt(0)]

    def holds(self, facts: TurnFacts) -> bool:
        return facts.pressure >= self.threshold


@dataclass(frozen=True, slots=True)
class TurnCount:
    """Every `count` turns."""

    count: Annotated[int, Ge(1)]

    def holds(self, facts: TurnFacts) -> bool:
        return facts.turn > 0 and facts.turn % self.count == 0


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """At least `threshold` tool calls in the conversation."""

    threshold: Annotated[int, Ge(1)]

    def holds(self, facts: TurnFacts) -> bool:
        return facts.tool_calls >= self.threshold


@dataclass(frozen=True, slots=True)
class MessageCount:
    """At least `threshold` messages in the conversation."""

    threshold: Annotated[int, Ge(1)]

    def holds(self, facts: TurnFacts) -> bool:
        return facts.messages >= self.threshold


@dataclass(frozen=True, slots=True)
class Always:
    """Every turn (the condition a hook without one has)."""

    def holds(self, facts: TurnFacts) -> bool:
        return True


Condition = ContextPressure | TurnCount | ToolCalls | MessageCount | Always


@dataclass(frozen=True, slots=True)
class CompactContext:
    """Compact now; unset fields take the model's context policy."""

    strategy: Strategy | None = None
    keep_recent: Count | None = None
    summary_max_tokens: Tokens | None = None
    force: bool = field(default=True, metadata={"config": False})
    """False only for the default hook, which keeps the trigger and turn cooldown checks.
    Not a config key (`config: False`): a declared hook always forces."""


@dataclass(frozen=True, slots=True)
class InjectMessage:
    """Add a message to the forwarded conversation (at its end, before the model answers)."""

    message: str
    role: Role = "system"


@dataclass(frozen=True, slots=True)
class Log:
    """Write a line to the proxy's log."""

    message: str


Action = CompactContext | InjectMessage | Log


@dataclass(frozen=True, slots=True)
class Hook:
    on: Event
    condition: Condition
    action: Action
    cooldown_s: float = 0.0


def with_default_hook(
    hooks: Sequence[Hook], *, auto_compact: bool, trigger: float
) -> tuple[Hook, ...]:
    """`hooks`, plus the default compaction hook when auto-compaction is on and none of the
    declared hooks compacts."""
    if not auto_compact or any(isinstance(hook.action, CompactContext) for hook in hooks):
        return tuple(hooks)
    default = Hook("turn_start", ContextPressure(trigger), CompactContext(force=False))
    return (*hooks, default)


def due_actions(
    hooks: Sequence[Hook],
    event: Event,
    facts: TurnFacts,
    *,
    now: float,
    last_fired: Mapping[int, float],
) -> list[tuple[int, Action]]:
    """The actions due at `event`, with the index of the hook each came from.

    `now` and `last_fired` (hook index to the time it last fired) are seconds on any one
    clock; the caller records `now` for every hook index returned.
    """
    due = []
    for index, hook in enumerate(hooks):
        if hook.on != event or not hook.condition.holds(facts):
            continue
        fired = last_fired.get(index)
        if fired is not None and now - fired < hook.cooldown_s:
            continue
        due.append((index, _rendered(hook.action, facts)))
    return due


def _rendered(action: Action, facts: TurnFacts) -> Action:
    if isinstance(action, InjectMessage):
        return InjectMessage(render_template(action.message, facts), action.role)
    if isinstance(action, Log):
        return Log(render_template(action.message, facts))
    return action


def render_template(template: str, facts: TurnFacts) -> str:
    """`template` with `{turn}`, `{tokens}`, `{messages}` and `{pressure}` filled in; other
    braces are left as written (a hook message is not code)."""
    values = {
        "{turn}": str(facts.turn),
        "{tokens}": str(facts.tokens),
        "{messages}": str(facts.messages),
        "{pressure}": f"{facts.pressure:.0%}",
    }
    for placeholder, value in values.items():
        template = template.replace(placeholder, value)
    return template
