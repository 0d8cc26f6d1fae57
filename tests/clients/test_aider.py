"""aider itself (`aider --message`) through a running proxy: the files it was asked to edit,
re-sent whole on every request, in a window they nearly fill.

A scratch git repository holds `len(FILES)` modules of about a thousand tokens each, all
added to the chat. `TURNS` runs of aider continue one conversation (`--restore-chat-history`),
each with one ask: one request, whose files message ("I have *added these files to the chat*
...") carries every file as it is on disk, then aider's "Ok, any changes I propose will be to
those files.", then the ask. The mock plays the model: its answer is a SEARCH/REPLACE block
that marks module 0 as checked, which aider applies, so each run's files message carries the
newer version of module 0. A recording relay between aider and the proxy keeps what aider
sent, so each forwarded request is compared with aider's own.

The files are aider's working set: the model can edit only what it is shown, and aider trusts
that message as the files' true contents. The issue (38) asks that its latest copy be forwarded
whole in every request that can hold it (the request fits the window), that the ask stay in
place, and that no request fail. At `WIDE` nothing needs compacting; at `NARROW` (the issue's
16k window: each request about 10k tokens of the 12k of usable input) the proxy compacts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import pytest

from proxy.core.policy import ContextPolicy
from proxy.mock_upstream import AgentScript, MockUpstream
from tests import optional
from tests.clients.aider import (
    FILES_PREFIX,
    AiderRun,
    edit_block,
    file_block,
    run_aider,
    scratch_repository,
)
from tests.clients.relay import Sent, relaying
from tests.clients.stack import running_stack

pytestmark = pytest.mark.needs("aider")

MODEL: Final = "mock-model"
NARROW: Final = 16_000
WIDE: Final = 32_000
TURNS: Final = 3
CHECKED: Final = "# checked"


def module_source(n: int) -> str:
    """About a thousand tokens of Python."""
    lines = [f'"""Module {n} of the parser: field readers."""', ""]
    for k in range(30):
        lines.append(f"def read_field_{n}_{k}(raw: str) -> int:")
        lines.append(f"    return int(raw.strip() or {n * 100 + k}) + {k}  # field {k}")
    return "\n".join(lines) + "\n"


FILES: Final = {f"src/module_{n}.py": module_source(n) for n in range(8)}
HEADLINE: Final = '"""Module 0 of the parser: field readers."""'
ANSWER: Final = "I will mark module 0 as checked.\n\n" + edit_block(
    "src/module_0.py", HEADLINE, f"{HEADLINE}\n{CHECKED}"
)
"""Applies on every turn: each adds one more line under module 0's docstring."""
SCRIPT: Final = AgentScript(calls=(), rounds_per_turn=0, answer=ANSWER)


def ask(turn: int) -> str:
    return f"Step {turn + 1}: mark module 0 as checked once more."


@dataclass(frozen=True)
class Request:
    """One request of aider's: what it sent, what the model was sent, the files on disk."""

    turn: int
    sent: Sent
    forwarded: dict[str, Any]
    files: dict[str, str]
    """Every file added to the chat, as it was when aider sent the request."""
    reported: str
    """What aider printed of the tokens it sent ("10k"): the usage it got back."""

    def files_message(self, body: dict[str, Any]) -> str:
        """The content of the request's (last) files message, "" when it has none."""
        found = [
            m["content"]
            for m in body["messages"]
            if m["role"] == "user"
            and isinstance(m.get("content"), str)
            and m["content"].startswith(FILES_PREFIX)
        ]
        return found[-1] if found else ""

    def files_whole(self) -> list[str]:
        """The files the model was shown whole, as they were on disk, in one user message."""
        texts = [m["content"] for m in self.forwarded["messages"] if m["role"] == "user"]
        return [
            path
            for path, content in self.files.items()
            if any(isinstance(t, str) and file_block(path, content) in t for t in texts)
        ]

    def ask_in_place(self) -> bool:
        """The forwarded request ends with aider's last message, as aider sent it."""
        return bool(self.forwarded["messages"][-1] == self.sent.json()["messages"][-1])


@dataclass(frozen=True)
class Played:
    window: int
    runs: list[AiderRun]
    requests: list[Request]
    upstream: MockUpstream
    checked: int
    """The lines aider's applied edits left in module 0."""

    @property
    def usable(self) -> int:
        """The usable input: the window less the output the proxy reserves (aider states
        no `max_tokens`)."""
        reserve = min(ContextPolicy().output_reserved, self.window // 4)
        return self.window - reserve

    def table(self) -> str:
        """What the model saw of the files, request by request (printed with `pytest -s`)."""
        rows = [
            f"aider, window {self.window} (usable {self.usable}): turn, applied, tokens sent ->"
            " forwarded, aider printed, files message chars sent -> forwarded, files whole,"
            " ask in place"
        ]
        for request in self.requests:
            sent = len(request.files_message(request.sent.json()))
            kept = len(request.files_message(request.forwarded))
            rows.append(
                f"{request.turn:3} {request.sent.applied:18} {request.sent.tokens_before:6} -> "
                f"{request.sent.tokens_after:6}  {request.reported:>5}  {sent:6} -> {kept:6}  "
                f"{len(request.files_whole())}/{len(request.files)}  {request.ask_in_place()}"
            )
        return "\n".join(rows)


@pytest.fixture(scope="module")
def played(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Played:
    """aider's `TURNS` runs at the window `request.param`, played once for the module."""
    window: int = request.param
    optional.uses("aider")
    folder = tmp_path_factory.mktemp(f"aider-{window}")
    repository = folder / "repository"
    scratch_repository(repository, FILES)
    runs: list[AiderRun] = []
    snapshots: list[dict[str, str]] = []
    with (
        running_stack(folder, SCRIPT, window=window) as stack,
        relaying(stack.proxy_url) as (relay, relay_url),
    ):
        for turn in range(TURNS):
            snapshots.append({path: (repository / path).read_text() for path in FILES})
            done = len(relay.sent)
            run = run_aider(
                folder / "home", repository, f"{relay_url}/v1", MODEL, ask(turn), list(FILES)
            )
            runs.append(run)
            assert run.returncode == 0, run.summary()
            # One model request per run: the ask (aider's own history summary never starts,
            # the restored history being far below its 1k tokens).
            assert len(relay.sent) == done + 1, run.summary()
        recorded = list(stack.upstream.requests)
    requests = []
    for turn, sent in enumerate(sorted(relay.sent, key=lambda s: s.number)):
        forwarded = relay.forwarded(sent, recorded)
        assert forwarded is not None, f"request {sent.number} reached no model"
        reported = re.findall(r"Tokens: (\S+) sent", runs[turn].stdout)
        requests.append(
            Request(turn, sent, forwarded.json(), snapshots[turn], "".join(reported[-1:]))
        )
    checked = (repository / "src/module_0.py").read_text().count(CHECKED)
    result = Played(window, runs, requests, stack.upstream, checked)
    print(result.table())
    return result


@pytest.mark.parametrize("played", [WIDE, NARROW], indirect=True)
def test_aider_edits_its_files_every_turn_through_the_proxy(played: Played) -> None:
    requests, upstream = played.requests, played.upstream
    for run in played.runs:
        assert "Applied edit to src/module_0.py" in run.stdout, run.summary()
    assert played.checked == TURNS
    # One request per turn, each answered; one session across aider's runs.
    assert len(requests) == TURNS, played.table()
    assert {r.sent.status for r in requests} == {200}, played.table()
    assert "missing" not in {r.sent.applied for r in requests}
    assert len({r.sent.session for r in requests}) == 1, played.table()
    # What aider sent was the conversation and every file, newest version, whole.
    for request in requests:
        sent = request.files_message(request.sent.json())
        assert all(file_block(p, c) in sent for p, c in request.files.items()), request.turn
    assert upstream.overflows == upstream.strict_rejections == 0
    assert max(upstream.prompt_tokens) <= played.window


@pytest.mark.parametrize("played", [WIDE, NARROW], indirect=True)
def test_aider_ask_is_forwarded_in_place(played: Played) -> None:
    misplaced = [r.turn for r in played.requests if not r.ask_in_place()]
    assert misplaced == [], played.table()


@pytest.mark.parametrize("played", [WIDE, NARROW], indirect=True)
def test_aider_files_are_forwarded_whole_in_every_request_that_holds_them(
    played: Played,
) -> None:
    # Every request fits the window as aider sent it: the files can be held whole.
    assert max(r.sent.tokens_before for r in played.requests) <= played.usable, played.table()
    partial = [r.turn for r in played.requests if len(r.files_whole()) < len(r.files)]
    assert partial == [], played.table()
