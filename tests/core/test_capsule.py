"""Sealing the proxy's compaction capsules: what the proxy sealed opens to the same capsule,
byte-stable; anything else is told apart (malformed, another version, another key, altered)."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.capsule import (
    MARKER,
    Capsule,
    CheckpointRef,
    Flaw,
    Sealer,
    SealError,
    is_sealed,
)

KEY = b"k" * 32
SEALER = Sealer(KEY)
CAPSULE = Capsule(
    "[3 earlier messages omitted]\n\nWhat the user said ...",
    "assistant",
    "s1",
    CheckpointRef("ab12", 7),
    "gpt-5",
)


def refusal(sealed: str, sealer: Sealer = SEALER) -> SealError:
    with pytest.raises(SealError) as raised:
        sealer.open(sealed)
    return raised.value


def flaw_of(sealed: str, sealer: Sealer = SEALER) -> Flaw:
    return refusal(sealed, sealer).flaw


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signed(payload: str) -> str:
    """`payload` (its sealed form's third part) signed with the sealer's key, whatever it
    holds: what a proxy of another build, sharing the key, would send."""
    text = f"{MARKER}1.{SEALER.key_id}.{payload}"
    return f"{text}.{SEALER._signature(text)}"


def test_a_sealed_capsule_opens_to_itself() -> None:
    sealed = SEALER.seal(CAPSULE)
    assert sealed.startswith(f"{MARKER}1.{SEALER.key_id}.")
    assert is_sealed(sealed)
    assert SEALER.open(sealed) == CAPSULE
    assert sealed.isascii()
    assert "=" not in sealed


def test_sealing_is_byte_stable_and_needs_no_clock_or_randomness() -> None:
    assert SEALER.seal(CAPSULE) == SEALER.seal(CAPSULE) == Sealer(KEY).seal(CAPSULE)


def test_an_automatic_compactions_capsule_says_it_covers_what_precedes_it() -> None:
    automatic = Capsule("block", "assistant", "s1", None, None, covers_prior=True)
    assert SEALER.open(SEALER.seal(automatic)) == automatic
    # The key is written only when set: every item made before it seals as it did.
    payload = json.loads(zlib.decompress(unb64(SEALER.seal(CAPSULE).split(".")[3])))
    assert "covers_prior" not in payload


def test_a_capsule_that_stands_for_nothing_seals_too() -> None:
    empty = Capsule(None, "user")
    assert SEALER.open(SEALER.seal(empty)) == empty


def test_the_payload_is_compressed_and_readable_by_whoever_holds_it() -> None:
    # Signed, not encrypted: the client holding the item can read its own conversation back.
    block = "the same sentence again. " * 200
    sealed = SEALER.seal(Capsule(block))
    assert len(sealed) < len(block) // 4
    raw = zlib.decompress(unb64(sealed.split(".")[3]))
    assert json.loads(raw)["block"] == block


def test_another_key_is_told_apart_from_an_altered_item() -> None:
    other = Sealer(b"o" * 32)
    error = refusal(SEALER.seal(CAPSULE), other)
    assert error.flaw is Flaw.KEY
    assert SEALER.key_id in error.message
    assert other.key_id in error.message
    assert "responses.compaction_key" in error.message


@pytest.mark.parametrize("part", [3, 4])
def test_an_altered_payload_or_signature_fails_its_signature(part: int) -> None:
    parts = SEALER.seal(CAPSULE).split(".")
    parts[part] = parts[part][:-1] + ("A" if parts[part][-1] != "A" else "B")
    assert flaw_of(".".join(parts)) is Flaw.SIGNATURE


def test_non_ascii_in_a_signature_fails_it_without_crashing() -> None:
    assert flaw_of(SEALER.seal(CAPSULE) + "é") is Flaw.SIGNATURE


def test_another_version_is_named() -> None:
    sealed = SEALER.seal(CAPSULE).replace(f"{MARKER}1.", f"{MARKER}2.", 1)
    error = refusal(sealed)
    assert error.flaw is Flaw.VERSION
    assert "'2'" in error.message


@pytest.mark.parametrize(
    "sealed", [f"{MARKER}1.abc", f"{MARKER}", "gAAAAABm-openai-ciphertext", f"{MARKER}1.a.b.c.d"]
)
def test_what_is_not_in_the_sealed_form_is_malformed(sealed: str) -> None:
    assert flaw_of(sealed) is Flaw.MALFORMED


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        b'{"block": 3, "role": "assistant"}',
        b'{"block": null, "role": "user", "model": 4}',
        b'{"block": null, "role": "user", "checkpoint": "ab"}',
        b'{"block": null, "role": "user", "checkpoint": {"prefix_hash": "ab", "covered": "7"}}',
        b'{"block": null, "role": "user", "covers_prior": 1}',
    ],
)
def test_a_signed_payload_that_holds_no_capsule_is_malformed(payload: bytes) -> None:
    error = refusal(signed(b64(zlib.compress(payload))))
    assert error.flaw is Flaw.MALFORMED
    assert "cannot be read" in error.message


def test_a_signed_payload_that_is_not_zlib_is_malformed() -> None:
    assert flaw_of(signed(b64(b"not zlib"))) is Flaw.MALFORMED


def test_only_the_marker_makes_content_ours() -> None:
    assert not is_sealed("gAAAAABm")
    assert not is_sealed(None)
    assert not is_sealed(3)


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Sealer(b"short")


capsules = st.builds(
    Capsule,
    st.none() | st.text(),
    st.sampled_from(["assistant", "user"]),
    st.none() | st.text(max_size=40),
    st.none() | st.builds(CheckpointRef, st.text(max_size=64), st.integers(0, 10**6)),
    st.none() | st.text(max_size=40),
    st.booleans(),
)


@given(capsules)
def test_every_capsule_opens_to_itself(capsule: Capsule) -> None:
    assert SEALER.open(SEALER.seal(capsule)) == capsule


@given(capsules, st.data())
def test_any_altered_character_is_refused(capsule: Capsule, data: st.DataObject) -> None:
    sealed = SEALER.seal(capsule)
    at = data.draw(st.integers(0, len(sealed) - 1))
    other = data.draw(st.characters(codec="ascii").filter(lambda c: c != sealed[at]))
    with pytest.raises(SealError):
        SEALER.open(sealed[:at] + other + sealed[at + 1 :])
