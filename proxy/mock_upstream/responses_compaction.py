"""OpenAI's own compaction, as the mock plays it: on with `native_compaction`, else refused.

OpenAI's Responses API compacts a conversation on request (see the `openai` SDK's
`CompactedResponse`, `ResponseCompactionItem` and `CompactionTrigger`):

- `POST /v1/responses/compact` answers `{"id", "object": "response.compaction",
  "created_at", "output", "usage"}`, `output` being every user message of the input, then one
  `compaction` item with an opaque `encrypted_content` (`compacted`);
- a `/v1/responses` request whose `input` ends with `{"type": "compaction_trigger"}` is
  answered with that one item as its output, no message (`triggered_output`); its stream
  carries a `response.compaction.compacting` event inside the item's added and done;
- a later request may carry the item in `input`: the provider reads only the ones it made
  (`check_compaction_items`, "could not be verified" otherwise).

A provider without native compaction (vLLM, Ollama, llama.cpp...) knows neither: the path is
a 404 and the items are 400s (`not_found`, `check_compaction_items`), so a test sees a proxy
that lets one through.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from proxy.mock_upstream.errors import Rejected
from proxy.mock_upstream.responses_items import item_type
from proxy.mock_upstream.responses_output import encrypted_content
from proxy.mock_upstream.script import JSON

COMPACTION: Final = "compaction"
TRIGGER: Final = "compaction_trigger"


def trigger_at_end(items: Sequence[Mapping[str, Any]]) -> bool:
    return bool(items) and item_type(items[-1]) == TRIGGER


def not_found(path: str) -> Rejected:
    """OpenAI's answer to a path it does not serve."""
    error = {
        "message": f"Invalid URL (POST {path})",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    return Rejected(404, {"error": error})


def check_compaction_items(
    items: Sequence[Mapping[str, Any]], *, native: bool, made: set[str]
) -> None:
    """Raise `Rejected` for a compaction item (or trigger) the provider cannot read: any,
    without native compaction; one it did not make, with it. A trigger must come last."""
    for index, item in enumerate(items):
        kind = item_type(item)
        if kind not in (COMPACTION, TRIGGER):
            continue
        if not native:
            raise _invalid(
                f"Invalid value: '{kind}'. This provider does not support compaction items.",
                f"input[{index}].type",
                "invalid_value",
            )
        if kind == TRIGGER and index != len(items) - 1:
            raise _invalid(
                "The compaction_trigger item must be the final input item.", f"input[{index}]"
            )
        if kind == COMPACTION and item.get("encrypted_content") not in made:
            raise _invalid(
                f"The encrypted content for item {item.get('id')} could not be verified.",
                f"input[{index}]",
            )


def compaction_item(new_id: Callable[[str], str], made: set[str]) -> JSON:
    """A new compaction item, its ciphertext remembered as one the provider made."""
    ident = new_id("cmp")
    encrypted = encrypted_content(ident)
    made.add(encrypted)
    return {"type": COMPACTION, "id": ident, "encrypted_content": encrypted}


def compacted(ident: str, items: Sequence[Mapping[str, Any]], item: JSON, usage: JSON) -> JSON:
    """The answer to `POST /v1/responses/compact`: the input's user messages, as sent, then
    the compaction item."""
    users = [dict(i) for i in items if item_type(i) == "message" and i.get("role") == "user"]
    return {
        "id": ident,
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*users, item],
        "usage": usage,
    }


def _invalid(message: str, param: str | None, code: str | None = None) -> Rejected:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Rejected(400, {"error": error})
