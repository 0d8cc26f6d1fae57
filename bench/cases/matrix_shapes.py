"""Issue 38's judges (`bench.shapes`) applied to one matrix cell's forwarded requests.

Every cell gets the numbers that cost nothing to read (the summaries' cached share, the
calls a window where nothing compacts would make, the turns that never reached their
answer); the request-by-request judges run on issue 38's workloads only, each where the
workload has what it judges (a working set, pastes, planted statements, tools, sentences).
"""

from __future__ import annotations

from typing import Any, Final

from bench import forwarded, shapes
from bench import recall as recall_judge
from bench.cases.matrix_clients import MatrixClient, cell_budget, must_stay
from bench.workloads import Workload, WorkloadKey
from proxy.core.messages import Message, role
from proxy.core.summary import detach_notes, note_of
from proxy.core.tokens import TokenCounter

SHAPES: Final[frozenset[WorkloadKey]] = frozenset(
    {"aider", "paste-per-turn", "long-turn", "schema-heavy", "fixed-heavy-pastes"}
)
"""The workloads judged request by request."""


def judge_shapes(client: MatrixClient, bodies: list[Any]) -> None:
    """What issue 38 measures of `client`'s cell, read from the requests the proxy forwarded
    (`bodies`, in the client's API) and the mock's record."""
    workload, cell = client.workload, client.cell
    usage = client.upstream.summary_usage
    cell.summary_prompt_tokens = sum(u.prompt_tokens for u in usage)
    cell.summary_cached_tokens = sum(u.cached_tokens for u in usage)
    ran = workload.turns[: cell.user_turns]
    cell.planned_calls = sum(len(turn.tool_tokens) + 1 for turn in ran)
    cell.unfinished = sum(not final for final in client.finals)
    if workload.key not in SHAPES and not workload.running_turn:
        return
    requests = [client.messages(body) for body in bodies]
    texts = [turn.text for turn in workload.turns]
    # Located by every call the client made: a call its own compaction took out later was
    # still sent before that (`condensed_at` says from which request on it is not).
    located = forwarded.locate(requests, texts, client.calls)
    extras = history_extras(client, bodies, requests, located, texts)
    if workload.running_turn and extras is not None:
        # What had to stay, counted by the client before it sent each request, and what
        # the proxy adds to it.
        cell.floors[:] = [floor + extra for floor, extra in zip(cell.floors, extras, strict=True)]
    if workload.key in SHAPES:  # not the fixed-heavy agent: what had to stay, for its landings
        _judge_client_shape(client, bodies, requests, located, texts)


def _judge_client_shape(
    client: MatrixClient,
    bodies: list[Any],
    requests: list[list[Message]],
    located: list[shapes.Located],
    texts: list[str],
) -> None:
    workload, cell = client.workload, client.cell
    cell.running_verbatim = shapes.running_verbatim(requests, located, texts)
    cell.unit_share = unit_share(workload, cell.window, client.counter)
    if any(turn.working_set for turn in workload.turns):
        budget = cell_budget(cell.window)
        turns = workload.turns
        fits = [budget.pressure(must_stay(workload, turn, client.counter)) <= 1.0 for turn in turns]
        sets = [turn.working_set for turn in turns]
        cell.working_whole, cell.working_forms = shapes.working_set(requests, located, sets, fits)
    if workload.statements:
        cell.ledger_order = shapes.ledger_order(requests, [s.key for s in workload.statements])
    if workload.pastes:
        cell.paste_free = shapes.paste_free(requests, workload.pastes)
    if workload.tools:
        budget = cell_budget(cell.window)

        def pressure(index: int, more: int) -> float:
            return budget.pressure(client.body_tokens(bodies[index]) + more)

        count = client.counter.text
        cell.newest_whole = shapes.newest_whole(
            requests, client.outputs, pressure, cell.target_of, count
        )
    if workload.name_calls:
        cell.calls_named = shapes.calls_named(
            requests, located, client.calls, client.call_args, client.condensed_at
        )
    if any(turn.sentences for turn in workload.turns):
        said = [turn.sentences for turn in workload.turns]
        cell.earlier_said = shapes.earlier_said(requests, located, said)


def history_extras(
    client: MatrixClient,
    bodies: list[Any],
    requests: list[list[Message]],
    located: list[shapes.Located],
    texts: list[str],
) -> list[float] | None:
    """What each forwarded request carries beyond what the client counted as having to
    stay of it, as a share of the usable input: what the proxy adds (`context_recall`'s
    schema, once it offers it) and what stands for the history before the running turn: the
    pinned task (the first turn's ask, opening the conversation) and the compaction block,
    as forwarded. The block's least is the proxy's to size (it keeps one whole that
    shrinking could not bring to the target, `fit_block`): the floor takes it as it came,
    and judges what else the landing kept. None when the requests and the answers do not
    align (the proxy answered some requests itself: a recall round)."""
    counter = client.counter
    if len(client.cell.floors) != len(requests):
        return None
    budget = cell_budget(client.cell.window)
    extras = []
    for index, (messages, where) in enumerate(zip(requests, located, strict=True)):
        extra = client.cell.tool_tokens if recall_judge.offers(bodies[index]) else 0
        if where is not None and where[0] > 0:
            # The first turn's history is its own task, counted with its ask.
            # Whole, or with its paste cut (its words, the paste's head and tail): as sent
            # up to its first line.
            users = [forwarded.user_text(m) for m in messages if role(m) == "user"]
            first = texts[0].partition("\n")[0]
            task = users[0] if users and users[0].partition("\n")[0] == first else ""
            if not task and client.cell.client_compacts and len(users) > 1:
                # The client's compaction gave back its user messages and the block: the
                # proxy pins the first of them, whichever turn said it.
                task = users[0] if _pinned_before_block(messages) else ""
            extra += _block_tokens(messages, counter)
            extra += counter.message({"role": "user", "content": task}) if task else 0
        extras.append(budget.pressure(extra))
    return extras


def _pinned_before_block(messages: list[Message]) -> bool:
    """Whether the first user message stands apart, before the compaction block."""
    for message in messages:
        if note_of(message) is not None or detach_notes(message)[1]:
            return False
        if role(message) == "user":
            return True
    return False


def _block_tokens(messages: list[Message], counter: TokenCounter) -> int:
    """What the compaction block adds to a forwarded request, as it came: a note standing
    alone is its message; one merged into a message (opening the running turn's ask) is
    what that message costs beyond the client's own text, its separator and end line too."""
    total = 0
    for message in messages:
        if note_of(message) is not None:
            total += counter.message(message)
            continue
        rest, notes = detach_notes(message)
        if notes:
            total += counter.message(message) - counter.message(rest)
    return total


def unit_share(workload: Workload, window: int, counter: TokenCounter) -> float:
    """The largest user turn a compaction could remove (its ask, results and answer), as a
    share of the usable input at `window`: the tolerance of a landing."""
    answers = workload.script.answers or (workload.script.answer,)
    largest = max(
        (
            counter.text(turn.text)
            + sum(turn.tool_tokens)
            + counter.text(answers[index % len(answers)])
            for index, turn in enumerate(workload.turns)
        ),
        default=0,
    )
    return cell_budget(window).pressure(largest)
