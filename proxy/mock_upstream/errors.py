"""The refusals the mock sends, worded as real providers word them.

The wording is data copied from real responses, not invented, because the proxy's overflow
classifier and its callers match on it:

- overflow: OpenAI's `context_length_exceeded` bodies, verbatim from
  tests/core/fixtures/overflow_errors.json (`openai_chat_messages` when the request reserves
  no output, `openai_chat_with_completion` when it sets `max_tokens`);
- tool pairing: OpenAI's chat completions validation, as users report it (misspelt
  "preceeding" included: miurla/morphic#136, sdcb/chats#132, router-for-me/CLIProxyAPI#2798,
  dapr/dapr-agents#145, MadcowD/ell#325). OpenAI names the offending message in `param` as
  `messages.[i].role` or `messages.[i].tool_call_id` and sends `code: null`;
- alternation: the Jinja exception of Mistral's chat template as vLLM returns it
  (vllm-project/vllm#6862), in vLLM's current `{"error": ...}` envelope.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.mock_upstream.script import JSON


class Rejected(Exception):
    """A request the mock refuses before any model sees it: the status and body to send."""

    def __init__(self, status: int, body: JSON) -> None:
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body


def _openai(message: str, param: str | None, code: str | None = None) -> Rejected:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Rejected(400, {"error": error})


def context_length_exceeded(window: int, prompt: int, output: int) -> Rejected:
    """OpenAI's overflow; `output` is the request's `max_tokens` (0 when it sets none)."""
    if output:
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + output} tokens ({prompt} in the messages, {output} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        )
    return _openai(message, "messages", "context_length_exceeded")


def orphaned_tool_result(index: int) -> Rejected:
    """A `tool` message that follows no assistant message with `tool_calls`."""
    return _openai(
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.",
        f"messages.[{index}].role",
    )


def unknown_tool_call_id(index: int, call_id: str) -> Rejected:
    """A `tool` message answering an id the assistant message before it did not call."""
    return _openai(
        f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of "
        "previous message.",
        f"messages.[{index}].tool_call_id",
    )


def missing_tool_call_id(index: int) -> Rejected:
    return _openai(
        "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.",
        f"messages.[{index}].tool_call_id",
    )


def unanswered_tool_calls(index: int, call_ids: Sequence[str]) -> Rejected:
    """Calls of an assistant message that no `tool` message after it answers."""
    return _openai(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(call_ids),
        f"messages.[{index}].role",
    )


def roles_not_alternating() -> Rejected:
    message = (
        "After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/..."
    )
    error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
    return Rejected(400, {"error": error})
