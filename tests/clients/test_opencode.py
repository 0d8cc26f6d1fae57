"""opencode itself (`opencode run`) through a running proxy: one user message, a long single
turn of `ROUNDS` tool rounds under it, in windows the turn outgrows.

The mock plays the model with opencode's own tools (`read`, `bash`, `grep`, `glob`, on the
workspace's twelve modules of about a thousand tokens each): one call a round, all different,
then its answer. opencode runs each call for real and sends its result back, on top of its
fixed head of about 6,400 tokens (its system prompt and ten tools). A recording relay between
opencode and the proxy keeps what opencode sent, so each forwarded request is compared with
its own: the running user message, and each of the turn's rounds (whole, cut, a placeholder
with its recall id, or folded into the compaction block).

The issue (38) asks that the running turn be forwarded as it was sent: its user message in
place, as a user message of its own, in every request; each of its calls either forwarded or
named in the block once folded; the newest result never cut while the prompt is under the
target. At `WIDE` the proxy only clears old results; at `NARROW` (the fixed head is about two
thirds of the usable input, below which the target lies) it must fold rounds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest

from proxy.core.policy import ContextPolicy
from proxy.core.summary import NOTE_END
from proxy.mock_upstream import AgentScript, MockUpstream
from tests import optional
from tests.clients.opencode import OpencodeRun, config, run_opencode
from tests.clients.relay import Sent, relaying
from tests.clients.stack import running_stack

pytestmark = pytest.mark.needs("opencode", "rg")

MODEL: Final = "mock-model"
OUTPUT: Final = 2048
"""opencode's `limit.output`: the `max_tokens` of every request it sends."""
WIDE: Final = 24_000
NARROW: Final = 12_000
ROUNDS: Final = 25
MODULES: Final = 12
PROMPT: Final = "Read every module under src and tell me which fields have defaults."
ANSWER: Final = "Done: every module's fields are integers with defaults."
PLACEHOLDER: Final = "[tool result cleared"
"""How the proxy's placeholder for a cleared tool result starts."""


def _call(round_: int) -> tuple[str, dict[str, str]]:
    module = round_ % MODULES
    match round_ % 4:
        case 0:
            return "read", {"filePath": f"src/module_{module}.py"}
        case 1:
            return "bash", {"command": f"cat src/module_{module}.py", "description": "Show it"}
        case 2:
            return "grep", {"pattern": f"field {module}$", "path": "src"}
        case _:
            return "glob", {"pattern": f"src/module_{module}*.py"}


CALLS: Final = tuple(_call(n) for n in range(ROUNDS))
SCRIPT: Final = AgentScript(
    calls=tuple((name, json.dumps(arguments)) for name, arguments in CALLS),
    # The calls' count ends the turn, whatever a compaction leaves of the rounds.
    rounds_per_turn=ROUNDS,
    cycle=False,
    answer=ANSWER,
)


def module_source(n: int) -> str:
    """About a thousand tokens of Python."""
    lines = [f'"""Module {n} of the parser: field readers."""', ""]
    for k in range(30):
        lines.append(f"def read_field_{n}_{k}(raw: str) -> int:")
        lines.append(f"    return int(raw.strip() or {n * 100 + k}) + {k}  # field {k}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Request:
    """One request of opencode's agent loop: what it sent, and what the model was sent."""

    sent: Sent
    forwarded: dict[str, Any]

    @property
    def ask(self) -> str:
        """The running turn's user message as opencode sent it."""
        return str(_user_messages(self.sent.json()["messages"])[-1][1]["content"])

    def ask_in_place(self) -> bool:
        """The ask is forwarded as it was sent, a user message of its own, and only the
        turn's own rounds (assistant calls and tool results) follow it. Where nothing but
        the instructions precedes it, a strict chat template allows no user message before
        it for the block: the block's text may open the ask's message, ending with the
        block's end line, the ask after it word for word (never the block after the ask)."""
        messages = self.forwarded["messages"]
        users = _user_messages(messages)
        if not users:
            return False
        index, last = users[-1]
        after = {message["role"] for message in messages[index + 1 :]}
        content = last.get("content")
        opened = isinstance(content, str) and content.endswith(f"{NOTE_END}\n\n{self.ask}")
        alone = len(users) == 1 and {m["role"] for m in messages[:index]} <= {"system"}
        return (content == self.ask or (opened and alone)) and after <= {"assistant", "tool"}

    def rounds(self) -> dict[str, str]:
        """Each call of the running turn, by id: how its result was forwarded (`whole`, `cut`,
        `placeholder`) or `folded` (neither the call nor its result forwarded)."""
        forwarded = {m.get("tool_call_id"): m for m in self.forwarded["messages"]}
        kinds = {}
        for call_id, result in _results(self.sent.json()["messages"]).items():
            kept = forwarded.get(call_id)
            if kept is None:
                kinds[call_id] = "folded"
            elif kept["content"] == result:
                kinds[call_id] = "whole"
            elif str(kept["content"]).startswith(PLACEHOLDER):
                kinds[call_id] = "placeholder"
            else:
                kinds[call_id] = "cut"
        return kinds

    def unnamed_folded_calls(self) -> list[str]:
        """The folded calls that no line of the forwarded text (but the system prompt and the
        tool results) names, with every argument they were given."""
        calls = _calls(self.sent.json()["messages"])
        lines = [
            line
            for message in self.forwarded["messages"]
            if message["role"] in ("user", "assistant") and isinstance(message.get("content"), str)
            for line in message["content"].splitlines()
        ]
        unnamed = []
        for call_id, kind in self.rounds().items():
            name, arguments = calls[call_id]
            values = [str(value) for value in arguments.values()]
            named = any(name in line and all(v in line for v in values) for line in lines)
            if kind == "folded" and not named:
                unnamed.append(f"{call_id} {name} {arguments}")
        return unnamed

    def newest_result(self) -> tuple[int, int]:
        """The characters of the newest tool result: as sent, as forwarded."""
        sent = list(_results(self.sent.json()["messages"]).items())
        if not sent:
            return 0, 0
        call_id, result = sent[-1]
        forwarded = _results(self.forwarded["messages"]).get(call_id, "")
        return len(result), len(forwarded)


@dataclass(frozen=True)
class Played:
    window: int
    run: OpencodeRun
    requests: list[Request]
    """opencode's agent loop (its requests with tools), in order; not its title request."""
    upstream: MockUpstream

    @property
    def target(self) -> int:
        """The tokens a compaction lands at (the default policy's target of the usable input)."""
        policy = ContextPolicy()
        return int(policy.compaction_target * (self.window - OUTPUT))

    def table(self) -> str:
        """What the model saw of the turn, request by request (printed with `pytest -s`)."""
        rows = [
            f"opencode, window {self.window}, target {self.target}: request, applied, tokens "
            "sent -> forwarded, rounds whole/cut/placeholder/folded (folded unnamed), ask in "
            "place, newest result chars sent -> forwarded"
        ]
        for number, request in enumerate(self.requests, 1):
            kinds = list(request.rounds().values())
            counts = "/".join(
                str(kinds.count(kind)) for kind in ("whole", "cut", "placeholder", "folded")
            )
            sent, kept = request.newest_result()
            unnamed = len(request.unnamed_folded_calls())
            rows.append(
                f"{number:3} {request.sent.applied:18} {request.sent.tokens_before:6} -> "
                f"{request.sent.tokens_after:6}  {counts:12} ({unnamed})"
                f"  {request.ask_in_place()!s:5}  {sent} -> {kept}"
            )
        return "\n".join(rows)


@pytest.fixture(scope="module")
def played(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Played:
    """opencode's long turn at the window `request.param`, played once for the module."""
    window: int = request.param
    optional.uses("opencode")
    folder = tmp_path_factory.mktemp(f"opencode-{window}")
    workspace = folder / "workspace"
    (workspace / "src").mkdir(parents=True)
    for n in range(MODULES):
        (workspace / "src" / f"module_{n}.py").write_text(module_source(n))
    with (
        running_stack(folder, SCRIPT, window=window) as stack,
        relaying(stack.proxy_url) as (relay, relay_url),
    ):
        settings = config(f"{relay_url}/v1", MODEL, window=window, output=OUTPUT)
        run = run_opencode(folder / "home", workspace, settings, PROMPT)
        recorded = list(stack.upstream.requests)
    requests = []
    for sent in sorted(relay.sent, key=lambda s: s.number):
        if sent.path != "/v1/chat/completions" or not sent.json().get("tools"):
            continue
        forwarded = relay.forwarded(sent, recorded)
        assert forwarded is not None, f"request {sent.number} reached no model"
        requests.append(Request(sent, forwarded.json()))
    result = Played(window, run, requests, stack.upstream)
    print(result.table())
    return result


@pytest.mark.parametrize("played", [WIDE, NARROW], indirect=True)
def test_opencode_finishes_its_long_turn_through_the_proxy(played: Played) -> None:
    run, requests, upstream = played.run, played.requests, played.upstream
    assert run.returncode == 0, run.summary()
    assert run.errors == [], run.summary()
    assert run.texts[-1:] == [ANSWER], run.summary()
    # opencode ran every call the model made, each once, and each succeeded.
    tools = run.tools
    assert [(t["tool"], t["state"]["status"]) for t in tools] == [
        (name, "completed") for name, _ in CALLS
    ], run.summary()
    # One request per round and one for the answer: nothing failed, nothing was retried, and
    # opencode's own compaction never fired (it sees the usage of what was forwarded).
    assert len(requests) == ROUNDS + 1, played.table()
    assert {r.sent.status for r in requests} == {200}, played.table()
    assert "missing" not in {r.sent.applied for r in requests}
    sessions = {r.sent.session for r in requests}
    assert len(sessions) == 1, sessions
    assert next(iter(sessions)).startswith("ses_"), sessions
    # The turn outgrew the window; the model never saw an overflow or a broken pairing.
    assert requests[-1].sent.tokens_before > played.window - OUTPUT, played.table()
    assert any(r.sent.applied != "none" for r in requests), played.table()
    assert upstream.overflows == upstream.strict_rejections == 0
    assert max(upstream.prompt_tokens) <= played.window


@pytest.mark.parametrize(
    "played",
    [WIDE, NARROW],
    indirect=True,
)
def test_the_running_user_message_is_forwarded_in_place(played: Played) -> None:
    misplaced = [n for n, r in enumerate(played.requests, 1) if not r.ask_in_place()]
    assert misplaced == [], played.table()


@pytest.mark.parametrize(
    "played",
    [WIDE, NARROW],
    indirect=True,
)
def test_every_call_of_the_turn_is_forwarded_or_named_in_the_block(played: Played) -> None:
    unnamed = {n: r.unnamed_folded_calls() for n, r in enumerate(played.requests, 1)}
    assert {n: calls for n, calls in unnamed.items() if calls} == {}, played.table()


@pytest.mark.parametrize("played", [WIDE, NARROW], indirect=True)
def test_the_newest_result_is_whole_while_the_prompt_is_under_the_target(
    played: Played,
) -> None:
    cut = [
        n
        for n, r in enumerate(played.requests, 1)
        if r.sent.tokens_after <= played.target and len(set(r.newest_result())) > 1
    ]
    assert cut == [], played.table()


def _user_messages(messages: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(n, m) for n, m in enumerate(messages) if m.get("role") == "user"]


def _turn(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The messages after the last user message: the running turn's rounds."""
    users = _user_messages(messages)
    start = users[-1][0] + 1 if users else 0
    yield from messages[start:]


def _results(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The running turn's tool results, by call id, in order."""
    return {
        str(m["tool_call_id"]): str(m["content"]) for m in _turn(messages) if m["role"] == "tool"
    }


def _calls(messages: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The running turn's calls, by id: (name, arguments)."""
    return {
        call["id"]: (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for m in _turn(messages)
        for call in m.get("tool_calls") or []
    }
