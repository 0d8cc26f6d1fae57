"""The checks a strict Messages API provider makes before any model sees a request.

Each raises `Rejected` with the API's own words (messages_errors.py). With the mock's `strict`:

- credentials (`x-api-key`, or `Authorization: Bearer`) and `anthropic-version` present;
- at least one message, the first (of those that take turns) a user's;
- at most four `cache_control` breakpoints, counted on tools, system blocks and message
  blocks (and blocks inside tool results), plus one for a top-level `cache_control`;
- tool pairing, on the turns the API makes of consecutive same-role messages: every
  `tool_result` answers a `tool_use` of the assistant turn right before it, and every
  `tool_use` is answered by a `tool_result` at the start of the next user turn;
- thinking: each `thinking` block carries the signature the mock made for its text; and with
  `thinking: {"type": "enabled"}`, when the request ends in a tool loop (its last user turn
  holds tool results), the assistant turn before it opens with its thinking block.

With `roles_alternate`, two user or two assistant messages in a row are refused too, as the API
did before it merged them and as Bedrock and strict compatible servers still do.

Messages of roles other than user and assistant (Claude Code's `system` entries) are left to
the provider's beta and skipped by every check.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.mock_upstream import messages_errors as errors
from proxy.mock_upstream.messages_request import (
    THINKING_BLOCKS,
    TURN_ROLES,
    Turn,
    block_type,
    blocks,
    system_blocks,
    thinking_mode,
    tools,
)
from proxy.mock_upstream.messages_thinking import verifies
from proxy.mock_upstream.script import Recorded

MAX_BREAKPOINTS = 4


def check_headers(recorded: Recorded) -> None:
    """Credentials in either header, and the API version."""
    bearer = (recorded.header("authorization") or "").startswith("Bearer ")
    if not recorded.header("x-api-key") and not bearer:
        raise errors.credentials_missing()
    if not recorded.header("anthropic-version"):
        raise errors.version_missing()


def check_roles(listed: Sequence[Mapping[str, Any]], *, alternate: bool) -> None:
    """A first message that is a user's; with `alternate`, no two turns of one role."""
    if not listed:
        raise errors.no_messages()
    roles = [m.get("role") for m in listed if m.get("role") in TURN_ROLES]
    if roles and roles[0] != "user":
        raise errors.first_not_user()
    if alternate:
        for previous, role in itertools.pairwise(roles):
            if role == previous:
                raise errors.roles_not_alternating(str(role))


def check_breakpoints(body: Mapping[str, Any], listed: Sequence[Mapping[str, Any]]) -> None:
    marked = [*tools(body), *system_blocks(body)]
    for message in listed:
        for block in blocks(message.get("content")):
            marked.append(block)
            if block_type(block) == "tool_result":
                marked.extend(blocks(block.get("content")))
    found = sum(1 for block in marked if block.get("cache_control") is not None)
    found += body.get("cache_control") is not None  # automatic caching takes a breakpoint
    if found > MAX_BREAKPOINTS:
        raise errors.too_many_breakpoints(found)


def check_tool_pairs(turns: Sequence[Turn]) -> None:
    """Every result answers a call of the turn before; every call is answered at the start
    of the next turn. Problems are reported in the order of the turns."""
    for number, turn in enumerate(turns):
        previous = turns[number - 1] if number else None
        if turn.role == "user":
            called = _uses(previous) if previous and previous.role == "assistant" else {}
            for placed in turn.blocks:
                if block_type(placed.block) != "tool_result":
                    continue
                answered = str(placed.block.get("tool_use_id"))
                if answered not in called:
                    raise errors.unexpected_tool_result(placed.index, placed.at, answered)
            continue
        uses = _uses(turn)
        following = turns[number + 1] if number + 1 < len(turns) else None
        leading = _leading_results(following) if following else set()
        missing = [ident for ident in uses if ident not in leading]
        if missing:
            raise errors.unanswered_tool_use(uses[missing[0]], missing)


def _uses(turn: Turn) -> dict[str, int]:
    """The turn's tool_use ids, in order, with the index of the message holding each."""
    return {
        str(p.block.get("id")): p.index for p in turn.blocks if block_type(p.block) == "tool_use"
    }


def _leading_results(turn: Turn) -> set[str]:
    """The ids the tool results at the start of a (user) turn answer."""
    answered: set[str] = set()
    for placed in turn.blocks:
        if block_type(placed.block) != "tool_result":
            break
        answered.add(str(placed.block.get("tool_use_id")))
    return answered


def check_thinking(body: Mapping[str, Any], turns: Sequence[Turn]) -> None:
    """Signatures intact; with thinking enabled, an unfinished tool loop's assistant turn
    opens with its thinking."""
    for turn in turns:
        if turn.role != "assistant":
            continue
        for placed in turn.blocks:
            if block_type(placed.block) != "thinking":
                continue
            if "signature" not in placed.block:
                raise errors.signature_missing(placed.index, placed.at)
            if not verifies(placed.block):
                raise errors.invalid_signature(placed.index, placed.at)
    if thinking_mode(body) != "enabled" or len(turns) < 2:
        return
    last, before = turns[-1], turns[-2]
    in_loop = any(block_type(p.block) == "tool_result" for p in last.blocks)
    if last.role != "user" or not in_loop or not before.blocks:
        return
    first = before.blocks[0]
    if block_type(first.block) not in THINKING_BLOCKS:
        raise errors.thinking_expected(first.index, block_type(first.block))
