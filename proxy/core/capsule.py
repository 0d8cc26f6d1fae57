"""What the proxy's own compaction items carry, sealed with its key.

OpenAI's compaction item (`{"type": "compaction", "encrypted_content": ...}`) is opaque to
the client: only the server that made it can read it, and the client sends it back as it
got it. When the proxy answers a compaction itself (`POST /v1/responses/compact`, a
`compaction_trigger`), its item's `encrypted_content` is a *capsule*: the compaction block
the item stands for, the role its message takes, the session it belongs to and the
checkpoint stored for it, sealed so that the proxy expands only what it wrote, unaltered.

The sealed form is one line of ASCII:

    compaction-proxy.1.<key id>.<payload>.<signature>

- `compaction-proxy.` is the marker: an `encrypted_content` without it is someone else's
  (OpenAI's start with `gAAAAA`) and is never touched.
- `1` is the format's version.
- the key id is 8 hex digits naming the key (an HMAC of a fixed label), so that an item
  sealed with another key is told apart from an altered one.
- the payload is the capsule's JSON, zlib-compressed, in unpadded base64url.
- the signature is HMAC-SHA256 over everything before it (marker, version, key id and
  payload), with a key derived from the configured one, in unpadded base64url.

Signed, not encrypted: the payload is readable by whoever holds the item, that is the client
whose own conversation it condenses. The signature is what matters: an item the proxy
expands into a request is one it made, byte for byte. Nothing here depends on time or
randomness: the same capsule seals to the same text, so an item is byte-stable.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

MARKER: Final = "compaction-proxy."
"""How an `encrypted_content` the proxy sealed begins."""
VERSION: Final = "1"
KEY_ID_CHARS: Final = 8
MIN_KEY_BYTES: Final = 32
"""The shortest key accepted: 256 bits, as HMAC-SHA256 wants."""

_SIGNING_LABEL: Final = b"compaction-proxy capsule signature"
_KEY_ID_LABEL: Final = b"compaction-proxy key id"


class Flaw(enum.Enum):
    """Why a sealed capsule cannot be opened."""

    MALFORMED = "malformed"
    VERSION = "version"
    KEY = "key"
    SIGNATURE = "signature"


class SealError(Exception):
    """A capsule with the proxy's marker that this proxy cannot open; `flaw` says why."""

    def __init__(self, flaw: Flaw, message: str) -> None:
        super().__init__(message)
        self.flaw = flaw
        self.message = message


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """The checkpoint stored for the compacted conversation: its body prefix and length."""

    prefix_hash: str
    covered: int


@dataclass(frozen=True, slots=True)
class Capsule:
    """What one of the proxy's compaction items stands for."""

    block: str | None
    """The compaction block (its note, ledger and trail); None when nothing was condensed
    (the conversation held only the user's messages): the item then stands for nothing."""
    role: str = "assistant"
    """The role of the message the block is expanded into (the side of the conversation
    it stands on: after the user's messages, the assistant's)."""
    session: str | None = None
    """The session the compaction belongs to: its recall ids resolve there."""
    checkpoint: CheckpointRef | None = None
    model: str | None = None
    covers_prior: bool = False
    """Whether the item stands for every item before it but the instructions and the user's
    messages: an automatic compaction's (`context_management`), after which a client may
    drop everything before the item, or keep it all and send it back."""

    def to_json(self) -> dict[str, Any]:
        checkpoint = self.checkpoint
        data: dict[str, Any] = {
            "block": self.block,
            "role": self.role,
            "session": self.session,
            "checkpoint": None
            if checkpoint is None
            else {"prefix_hash": checkpoint.prefix_hash, "covered": checkpoint.covered},
            "model": self.model,
        }
        if self.covers_prior:
            # Only when set: every item made before the key existed seals as it did.
            data["covers_prior"] = True
        return data

    @classmethod
    def from_json(cls, data: object) -> Capsule:
        """The capsule `data` holds. Raises ValueError when it holds none."""
        if not isinstance(data, Mapping):
            raise ValueError("not an object")
        block, role = data.get("block"), data.get("role")
        session, model = data.get("session"), data.get("model")
        if not (_optional_str(block) and isinstance(role, str) and _optional_str(session)):
            raise ValueError("block, role or session of the wrong type")
        if not _optional_str(model):
            raise ValueError("model of the wrong type")
        covers_prior = data.get("covers_prior", False)
        if not isinstance(covers_prior, bool):
            raise ValueError("covers_prior of the wrong type")
        checkpoint = _checkpoint(data.get("checkpoint"))
        return cls(block, role, session, checkpoint, model, covers_prior)


def _optional_str(value: object) -> bool:
    return value is None or isinstance(value, str)


def _checkpoint(value: object) -> CheckpointRef | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError("checkpoint is not an object")
    prefix, covered = value.get("prefix_hash"), value.get("covered")
    if not isinstance(prefix, str) or type(covered) is not int:
        raise ValueError("checkpoint of the wrong shape")
    return CheckpointRef(prefix, covered)


def is_sealed(content: object) -> bool:
    """Whether `content` (an item's `encrypted_content`) was sealed by a compaction-proxy."""
    return isinstance(content, str) and content.startswith(MARKER)


class Sealer:
    """Seals and opens capsules with one key (`responses.compaction_key`): every replica
    that shares the key reads what any of them sealed."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a sealing key needs at least {MIN_KEY_BYTES} bytes")
        # Derived keys, one per use: the configured key itself signs nothing.
        self._signing = hmac.new(key, _SIGNING_LABEL, hashlib.sha256).digest()
        self.key_id = hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:KEY_ID_CHARS]

    def seal(self, capsule: Capsule) -> str:
        """The sealed text of `capsule` (the same capsule always seals to the same text)."""
        raw = json.dumps(capsule.to_json(), sort_keys=True, separators=(",", ":")).encode()
        payload = _b64(zlib.compress(raw, 9))
        signed = f"{MARKER}{VERSION}.{self.key_id}.{payload}"
        return f"{signed}.{self._signature(signed)}"

    def open(self, sealed: str) -> Capsule:
        """The capsule `sealed` holds. Raises SealError: malformed, of another version,
        sealed with another key, or altered."""
        parts = sealed[len(MARKER) :].split(".") if is_sealed(sealed) else []
        if len(parts) != 4:
            raise SealError(Flaw.MALFORMED, "it is not in the proxy's sealed form")
        version, key_id, payload, signature = parts
        if version != VERSION:
            raise SealError(
                Flaw.VERSION,
                f"it is in format version {version[:8]!r}, which this proxy does not read "
                f"(it reads version {VERSION})",
            )
        if key_id != self.key_id:
            raise SealError(
                Flaw.KEY,
                f"it was sealed with another key (key id {key_id[:KEY_ID_CHARS]!r}; this "
                f"proxy's is {self.key_id!r}): responses.compaction_key differs between the "
                "proxy that made it and this one, or the proxy restarted without one set",
            )
        signed = sealed[: len(sealed) - len(signature) - 1]
        if not hmac.compare_digest(signature.encode(), self._signature(signed).encode()):
            raise SealError(
                Flaw.SIGNATURE,
                "its signature does not match its content: the item was altered after the "
                "proxy made it",
            )
        try:
            return Capsule.from_json(json.loads(zlib.decompress(_unb64(payload))))
        except (ValueError, zlib.error, binascii.Error) as exc:
            # Signed by this key, yet unreadable: written by a proxy of another build.
            raise SealError(Flaw.MALFORMED, f"its content cannot be read ({exc})") from exc

    def _signature(self, signed: str) -> str:
        return _b64(hmac.new(self._signing, signed.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
