"""What a workload is: its user turns, the statements planted in them, its agent's script."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from proxy.mock_upstream import AgentScript

Kind = Literal["rule", "constraint", "fact", "goal", "preference", "note", "artifact"]
KINDS: Final[tuple[Kind, ...]] = ("rule", "constraint", "fact", "goal", "preference")
"""The kinds of the typed statements."""
LABELLED_KINDS: Final[tuple[Kind, ...]] = (
    "fact",
    "goal",
    "preference",
    "rule",
    "constraint",
    "note",
)
WorkloadKey = Literal[
    "tool-heavy",
    "chatty",
    "typed",
    "labelled",
    "artifacts",
    "oversized-result",
    "fixed-heavy",
    "recall",
    # Issue 38: client shapes the earlier workloads did not take.
    "aider",
    "paste-per-turn",
    "long-turn",
    "schema-heavy",
    "fixed-heavy-pastes",
]
WORKLOADS: Final[tuple[WorkloadKey, ...]] = get_args(WorkloadKey)
TITLES: Final[dict[str, str]] = {
    "tool-heavy": "tool-heavy agent",
    "chatty": "chatty assistant",
    "typed": "typed statements",
    "labelled": "labelled statements",
    "artifacts": "tool-only identifiers",
    "oversized-result": "oversized newest result",
    "fixed-heavy": "fixed-heavy agent",
    "recall": "recall of a compacted value",
    "aider": "aider-shaped client",
    "paste-per-turn": "a paste per turn",
    "long-turn": "long single turns",
    "schema-heavy": "tool-schema-heavy client",
    "fixed-heavy-pastes": "fixed-heavy agent with pastes",
}

# Framing the counter adds per message and per tool call: close enough for planning.
MESSAGE_TOKENS: Final = 4
CALL_TOKENS: Final = 30


@dataclass(frozen=True, slots=True)
class Statement:
    """Something said that must reach the model (the user's words, or the first line of a
    tool result): `key` is checked verbatim.

    Statements sharing a `topic` update one another: only the latest one's key is checked,
    and the earlier ones' keys are stale (see `Workload.stale`).
    """

    kind: Kind
    text: str
    key: str
    topic: str = ""


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str
    tool_tokens: tuple[int, ...]
    """The size of each tool result the client returns this turn, in tokens."""
    texts: tuple[str | None, ...] = ()
    """The text of each of this turn's first tool results where the workload wrote it (None:
    one of the planned size is generated, as for every result after these)."""
    working_set: str = ""
    """What the client re-sends with every request of this turn, just before its ask (aider's
    files message: the files added to the chat, in their version of this turn); "" for none.
    It is no part of the history the client keeps: the next turn sends its own version."""
    sentences: tuple[str, ...] = ()
    """The user's sentences in `text`, where the workload judges each one in every later
    request (in the ledger or a forwarded message); () when it does not."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A value one file read returned, which the user asks for late in the session."""

    key: str
    """In capitals, as the mock's recaller reads a question (`value of KEY`)."""
    value: str
    """No id, path or number shape: no trail or ledger of the proxy's keeps it."""
    path: str
    """The file whose read returned it (the `read_file` call's `path`)."""

    @property
    def question(self) -> str:
        return f"What is the exact value of {self.key} in {self.path}?"

    @property
    def line(self) -> str:
        """The line of the file that gives it."""
        return f"{self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class Workload:
    key: WorkloadKey
    system: str
    tools: tuple[dict[str, Any], ...]
    script: AgentScript
    turns: tuple[UserTurn, ...]
    statements: tuple[Statement, ...]
    """Every statement planted, updates included, in the order the user makes them."""
    running_turn: bool = False
    """Judge every forwarded request for the running turn: its user message forwarded in
    place, and every tool round the client sent after it."""
    result_items: int = 0
    """The items of the session's first tool result, a JSON array too large to forward
    whole: judge that every later request forwards it cut, with its "showing N of M items"
    note (0: nothing to judge)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """The text of a `read_file` result by the `path` its call asks for: the workload's
    written files, whichever round of the session reads them."""
    asked: tuple[Asked, ...] = ()
    """The values the last user turns ask for, one a turn, in order (the mock plays a model
    that recalls what a compaction removed: `MockUpstream(recaller=True)`)."""
    preamble: tuple[tuple[str, str], ...] = ()
    """(user, assistant) exchanges the client sends after its system prompt on every request,
    before the history: aider's few-shot examples and its "new code base" exchange."""
    working_reply: str = ""
    """The assistant message the client puts after each turn's working set (aider's "Ok, any
    changes I propose will be to those files.")."""
    pastes: tuple[str, ...] = ()
    """The bulk the user pasted into their turns (logs): data, not the user's words, so no
    line of it may be copied into the compaction block's ledger."""
    name_calls: bool = False
    """Judge that every tool round of the running turn a request no longer carries is named
    in its compaction block (a long single turn's progress)."""

    @property
    def calls(self) -> int:
        """Model calls the session makes: each user turn's tool rounds, then its answer."""
        return sum(len(turn.tool_tokens) + 1 for turn in self.turns)

    @property
    def checks(self) -> tuple[Statement, ...]:
        """What must be in the last forwarded request: each topic's latest statement."""
        latest: dict[str, Statement] = {}
        for statement in self.statements:
            latest.pop(statement.topic or statement.key, None)  # keeps first-seen order
            latest[statement.topic or statement.key] = statement
        return tuple(latest.values())

    @property
    def stale(self) -> tuple[Statement, ...]:
        """The statements a later one of the same topic replaced: their keys must be gone
        from the compaction block."""
        latest = {s.topic: s for s in self.statements if s.topic}
        return tuple(s for s in self.statements if s.topic and latest[s.topic] is not s)


@dataclass(frozen=True, slots=True)
class Plan:
    """How long a session to build: `history_tokens` of the client's history at the end,
    but no more than `max_calls` model calls; `bulk` scales model and tool output."""

    history_tokens: int
    max_calls: int
    bulk: float = 1.0
    window: int = 0
    """The cell's window, for the workloads whose sizes follow it (aider's files, a long
    turn's results); 0: a third of `history_tokens` stands in for it."""

    @property
    def scale(self) -> int:
        """The window the sizes that follow it are taken from."""
        return self.window or self.history_tokens // 3
