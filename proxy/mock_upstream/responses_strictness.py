"""The checks OpenAI's Responses API makes on `input`, and its refusals, word for word.

All are 400 `invalid_request_error`s with `param` "input" unless said otherwise. The wording
is OpenAI's as users report it (openai/codex, openai/openai-agents-python, and gateways such
as maximhq/bifrost#2441 and diegosouzapw/OmniRoute#8946 quoting it):

- a call's output with no call before it: "No tool call found for function call output
  with call_id {call_id}." (custom tools: "... custom tool call output ...");
- a call with no output after it: "No tool output found for function call {call_id}."
  (custom tools: "... custom tool call ..."). OpenAI asks this of every call in `input`;
- an item of a reasoning model's turn sent without the reasoning item that preceded it:
  "Item '{id}' of type '{type}' was provided without its required 'reasoning' item:
  '{rs_id}'.";
- a reasoning item whose `encrypted_content` is not what the provider encrypted: "The
  encrypted content for item {id} could not be verified.";
- a reasoning item sent by id alone (no `encrypted_content`) that the provider did not
  store: a 404, "Item with id '{id}' not found. Items are not persisted when `store` is set
  to false. Try again with `store` set to true, or remove this item from your input.";
- an unknown `previous_response_id`: "Previous response with id '{id}' not found.", param
  `previous_response_id`, code `previous_response_not_found`;
- an overflow: `context_length_exceeded` with OpenAI's fixed Responses message (it names no
  numbers, unlike chat's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.responses_items import CALLS, OUTPUTS, call_id, item_type
from proxy.mock_upstream.script import JSON

OVERFLOW_MESSAGE: Final = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
_CALL_NAMES: Final = {"function_call": "function call", "custom_tool_call": "custom tool call"}
_OUTPUT_NAMES: Final = {
    "function_call": "function call output",
    "custom": "custom tool call output",
}


def _invalid(message: str, param: str | None = "input", code: str | None = None) -> Rejected:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Rejected(400, {"error": error})


def _not_persisted(ident: str) -> Rejected:
    message = (
        f"Item with id '{ident}' not found. Items are not persisted when `store` is set to "
        "false. Try again with `store` set to true, or remove this item from your input."
    )
    error = {"message": message, "type": "invalid_request_error", "param": "input", "code": None}
    return Rejected(404, {"error": error})


def context_length_exceeded() -> Rejected:
    return _invalid(OVERFLOW_MESSAGE, "input", "context_length_exceeded")


def previous_response_not_found(response_id: str) -> Rejected:
    return _invalid(
        f"Previous response with id '{response_id}' not found.",
        "previous_response_id",
        "previous_response_not_found",
    )


def check_call_pairs(items: Sequence[Mapping[str, Any]]) -> None:
    """Raise `Rejected` for an output before (or without) its call, or a call left
    unanswered; the first problem in input order wins, unanswered calls being found last."""
    called: set[str] = set()
    unanswered: dict[str, str] = {}  # call id -> the call's type, in input order
    for item in items:
        kind, ident = item_type(item), call_id(item)
        if ident is None:
            continue
        if kind in CALLS:
            called.add(ident)
            unanswered[ident] = kind
        elif kind in OUTPUTS:
            if ident not in called:
                raise _invalid(
                    f"No tool call found for {_OUTPUT_NAMES[OUTPUTS[kind]]} with call_id {ident}."
                )
            unanswered.pop(ident, None)
    for ident, kind in unanswered.items():
        raise _invalid(f"No tool output found for {_CALL_NAMES[kind]} {ident}.")


class ReasoningLedger:
    """What the mock's reasoning model produced: each reasoning item's encrypted content,
    and for each item after one, that reasoning item's id.

    A provider ties a turn's calls and messages to the reasoning that led to them; sending
    them back without it, or with its ciphertext altered, is refused (`check`).
    """

    def __init__(self) -> None:
        self.encrypted: dict[str, str] = {}
        self.follows: dict[str, str] = {}
        self.stored: set[str] = set()
        """Reasoning items of stored responses: those a request may name by id alone."""

    def remember(self, output: Sequence[JSON], *, stored: bool) -> None:
        """Note a response's output items, in order; `stored` when the response is."""
        reasoning: str | None = None
        for item in output:
            if item["type"] == "reasoning":
                reasoning = item["id"]
                self.encrypted[item["id"]] = item.get("encrypted_content", "")
                if stored:
                    self.stored.add(item["id"])
            elif reasoning is not None:
                self.follows[item["id"]] = reasoning

    def check(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Raise `Rejected` for altered ciphertext or an item parted from its reasoning."""
        for index, item in enumerate(items):
            ident = item.get("id")
            if item_type(item) == "reasoning":
                self._verify(item)
            elif isinstance(ident, str) and ident in self.follows:
                self._check_preceded(items, index, ident)

    def _verify(self, item: Mapping[str, Any]) -> None:
        encrypted, ident = item.get("encrypted_content"), item.get("id")
        if encrypted is None:
            # Named by id alone: the provider must have stored it.
            if ident not in self.stored:
                raise _not_persisted(str(ident))
            return
        if not isinstance(ident, str) or self.encrypted.get(ident) != encrypted:
            raise _invalid(f"The encrypted content for item {ident} could not be verified.")

    def _check_preceded(self, items: Sequence[Mapping[str, Any]], index: int, ident: str) -> None:
        """The item at `index` must follow its reasoning item, with only that reasoning's
        other items between them."""
        reasoning = self.follows[ident]
        before = index - 1
        while before >= 0 and self.follows.get(str(items[before].get("id"))) == reasoning:
            before -= 1
        previous = items[before] if before >= 0 else {}
        if item_type(previous) == "reasoning" and previous.get("id") == reasoning:
            return
        kind = item_type(items[index])
        raise _invalid(
            f"Item '{ident}' of type '{kind}' was provided without its required 'reasoning' "
            f"item: '{reasoning}'."
        )
