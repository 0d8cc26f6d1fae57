"""Issue 38's workloads shaped like two real clients (`../shared/CLIENTS.md`): aider and opencode.

- `aider`: no tools. Every request is rebuilt from aider's parts, in aider's order: the
  system prompt, two few-shot exchanges, "I switched to a new code base..." / "Ok.", the
  history (each earlier ask and the model's edit), then the files added to the chat as one
  user message (8 files, 0.45 of the window), "Ok, any changes I propose will be to those
  files.", and the new ask. Each answer edits one function of one file (a SEARCH/REPLACE
  block, aider's diff format), and the next turn's files message carries that file's new
  version: the working set changes a little every turn and is re-sent whole every request.
- `long-turn`: opencode's long single turns: two user messages, each followed by 25 tool
  rounds (`read`, `grep`, `bash`, each call with arguments of its own) whose results are
  0.09 of the window each, so that one turn is about two windows: its own earlier rounds
  must give way while it runs, and the agent judges its progress from what it is sent.
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from bench.workloads.filler import (
    MODULES,
    NAMES,
    code_line,
    new_draft,
    prose,
)
from bench.workloads.model import Plan, UserTurn, Workload
from proxy.core.tokens import TokenCounter
from proxy.mock_upstream import AgentScript

# --- aider --------------------------------------------------------------------------------------

FILES_SHARE: Final = 0.45
"""The files message's size as a share of the window (ours): 7.4k tokens at 16k, where aider
sent 8.7k in the issue; between the target and the trigger at every window, as there."""
AIDER_FILES: Final = (
    "src/billing/ledger.py", "src/billing/invoice.py", "src/api/routes.py",
    "src/core/settings.py", "src/jobs/worker.py", "src/store/session.py",
    "tests/test_ledger.py", "tests/test_invoice.py",
)  # fmt: skip
FILES_HEADER: Final = (
    "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
    "*Trust this message as the true contents of these files!*\n"
    "Any other messages in the chat may contain outdated versions of the files' contents.\n\n"
)
"""aider's opening of the files message, word for word (its first line names the message)."""
FILES_REPLY: Final = "Ok, any changes I propose will be to those files."
AIDER_SYSTEM: Final = (
    "Act as an expert software developer. Follow the conventions and libraries the code "
    "base already uses. Take requests for changes to the supplied code; if a request is "
    "ambiguous, ask questions. Describe each change briefly, then give it as a SEARCH/REPLACE "
    "block: the file's path alone on a line, an opening fence, the search marker, the exact "
    "lines to find, the divider, the lines to put in their place, the replace marker and the "
    "closing fence. Every search section must match the file's current contents exactly, "
    "comments and whitespace included. Only edit files that were added to the chat; ask the "
    "user to add any other file you need. Keep each block small: include just the lines that "
    "change and a few around them. Reply in the same language as the user."
)
_SEARCH, _DIVIDER, _REPLACE = "<" * 7 + " SEARCH", "=" * 7, ">" * 7 + " REPLACE"
"""Built, not written: a line opening with seven angle brackets reads as a merge conflict."""


def _edit_block(path: str, old: str, new: str) -> str:
    return f"{path}\n```python\n{_SEARCH}\n{old}\n{_DIVIDER}\n{new}\n{_REPLACE}\n```"


AIDER_PREAMBLE: Final = (
    (
        "Change get_factorial() to use math.factorial",
        "I will import math and replace the hand-written loop.\n\n"
        + _edit_block(
            "mathweb/flask/app.py",
            "def get_factorial(n):\n    return 1 if n < 2 else n * get_factorial(n - 1)",
            "def get_factorial(n):\n    return math.factorial(n)",
        ),
    ),
    (
        "Refactor hello() into its own file.",
        "I will move hello() into a new file and import it where it was.\n\n"
        + _edit_block("hello.py", "", 'def hello():\n    print("hello")'),
    ),
    (
        "I switched to a new code base. Please don't consider the above files or try to "
        "edit them any longer.",
        "Ok.",
    ),
)


def files_message(files: dict[str, list[str]]) -> str:
    """aider's files message for these files' current functions."""
    bodies = ["{}\n```\n{}\n```".format(path, "\n".join(blocks)) for path, blocks in files.items()]
    return FILES_HEADER + "\n\n".join(bodies)


def _sources(per_file: int, rng: random.Random, counter: TokenCounter) -> dict[str, list[str]]:
    """Each of `AIDER_FILES` as its functions (two lines each), about `per_file` tokens."""
    files: dict[str, list[str]] = {}
    for path in AIDER_FILES:
        blocks: list[str] = []
        tokens = 0
        while tokens < per_file:
            blocks.append(code_line(rng, len(blocks) + 1))
            tokens += counter.text(blocks[-1] + "\n")
        files[path] = blocks
    return files


def aider(plan: Plan, counter: TokenCounter) -> Workload:
    """Each turn an ask to change one function of one file and the model's SEARCH/REPLACE
    edit of it; the files message (0.45 of the window) re-sent with every request."""
    draft = new_draft(plan, counter, seed=1_212)
    files = _sources(round(FILES_SHARE * plan.scale / len(AIDER_FILES)), draft.rng, counter)
    fixed = [AIDER_SYSTEM, files_message(files), FILES_REPLY, *sum(AIDER_PREAMBLE, ())]
    draft.tokens = sum(counter.text(part) for part in fixed)
    sets: list[str] = []
    while draft.room(1) or not draft.bodies:
        turn = len(draft.bodies)
        path = AIDER_FILES[turn % len(AIDER_FILES)]
        blocks = files[path]
        at = draft.rng.randrange(len(blocks))
        old, new = blocks[at], code_line(draft.rng, 1_000 + turn)
        name = old.split("(")[0].removeprefix("def ")
        ask = f"In {path}, rework {name} (change {turn + 1}): " + prose(
            draft.rng, draft.rng.randint(30, 80), counter
        )
        answer = (
            prose(draft.rng, round(draft.rng.uniform(40, 80) * plan.bulk), counter)
            + "\n\n"
            + _edit_block(path, old, new)
        )
        sets.append(files_message(files))  # what this turn's requests carry
        blocks[at] = new  # the next turn's files message shows the edit
        draft.add(ask, (), answer)
    turns = tuple(
        UserTurn(body, (), working_set=working)
        for body, working in zip(draft.bodies, sets, strict=True)
    )
    return Workload(
        "aider",
        AIDER_SYSTEM,
        (),
        AgentScript(calls=(), rounds_per_turn=0, answers=tuple(draft.answers)),
        turns,
        (),
        running_turn=True,
        preamble=AIDER_PREAMBLE,
        working_reply=FILES_REPLY,
    )


# --- opencode's long single turns ---------------------------------------------------------------

LONG_ROUNDS: Final = 25
RESULT_SHARE: Final = 0.09
"""A long turn's result, as a share of the window: 25 of them are about two windows."""
_OPENCODE_SYSTEM: Final = (
    "You are an interactive command line agent that helps users with software engineering "
    "tasks. Use the tools available to you: read files before you change them, search the "
    "code with grep, run commands and tests with bash. Work on the task until it is done, "
    "then report briefly what you changed and what the tests say."
)
_ASKS: Final = (
    "Migrate the billing jobs to the new queue client: read the modules involved, run their "
    "tests, fix what fails, and tell me when the suite passes.",
    "Now do the same for the export and report jobs, and check that nothing in the web "
    "handlers still imports the old client.",
)


def _tool(name: str, summary: str, parameters: dict[str, str]) -> dict[str, Any]:
    properties = {key: {"type": "string", "description": d} for key, d in parameters.items()}
    schema = {"type": "object", "properties": properties, "required": list(parameters)}
    return {
        "type": "function",
        "function": {"name": name, "description": summary, "parameters": schema},
    }


OPENCODE_TOOLS: Final = (
    _tool("read", "Read a file of the workspace.", {"filePath": "The path to the file."}),
    _tool(
        "grep",
        "Search files for a regular expression.",
        {"path": "The directory to search.", "pattern": "The expression."},
    ),
    _tool(
        "bash",
        "Run a shell command.",
        {"command": "The command line.", "description": "What it does, in a few words."},
    ),
)
"""opencode's `read`, `grep` and `bash` (its other tools are not called here)."""


def _long_calls(rng: random.Random) -> tuple[tuple[str, str], ...]:
    """Every call different (its arguments name a module and a function of its own), read,
    grep and bash in turn."""
    pairs = [(module, name) for module in MODULES for name in NAMES]
    rng.shuffle(pairs)
    calls = []
    for index, (module, name) in enumerate(pairs):
        if index % 3 == 0:
            calls.append(("read", {"filePath": f"src/{module}/{name}.py"}))
        elif index % 3 == 1:
            calls.append(("grep", {"path": f"src/{module}", "pattern": f"def {name}_"}))
        else:
            command = f"pytest tests/{module}/test_{name}.py -q"
            calls.append(("bash", {"command": command, "description": "Run the module's tests"}))
    return tuple((tool, json.dumps(arguments)) for tool, arguments in calls)


def long_turn(plan: Plan, counter: TokenCounter) -> Workload:
    """Two user messages, each running 25 tool rounds (results 0.09 of the window each,
    sigma 0.3) before its answer; every call with arguments of its own."""
    draft = new_draft(plan, counter, seed=1_313)
    median = RESULT_SHARE * plan.scale
    for ask in _ASKS:
        sizes = tuple(draft.sized(median, 0.3, median / 2, median * 2) for _ in range(LONG_ROUNDS))
        answer = prose(draft.rng, round(draft.rng.uniform(120, 200) * plan.bulk), counter)
        draft.add(ask, sizes, answer)
    script = AgentScript(
        calls=_long_calls(draft.rng), rounds_per_turn=LONG_ROUNDS, answers=tuple(draft.answers)
    )
    return Workload(
        "long-turn",
        _OPENCODE_SYSTEM,
        OPENCODE_TOOLS,
        script,
        tuple(
            UserTurn(body, sizes)
            for body, sizes in zip(draft.bodies, draft.tool_tokens, strict=True)
        ),
        (),
        running_turn=True,
        name_calls=True,
    )
