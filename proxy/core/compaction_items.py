"""The Responses API's compaction items, as the proxy reads and writes them.

A client asks for a compaction in one of two ways (OpenAI's contract, `openai` SDK types
`CompactedResponse`, `ResponseCompactionItem`, `CompactionTrigger`): `POST
/v1/responses/compact`, or a `/v1/responses` request whose `input` ends with
`{"type": "compaction_trigger"}` (`trigger_at_end`, `without_trigger`). Either way the
answer is one `compaction` item (`compaction_item`), which the client keeps in place of the
conversation it condensed, after the user messages (`user_items`, given back as they came),
and sends back in `input` on every later request.

When the proxy made the item, its `encrypted_content` is a sealed capsule
(`proxy.core.capsule`). `expand` replaces each such item in a request's `input` with the
message its block makes (`block_item`): the message the proxy's checkpoint view holds, as
`proxy.core.responses.to_items` writes it, so the same bytes on every request and the
provider's prompt cache keeps the prefix. An item the proxy did not make (no marker: the
provider's own) is left as it is; one whose seal fails is refused with a 400 naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.capsule import Capsule, Flaw, Sealer, SealError, is_sealed
from proxy.core.messages import Message
from proxy.core.responses import to_items
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError

COMPACTION: Final = "compaction"
TRIGGER: Final = "compaction_trigger"
CREATOR: Final = "compaction-proxy"
"""The `created_by` of the proxy's compaction items."""
INVALID_CONTENT: Final = "invalid_encrypted_content"
"""The error code of an item whose seal fails."""


@dataclass(frozen=True, slots=True)
class Expansion:
    """A request body with the proxy's compaction items expanded."""

    body: Mapping[str, Any]
    """The body (the client's own object when it carried none of the proxy's items)."""
    notes: frozenset[str] = frozenset()
    """The digests (`note_digest`) of the blocks expanded: the proxy's notes, to be read as
    such by later compactions (their ledger and trail carried on), never as the client's."""
    session: str | None = None
    """The session the first expanded item belongs to."""


def trigger_at_end(body: Mapping[str, Any]) -> bool:
    """Whether `input` ends with a `compaction_trigger` item (it "must be the final input
    item": one anywhere else is the provider's to refuse)."""
    given = body.get("input")
    return isinstance(given, list) and bool(given) and _type_of(given[-1]) == TRIGGER


def without_trigger(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` without its final `compaction_trigger` item."""
    return {**body, "input": body["input"][:-1]}


def user_items(given: object) -> list[Any]:
    """The user messages of an `input`, in order, the client's own objects (a string input
    is one user message)."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        return []
    return [item for item in given if _is_user_message(item)]


def _is_user_message(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
    )


def block_role(users: Sequence[Any]) -> str:
    """The role the block's message takes after `users`: the assistant's side after a user
    message (as the proxy's note between two user turns), the user's when none precedes it
    (the first message after the instructions is the user's, for strict templates)."""
    return "assistant" if users else "user"


def block_message(block: str, role: str) -> Message:
    """The chat message that stands for `block` in the proxy's view of the conversation."""
    return {"role": role, "content": block}


def block_item(block: str, role: str) -> dict[str, Any]:
    """The `input` item a compaction item is expanded into: the block's message, as the
    proxy's checkpoint view holds it."""
    item: dict[str, Any] = to_items([block_message(block, role)])[0]
    return item


def compaction_item(sealed: str) -> dict[str, Any]:
    """The proxy's `compaction` item for a sealed capsule; its id is derived from it (the
    same compaction, the same item)."""
    digest = hashlib.blake2b(sealed.encode(), digest_size=16, person=b"compaction-item")
    return {
        "type": COMPACTION,
        "id": f"cmp_{digest.hexdigest()}",
        "encrypted_content": sealed,
        "created_by": CREATOR,
    }


def expand(body: Mapping[str, Any], sealer: Sealer | None) -> Expansion:
    """`body` with each of the proxy's compaction items in `input` replaced by its block's
    message (by nothing, for an item that stands for nothing).

    Raises InvalidRequestError naming the item (`input[i]`) when one cannot be opened:
    altered, sealed with another key, or with no key to open it (`sealer` None).
    """
    given = body.get("input")
    if not isinstance(given, list):
        return Expansion(body)
    ours = [i for i, item in enumerate(given) if _is_ours(item)]
    if not ours:
        return Expansion(body)
    items = list(given)
    capsules = [_opened(sealer, given[index]["encrypted_content"], index) for index in ours]
    for index, capsule in zip(reversed(ours), reversed(capsules), strict=True):
        block = capsule.block
        items[index : index + 1] = [] if block is None else [block_item(block, capsule.role)]
    notes = frozenset(note_digest(c.block) for c in capsules if c.block is not None)
    return Expansion({**body, "input": items}, notes, capsules[0].session)


def _is_ours(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == COMPACTION
        and is_sealed(item.get("encrypted_content"))
    )


def _opened(sealer: Sealer | None, sealed: str, index: int) -> Capsule:
    try:
        if sealer is None:
            raise SealError(
                Flaw.KEY,
                "this proxy has no responses.compaction_key to open it with",
            )
        return sealer.open(sealed)
    except SealError as exc:
        raise InvalidRequestError(
            f"Invalid 'input[{index}]': this compaction item was made by compaction-proxy, "
            f"but {exc.message}. Send the conversation without it, or compact it again.",
            param=f"input[{index}]",
            code=INVALID_CONTENT,
        ) from exc


def _type_of(item: object) -> object:
    return item.get("type") if isinstance(item, dict) else None
