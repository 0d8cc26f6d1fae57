"""The Anthropic Messages API's refusals, in its envelope and its words.

Every error is `{"type": "error", "error": {"type": ..., "message": ...}}` with its HTTP
status (`invalid_request_error` 400, `authentication_error` 401, `not_found_error` 404, ...);
the mock adds the `request_id` Anthropic puts next to it when it sends one (messages.py).

The wording is copied from real responses, as users and gateways quote them, because the
proxy's overflow classifier and the clients behind it (Claude Code reacts to "prompt is too
long" by compacting) match on it:

- overflow: `prompt is too long: N tokens > M maximum` (shared/fixtures/overflow_errors.json,
  `anthropic_prompt_too_long`, from anthropics/claude-code#12186);
- tool pairing: "`tool_use` ids were found without `tool_result` blocks immediately after"
  (anthropics/claude-code#5060, #5989: several ids joined with ", ") and "unexpected
  `tool_use_id` found in `tool_result` blocks" (anthropics/claude-code#13460,
  router-for-me/CLIProxyAPI#497);
- roles: "first message must use the \"user\" role" (lobehub/lobehub#1601) and "roles must
  alternate ..." (lobehub/lobehub#1496, etkecc/baibot#13), which the API sent before it
  merged consecutive turns and which Bedrock and strict compatible servers still send;
- prompt caching: "A maximum of 4 blocks with cache_control may be provided. Found N."
  (continuedev/continue#6937);
- thinking: "Invalid `signature` in `thinking` block" (anthropics/claude-code#10627), and the
  tool-loop rule "Expected `thinking` or `redacted_thinking`, but found ..." (quoted in
  lbjlaq/Antigravity-Manager#139, "preceeding" misspelt as the API spells it);
- headers: "x-api-key header is required" (401) and "anthropic-version: header is required"
  (envoyproxy/ai-gateway#1909).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.script import JSON

THINKING_DOCS: Final = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def anthropic_error(status: int, kind: str, message: str) -> Rejected:
    """A refusal in Anthropic's envelope."""
    body: JSON = {"type": "error", "error": {"type": kind, "message": message}}
    return Rejected(status, body)


def invalid(message: str) -> Rejected:
    return anthropic_error(400, "invalid_request_error", message)


def prompt_too_long(prompt: int, window: int) -> Rejected:
    """The overflow: the prompt's size, then the window."""
    return invalid(f"prompt is too long: {prompt} tokens > {window} maximum")


def credentials_missing() -> Rejected:
    return anthropic_error(401, "authentication_error", "x-api-key header is required")


def version_missing() -> Rejected:
    return invalid("anthropic-version: header is required")


def not_found() -> Rejected:
    """A path the provider does not serve (`count_tokens`, when switched off)."""
    return anthropic_error(404, "not_found_error", "Not Found")


def no_messages() -> Rejected:
    return invalid("messages: at least one message is required")


def first_not_user() -> Rejected:
    return invalid('messages: first message must use the "user" role')


def roles_not_alternating(role: str) -> Rejected:
    return invalid(
        'messages: roles must alternate between "user" and "assistant", but found multiple '
        f'"{role}" roles in a row'
    )


def too_many_breakpoints(found: int) -> Rejected:
    return invalid(f"A maximum of 4 blocks with cache_control may be provided. Found {found}.")


def unanswered_tool_use(index: int, ids: Sequence[str]) -> Rejected:
    """Calls of the assistant message at `index` with no result at the start of the next."""
    return invalid(
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(ids)}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message."
    )


def unexpected_tool_result(index: int, block: int, tool_use_id: str) -> Rejected:
    """A result answering no call of the assistant message before it."""
    return invalid(
        f"messages.{index}.content.{block}: unexpected `tool_use_id` found in `tool_result` "
        f"blocks: {tool_use_id}. Each `tool_result` block must have a corresponding "
        "`tool_use` block in the previous message."
    )


def signature_missing(index: int, block: int) -> Rejected:
    return invalid(f"messages.{index}.content.{block}.thinking.signature: Field required")


def invalid_signature(index: int, block: int) -> Rejected:
    return invalid(f"messages.{index}.content.{block}: Invalid `signature` in `thinking` block")


def thinking_expected(index: int, found: str) -> Rejected:
    """With thinking enabled, the assistant turn of an unfinished tool loop must open with
    its thinking."""
    return invalid(
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
        f"found `{found}`. When `thinking` is enabled, a final `assistant` message must start "
        "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
        "blocks). We recommend you include thinking blocks from previous turns. To avoid this "
        f"requirement, disable `thinking`. Please consult our documentation at {THINKING_DOCS}"
    )
