"""The Responses API's compaction items, as the proxy reads and writes them.

A client asks for a compaction in one of two ways (OpenAI's contract, `openai` SDK types
`CompactedResponse`, `ResponseCompactionItem`, `CompactionTrigger`): `POST
/v1/responses/compact`, or a `/v1/responses` request whose `input` ends with
`{"type": "compaction_trigger"}` (`trigger_at_end`, `without_trigger`). Either way the
answer is one `compaction` item (`compaction_item`), which the client keeps in place of the
conversation it condensed, after the user messages (`user_items`, given back as they came),
and sends back in `input` on every later request.

A third way asks the provider to compact on its own: `context_management: [{"type":
"compaction", "compact_threshold": N}]` on an ordinary request (`automatic`): once the input
passes N tokens, the provider compacts and the response's output opens with the
`compaction` item, before the model's answer. The client appends the output to its history
as usual, and may drop every item before the latest compaction item.

When the proxy made the item, its `encrypted_content` is a sealed capsule
(`proxy.core.capsule`). `expand` replaces each such item in a request's `input` with the
message its block makes (`block_item`): the message the proxy's checkpoint view holds, as
`proxy.core.responses.to_items` writes it, so the same bytes on every request and the
provider's prompt cache keeps the prefix. An automatic compaction's item stands for all
that precedes it: the items before it go, but for the leading instructions and the user's
messages, which its view kept (a client that dropped them gets the block alone). An item
the proxy did not make (no marker: the provider's own) is left as it is; one whose seal
fails is refused with a 400 naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.capsule import Capsule, Flaw, Sealer, SealError, is_sealed
from proxy.core.messages import INSTRUCTION_ROLES, Message
from proxy.core.responses import to_items
from proxy.core.summary import note_digest
from proxy.errors import InvalidRequestError

COMPACTION: Final = "compaction"
TRIGGER: Final = "compaction_trigger"
MANAGEMENT: Final = "context_management"
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
    blocks: tuple[Any, ...] = ()
    """The block items in `body`'s `input` (`proxy.core.responses.to_messages` keeps each a
    message of its own)."""


@dataclass(frozen=True, slots=True)
class Automatic:
    """A client's request that the provider compact on its own (`context_management`)."""

    threshold: int | None
    """`compact_threshold`: the input's tokens from which to compact (None: the
    provider's own choice)."""


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
    message (by nothing, for an item that stands for nothing), and the items an automatic
    compaction's item stands for left out (see the module's doc).

    The block's message takes the role its capsule says, unless no user message precedes
    it: then the user's (the first message after the instructions is the user's).

    Raises InvalidRequestError naming the item (`input[i]`) when one cannot be opened:
    altered, sealed with another key, or with no key to open it (`sealer` None).
    """
    given = body.get("input")
    if not isinstance(given, list):
        return Expansion(body)
    ours = [i for i, item in enumerate(given) if _is_ours(item)]
    if not ours:
        return Expansion(body)
    capsules = {index: _opened(sealer, given[index]["encrypted_content"], index) for index in ours}
    latest = max((i for i, capsule in capsules.items() if capsule.covers_prior), default=0)
    items: list[Any] = []
    blocks: list[Any] = []
    leading = True
    for index, item in enumerate(given):
        leading = leading and _is_instruction(item)
        if index < latest and not (leading or _is_user_message(item)):
            continue
        capsule = capsules.get(index)
        if capsule is None:
            items.append(item)
        elif capsule.block is not None:
            role = capsule.role if any(_is_user_message(i) for i in items) else "user"
            items.append(block_item(capsule.block, role))
            blocks.append(items[-1])
    used = [capsules[index] for index in ours if index >= latest]
    notes = frozenset(note_digest(c.block) for c in used if c.block is not None)
    return Expansion({**body, "input": items}, notes, used[0].session, tuple(blocks))


def automatic(body: Mapping[str, Any]) -> Automatic | None:
    """The compaction `context_management` asks the provider for, if it asks for one.

    Raises InvalidRequestError for a field the provider would refuse: not an array, an entry
    that is no object or of another type (OpenAI knows only `compaction`), a threshold that
    is no positive integer.
    """
    given = body.get(MANAGEMENT)
    if given is None:
        return None
    if not isinstance(given, list):
        raise InvalidRequestError(
            f"Invalid type for '{MANAGEMENT}': expected an array of objects.",
            param=MANAGEMENT,
            code="invalid_type",
        )
    found: Automatic | None = None
    for index, entry in enumerate(given):
        where = f"{MANAGEMENT}[{index}]"
        if not isinstance(entry, dict) or entry.get("type") != COMPACTION:
            raise InvalidRequestError(
                f"Invalid value for '{where}': the only context management entry type "
                f"supported is '{COMPACTION}'.",
                param=f"{where}.type",
                code="invalid_value",
            )
        threshold = entry.get("compact_threshold")
        if threshold is not None and (type(threshold) is not int or threshold < 1):
            raise InvalidRequestError(
                f"Invalid '{where}.compact_threshold': expected a positive integer.",
                param=f"{where}.compact_threshold",
                code="invalid_value",
            )
        found = found or Automatic(threshold)
    return found


def without_management(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` without `context_management`, for an upstream that does not compact: the
    proxy does it in its place."""
    return {key: value for key, value in body.items() if key != MANAGEMENT}


def _is_instruction(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") in INSTRUCTION_ROLES
    )


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
