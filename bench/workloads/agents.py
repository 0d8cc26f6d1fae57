"""The earlier issues' workloads: coding and operations agents, a chatty assistant, a head-heavy
agent, an oversized result, recall (the package's docstring says what each is)."""

from __future__ import annotations

import json
import random
from typing import Any, Final

from bench.workloads.filler import (
    MODULES,
    NAMES,
    TOOLS,
    Draft,
    agent_script,
    new_draft,
    prose,
    schema,
    spread,
    tool_output,
    user_turns,
)
from bench.workloads.model import Asked, Plan, Statement, UserTurn, Workload, WorkloadKey
from bench.workloads.said import (
    ARTIFACTS,
    ARTIFACTS_QUESTION,
    FACTS,
    LABELLED,
    LABELLED_UPDATES,
    TYPED,
    UPDATES,
)
from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript


def tool_heavy(plan: Plan, counter: TokenCounter) -> Workload:
    """About 2,600 tokens a user turn: a ~430-token request, two ~900-token tool results,
    a ~200-token reply; the facts in the first half of the turns."""
    draft = new_draft(plan, counter, seed=101)
    while draft.room(3) or not draft.bodies:
        request = "Next step of the refactoring. " + prose(draft.rng, 430, counter)
        tools = (draft.sized(900, 0.35, 300, 2700), draft.sized(900, 0.35, 300, 2700))
        answer = prose(draft.rng, round(draft.rng.uniform(150, 250) * plan.bulk), counter)
        draft.add(request, tools, answer)
    placed = spread(FACTS, len(draft.bodies), 0.0, 0.5)
    return Workload(
        "tool-heavy",
        "You are a coding agent working in the user's repository.",
        TOOLS,
        agent_script(2, tuple(draft.answers)),
        user_turns(draft, placed),
        FACTS,
    )


def chatty(plan: Plan, counter: TokenCounter) -> Workload:
    """No tools: questions of 30-150 tokens, answers of 200-600; the facts as above."""
    draft = new_draft(plan, counter, seed=202)
    while draft.room(1) or not draft.bodies:
        question = prose(draft.rng, draft.rng.randint(30, 150), counter)
        answer = prose(draft.rng, round(draft.rng.uniform(200, 600) * plan.bulk), counter)
        draft.add(question, (), answer)
    placed = spread(FACTS, len(draft.bodies), 0.0, 0.5)
    return Workload(
        "chatty",
        "You are a helpful assistant.",
        (),
        agent_script(0, tuple(draft.answers)),
        user_turns(draft, placed),
        FACTS,
    )


def typed(plan: Plan, counter: TokenCounter) -> Workload:
    """Typed statements in the first half of the turns, their updates at 55-75 %; every
    turn has one tool round trip (300-900 tokens) and a short answer."""
    return _statements("typed", plan, counter, 303, (TYPED, UPDATES))


def labelled(plan: Plan, counter: TokenCounter) -> Workload:
    """The typed workload's shape with labelled statements: the first ones in the first half
    of the turns, the updates of three subjects at 55-75 %."""
    return _statements("labelled", plan, counter, 404, (LABELLED, LABELLED_UPDATES))


def _statements(
    key: WorkloadKey,
    plan: Plan,
    counter: TokenCounter,
    seed: int,
    said: tuple[tuple[Statement, ...], tuple[Statement, ...]],
) -> Workload:
    """A user making `said[0]` in the first half of the turns and `said[1]` (updates) at
    55-75 %; every turn has one tool round trip (300-900 tokens) and a short answer."""
    first, updates = said
    draft = new_draft(plan, counter, seed=seed)
    while draft.room(2) or not draft.bodies:
        request = "Please look into this. " + prose(draft.rng, draft.rng.randint(15, 40), counter)
        result = round(draft.rng.uniform(300, 900) * plan.bulk)
        answer = prose(draft.rng, round(draft.rng.uniform(60, 140) * plan.bulk), counter)
        draft.add(request, (result,), answer)
    turns = len(draft.bodies)
    placed = spread(first, turns, 0.0, 0.5)
    for turn, later in spread(updates, turns, 0.55, 0.75).items():
        placed.setdefault(turn, []).extend(later)
    return Workload(
        key,
        "You are an operations agent; use the tools to answer.",
        TOOLS,
        agent_script(1, tuple(draft.answers)),
        user_turns(draft, placed),
        (*first, *updates),
    )


def artifacts(plan: Plan, counter: TokenCounter) -> Workload:
    """A tool-heavy agent with ~600-token results: the identifiers open early results (in
    the first quarter of them, from the second turn on), the last turn asks for them."""
    draft = new_draft(plan, counter, seed=505)
    while draft.room(3) or not draft.bodies:
        request = "Next step of the release. " + prose(
            draft.rng, draft.rng.randint(60, 160), counter
        )
        tools = (draft.sized(600, 0.3, 300, 1200), draft.sized(600, 0.3, 300, 1200))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, tools, answer)
    draft.bodies[-1] = ARTIFACTS_QUESTION
    return Workload(
        "artifacts",
        "You are a release agent working in the user's repository.",
        TOOLS,
        agent_script(2, tuple(draft.answers)),
        user_turns(draft, {}, _identifier_results(draft, counter)),
        ARTIFACTS,
    )


def _identifier_results(draft: Draft, counter: TokenCounter) -> dict[int, tuple[str | None, ...]]:
    """Each identifier as the first line of one early result, the rest of it a test log of
    the planned size: spread over the first quarter of the results after the first turn."""
    slots = [(t, r) for t in range(1, len(draft.bodies)) for r in range(len(draft.tool_tokens[t]))]
    early = slots[: max(len(ARTIFACTS), len(slots) // 4)]
    written: dict[int, list[str | None]] = {}
    for index, statement in enumerate(ARTIFACTS):
        turn, round_ = early[index * len(early) // len(ARTIFACTS)]
        texts = written.setdefault(turn, [None] * len(draft.tool_tokens[turn]))
        size = draft.tool_tokens[turn][round_]
        log = tool_output("run_tests", size - counter.text(statement.text), 900 + index, counter)
        texts[round_] = f"{statement.text}\n{log}"
    return {turn: tuple(texts) for turn, texts in written.items()}


LISTED_FILES: Final = 4_000


def file_listing(count: int = LISTED_FILES) -> str:
    """A JSON array of `count` file records (path and size), about 18 tokens each; the
    biggest file sits in the middle, where a head and a tail do not show it."""
    rng = random.Random(606)
    sizes = [rng.randint(100, 99_999) for _ in range(count)]
    sizes[count // 2] = 250_000
    return json.dumps(
        [
            {"path": f"src/{rng.choice(MODULES)}/m{index}.py", "size": size}
            for index, size in enumerate(sizes)
        ]
    )


def oversized_result(plan: Plan, counter: TokenCounter) -> Workload:
    """One call listing 4,000 files (about 72k tokens), then "Which is biggest?"; the agent
    answers each turn after its one call (the plan's size does not matter)."""
    listing = file_listing()
    arguments = json.dumps({"path": "src"})
    return Workload(
        "oversized-result",
        "You are a coding agent working in the user's repository.",
        (schema("list_files", "List the files under a directory with their sizes, as JSON."),),
        AgentScript(
            calls=(("list_files", arguments),),
            rounds_per_turn=1,
            cycle=False,
            answers=("Here is the listing.", "The biggest file is the one I found above."),
        ),
        (
            UserTurn(
                "List every file under src/ with its size in bytes.",
                (counter.text(listing),),
                (listing,),
            ),
            UserTurn("Which is biggest?", ()),
        ),
        (),
        result_items=LISTED_FILES,
    )


FIXED_HEAD_TOKENS: Final = 7_500
"""The fixed-heavy agent's instructions and tools (ours; the provider counts 8,250): 70 % of
a 16k window's usable input, as Codex's are."""
_FIXED_ROUNDS: Final = 14
_CODEX_TOOLS: Final = (
    "shell", "apply_patch", "read_file", "run_tests", "grep", "list_dir", "update_plan",
    "view_image", "web_search", "write_file",
)  # fmt: skip


def _codex_tools(rng: random.Random, counter: TokenCounter) -> tuple[dict[str, Any], ...]:
    """Ten tool schemas with long descriptions and described parameters, about 2k tokens."""
    tools = []
    for name in _CODEX_TOOLS:
        properties = {
            field: {"type": "string", "description": prose(rng, 25, counter)}
            for field in ("target", "mode", "reason")
        }
        function = {
            "name": name,
            "description": prose(rng, 120, counter),
            "parameters": {"type": "object", "properties": properties, "required": ["target"]},
        }
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def fixed_heavy(plan: Plan, counter: TokenCounter) -> Workload:
    """A Codex-sized head (`FIXED_HEAD_TOKENS`), then user turns of about 7k tokens: a pasted
    file chunk of ~1,000 tokens, 14 tool rounds of 250-600 tokens, a short answer."""
    draft = new_draft(plan, counter, seed=707)
    tools = _codex_tools(draft.rng, counter)
    head = FIXED_HEAD_TOKENS - counter.tools({"tools": list(tools)})
    system = "You are a coding agent running in the user's terminal. " + prose(
        draft.rng, head, counter
    )
    while draft.room(_FIXED_ROUNDS + 1) or not draft.bodies:
        chunk = len(draft.bodies) + 1
        paste = tool_output("read_file", 1_000, 7_000 + chunk, counter)
        request = (
            f"File chunk {chunk} of src/billing/ledger.py follows; review it against the "
            f"repository and fix what it breaks.\n{paste}"
        )
        sizes = tuple(draft.sized(400, 0.3, 250, 600) for _ in range(_FIXED_ROUNDS))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, sizes, answer)
    return Workload(
        "fixed-heavy",
        system,
        tools,
        agent_script(_FIXED_ROUNDS, tuple(draft.answers)),
        user_turns(draft, {}),
        (),
        running_turn=True,
    )


# The values the recall workload plants: word pairs a user would not guess, with no digit,
# path or id shape, in files no other call reads.
RECALLED: Final = (
    Asked("DEPLOY_TOKEN", "marmalade-sky", "deploy/billing/secrets.env"),
    Asked("ROLLBACK_PHRASE", "quiet-heron-window", "deploy/jobs/rollback.env"),
    Asked("CANARY_GREETING", "velvet-otter-lamp", "deploy/web/canary.env"),
    Asked("FALLBACK_MOTTO", "amber-comet-garden", "deploy/api/fallback.env"),
    Asked("MIRROR_SLOGAN", "silent-maple-harbor", "deploy/auth/mirror.env"),
)
RECALL_PLAN: Final = ((0.0, 0), (0.5, 1), (0.7, 0), (0.8, 1), (0.9, 0))
"""Where each of `RECALLED` is read: a share of the work turns (never before the second) and
the round. By the questions, which all come at the end, the early reads are condensed into a
note in every cell; the later ones, by window, condensed, cleared to a placeholder, or still
whole in the recent turns.

No question comes earlier in the session: the mock's recaller takes any user message that
asks for "the value of KEY" as the question of the turn, and the proxy's ledger quotes an
earlier question in the note it merges into a later turn's user message, so the recaller
would answer that turn instead of the agent running its tools."""


def _read_paths() -> list[str]:
    """Source files, tests and configuration, shuffled: no path is read twice in a cell."""
    paths = [
        path
        for module in MODULES
        for name in NAMES
        for path in (f"src/{module}/{name}.py", f"tests/{module}/test_{name}.py",
                     f"config/{module}/{name}.yaml")
    ]  # fmt: skip
    random.Random(808).shuffle(paths)
    return paths


def _env_file(asked: Asked, tokens: int, seed: int, counter: TokenCounter) -> str:
    """The file that gives `asked`'s value: a few settings, the value, then code."""
    head = f"# {asked.path}\nLOG_FORMAT=plain\n{asked.line}\nREGION_NAME=primary\n"
    return head + tool_output("read_file", tokens - counter.text(head), seed, counter)


def _planted(draft: Draft, counter: TokenCounter) -> tuple[list[str], dict[str, str]]:
    """The paths the agent reads, in order, with the planted files among them (read where
    `RECALL_PLAN` says, or at the next read not taken in a session too short for it; later
    if compactions make the agent run more rounds first), and their texts by path."""
    paths, files, work = _read_paths(), {}, len(draft.bodies)
    sizes = [size for tools in draft.tool_tokens for size in tools]
    taken: set[int] = set()
    for index, (planted, (at, round_)) in enumerate(zip(RECALLED, RECALL_PLAN, strict=True)):
        turn = min(max(1, round(at * work)), work - 1)
        slot = sum(len(tools) for tools in draft.tool_tokens[:turn]) + round_
        while slot in taken:
            slot += 1
        taken.add(slot)
        paths[slot] = planted.path
        size = sizes[slot] if slot < len(sizes) else sizes[-1]
        files[planted.path] = _env_file(planted, size, 880 + index, counter)
    return paths, files


def recall(plan: Plan, counter: TokenCounter) -> Workload:
    """The artifacts agent's shape (~600-token reads) reading distinct files, the planted
    files among them (where `RECALL_PLAN` says); the last turns ask for their values."""
    draft = new_draft(plan, counter, seed=808)
    while draft.room(3 + len(RECALLED)) or len(draft.bodies) < 2:
        request = "Next step of the deployment review. " + prose(
            draft.rng, draft.rng.randint(60, 160), counter
        )
        tools = (draft.sized(600, 0.3, 300, 1200), draft.sized(600, 0.3, 300, 1200))
        answer = prose(draft.rng, round(draft.rng.uniform(100, 200) * plan.bulk), counter)
        draft.add(request, tools, answer)
    paths, files = _planted(draft, counter)
    questions = tuple(UserTurn(planted.question, ()) for planted in RECALLED)
    calls = tuple(("read_file", json.dumps({"path": path})) for path in paths)
    return Workload(
        "recall",
        "You are a deployment agent reviewing the user's repository; use the tools.",
        (schema("read_file", "Read a file of the repository.", "path"),),
        AgentScript(calls=calls, rounds_per_turn=2, answers=tuple(draft.answers)),
        (*user_turns(draft, {}), *questions),
        (),
        files=files,
        asked=RECALLED,
    )
