"""The mock's thinking blocks and their signatures.

Anthropic signs each `thinking` block it returns; a block that comes back with its text or its
signature changed in any byte is refused. The mock signs the same way in spirit: the signature
is a keyed hash of the thinking text, base64-encoded to the few hundred characters real ones
have, so it verifies without the mock remembering anything, and any edit of either field (or a
signature another provider made) fails.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Final

from proxy.mock_upstream.script import JSON, Reply

_KEY: Final = b"compaction-proxy mock thinking key"
_DIGESTS: Final = 4
"""Digests of 64 bytes per signature: 344 characters once encoded."""


def thinking_text(reply: Reply) -> str:
    """What the mock thinks before `reply`: the step it is about to take."""
    names = ", ".join(call.name for call in reply.tool_calls)
    step = f"I should call {names} next." if names else "I can answer the user now."
    return f"The user's request needs care. {step}"


def signature(thinking: str) -> str:
    digests = b"".join(
        hashlib.blake2b(f"{n}:{thinking}".encode(), key=_KEY, digest_size=64).digest()
        for n in range(_DIGESTS)
    )
    return base64.b64encode(digests).decode("ascii")


def thinking_block(reply: Reply) -> JSON:
    text = thinking_text(reply)
    return {"type": "thinking", "thinking": text, "signature": signature(text)}


def verifies(block: JSON) -> bool:
    """Whether a `thinking` block carries the signature the mock made for its text."""
    thinking, signed = block.get("thinking"), block.get("signature")
    return isinstance(thinking, str) and isinstance(signed, str) and signed == signature(thinking)
