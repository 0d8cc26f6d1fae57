"""Huge texts: a bound instead of an encoding, and counts made apart (in a worker thread)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from proxy.core.digests import Digests
from proxy.core.tokens import (
    LARGE_TEXT_CHARS,
    ApproximateEncoder,
    TokenCounter,
    text_size,
    utf8_size,
)


@dataclass
class Recording:
    """A `TextEncoder` (the approximate one) that remembers the lengths it was asked about."""

    name: str = "approximate"
    seen: list[int] = field(default_factory=list)

    def count(self, text: str) -> int:
        self.seen.append(len(text))
        return ApproximateEncoder().count(text)


def test_text_over_exact_max_counts_as_its_utf8_bytes_unencoded() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder, exact_max_bytes=LARGE_TEXT_CHARS)
    text = "é" * LARGE_TEXT_CHARS  # two bytes each
    assert counter.text(text) == 2 * LARGE_TEXT_CHARS
    assert encoder.seen == []


def test_text_under_exact_max_is_encoded() -> None:
    counter = TokenCounter(ApproximateEncoder())
    text = "word " * LARGE_TEXT_CHARS
    assert counter.text(text) == ApproximateEncoder().count(text)


def test_large_text_count_is_cached_by_content() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder)
    text = "x" * LARGE_TEXT_CHARS
    first = counter.text(text)
    assert counter.text("".join(["x"] * LARGE_TEXT_CHARS)) == first
    assert encoder.seen == [LARGE_TEXT_CHARS]


def test_counts_made_apart_serve_later_counts_without_encoding() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder).for_request(Digests())
    big = {"role": "user", "content": "y" * (2 * LARGE_TEXT_CHARS)}
    messages = [big, {"role": "user", "content": "hi"}]
    pending = counter.unknown(messages)
    assert [message for _, message in pending] == messages
    counted = counter.count_apart(pending)
    encoder.seen.clear()
    counter.remember(counted)
    assert counter.unknown(messages) == []
    expected = TokenCounter(ApproximateEncoder()).messages(messages)
    assert counter.messages(messages) == expected
    assert counter.text("y" * (2 * LARGE_TEXT_CHARS)) > 0
    assert encoder.seen == []  # the messages and the large text were all cached


def test_count_apart_leaves_the_counter_caches_alone() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder)
    message = {"role": "user", "content": "z" * LARGE_TEXT_CHARS}
    counter.count_apart(counter.unknown([message]))
    encoder.seen.clear()
    counter.message(message)
    assert LARGE_TEXT_CHARS in encoder.seen


def test_cache_size_bounds_remembered_messages() -> None:
    counter = TokenCounter(ApproximateEncoder(), cache_size=1)
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    counter.remember(counter.count_apart(counter.unknown(messages)))
    assert len(counter.unknown(messages)) == 1


def test_text_size_sums_the_strings_of_a_message() -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "abc"}], "n": 1}
    assert text_size(message) == len("role") + 4 + len("content") + 4 + 4 + 4 + 3 + 1
    # Any mapping counts as a dict does (a message need not be one).
    assert text_size(MappingProxyType(message)) == text_size(message)
    assert text_size([MappingProxyType({"k": "v"}), "ab", None]) == 4


def test_utf8_size() -> None:
    assert utf8_size("abc") == 3
    assert utf8_size("é€😀") == 2 + 3 + 4
    assert utf8_size("\ud800") == 3
