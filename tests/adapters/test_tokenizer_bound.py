"""The bound huge texts are counted by: tiktoken never makes more tokens than UTF-8 bytes."""

from __future__ import annotations

import random
import string

import pytest

from proxy.adapters.tokenizer import load_encoders
from proxy.core.tokens import CL100K_BASE, O200K_BASE, utf8_size
from tests import optional

_rng = random.Random(7)
TEXTS = {
    "base64": "".join(_rng.choices(string.ascii_letters + string.digits + "+/", k=20_000)),
    "punctuation": "".join(_rng.choices(string.punctuation, k=20_000)),
    "emoji": "".join(chr(_rng.randrange(0x1F300, 0x1F6FF)) for _ in range(5_000)),
    "cjk": "".join(chr(_rng.randrange(0x4E00, 0x9FFF)) for _ in range(5_000)),
    "controls": "".join(chr(_rng.randrange(0, 32)) for _ in range(20_000)),
    "latin": "".join(chr(_rng.randrange(0x80, 0x800)) for _ in range(10_000)),
}


@pytest.mark.parametrize("encoding", [O200K_BASE, CL100K_BASE])
@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_tokens_never_exceed_utf8_bytes(encoding: str, kind: str) -> None:
    encoder = load_encoders((encoding,)).by_name.get(encoding)
    if encoder is None:
        optional.skip(f"{encoding} not available offline")
    text = TEXTS[kind]
    assert encoder.count(text) <= utf8_size(text)
