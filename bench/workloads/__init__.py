"""The effectiveness matrix's workloads: scripted sessions, deterministic and seeded.

A workload is what a client says and what its tools return, planned before the session
runs: the user turns (with the statements planted in them), the size of every tool result
(or its text, where the workload writes it), and the model's answers (played by
`proxy.mock_upstream`'s `AgentScript`). Thirteen of them:

- `tool-heavy`: a coding agent; each user turn (about 2,600 tokens) is a user message, two
  tool calls (one per round) with results of log-normal size around 900 tokens, and a reply
  of about 200 tokens. Ten facts the user states are planted in the first half of the turns.
- `chatty`: an assistant without tools; user messages of 30-150 tokens, replies of 200-600,
  the same ten facts planted the same way.
- `typed`: a user making typed statements (safety rules, hard constraints, facts, goal
  state, preferences), some of them updated later with a new value; every user turn is
  followed by one tool round trip (a result of 300-900 tokens) and an answer.
- `labelled`: the same shape, the statements written under shared category labels as users
  and agent frameworks write them (`FACT: ...`, `GOAL STATE: ...`, `USER PREFERENCE: ...`,
  `Note: ...`, `TODO: ...`), with stale updates of one subject and near-duplicates about
  different subjects; the replaced values must be gone from the compaction block.
- `artifacts`: a tool-heavy agent whose early tool results alone carry identifiers in their
  first lines (a build id, a checksum, a version, a path), which the user asks for at the end.
- `oversized-result`: one tool result of about 72k tokens (a JSON array of 4,000 files), then
  "Which is biggest?": the result must be forwarded cut, never cleared or dropped.
- `fixed-heavy`: an agent with a Codex-sized head (about 7,500 tokens of instructions and tool
  schemas) whose user turns are about 7k tokens each: a pasted file chunk and many small
  tool rounds, so that the running turn alone outgrows the room the head leaves.
- `recall`: the artifacts agent reading distinct files, five of which give a value the last
  turns ask for (`bench.workloads.agents`).

Issue 38's, client shapes the ones above did not take (`clients.py`, `pastes.py`,
`schemas.py`):

- `aider`: aider's requests, rebuilt every turn with the files added to the chat as one user
  message (0.45 of the window) just before the ask: the client's working set.
- `paste-per-turn`: the tool-heavy agent whose every turn pastes ~600 tokens of unique log
  beside at most one of the ten facts.
- `long-turn`: two user messages each running 25 tool rounds (opencode's long single turns).
- `schema-heavy`: tool schemas about 0.9 of a 6k window's usable input, ten short turns with
  the values their calls need.
- `fixed-heavy-pastes`: 4k tokens of instructions and eight tools, 2.5k-token pastes and two
  ~800-token results a turn, on a 16k window.

What is checked afterwards is a set of exact substrings (a paraphrase is a loss, as in the
evaluations the proxy must pass); for an updated statement, its latest value. No generated
filler can produce a checked substring: the filler's words come from fixed vocabularies
without digits, and its digits only number lines and tests.

`bulk` multiplies the sizes of what the model and the tools produce (never the user's own
messages): the 128k cells use it so that they reach several compactions in about as many
model calls as the 32k cells.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from bench.workloads.agents import (
    FIXED_HEAD_TOKENS,
    LISTED_FILES,
    RECALL_PLAN,
    RECALLED,
    artifacts,
    chatty,
    file_listing,
    fixed_heavy,
    labelled,
    oversized_result,
    recall,
    tool_heavy,
    typed,
)
from bench.workloads.clients import aider, long_turn
from bench.workloads.filler import TOOLS, prose, spread, tool_output
from bench.workloads.model import (
    KINDS,
    LABELLED_KINDS,
    TITLES,
    WORKLOADS,
    Asked,
    Kind,
    Plan,
    Statement,
    UserTurn,
    Workload,
    WorkloadKey,
)
from bench.workloads.pastes import fixed_heavy_pastes, paste_per_turn
from bench.workloads.said import (
    ARTIFACTS,
    ARTIFACTS_QUESTION,
    FACTS,
    LABELLED,
    LABELLED_UPDATES,
    TYPED,
    UPDATES,
)
from bench.workloads.schemas import schema_heavy
from proxy.core.tokens import TokenCounter

BUILDERS: Final[dict[WorkloadKey, Callable[[Plan, TokenCounter], Workload]]] = {
    "tool-heavy": tool_heavy,
    "chatty": chatty,
    "typed": typed,
    "labelled": labelled,
    "artifacts": artifacts,
    "oversized-result": oversized_result,
    "fixed-heavy": fixed_heavy,
    "recall": recall,
    "aider": aider,
    "paste-per-turn": paste_per_turn,
    "long-turn": long_turn,
    "schema-heavy": schema_heavy,
    "fixed-heavy-pastes": fixed_heavy_pastes,
}

__all__ = [
    "ARTIFACTS",
    "ARTIFACTS_QUESTION",
    "BUILDERS",
    "FACTS",
    "FIXED_HEAD_TOKENS",
    "KINDS",
    "LABELLED",
    "LABELLED_KINDS",
    "LABELLED_UPDATES",
    "LISTED_FILES",
    "RECALLED",
    "RECALL_PLAN",
    "TITLES",
    "TOOLS",
    "TYPED",
    "UPDATES",
    "WORKLOADS",
    "Asked",
    "Kind",
    "Plan",
    "Statement",
    "UserTurn",
    "Workload",
    "WorkloadKey",
    "file_listing",
    "prose",
    "spread",
    "tool_output",
]
