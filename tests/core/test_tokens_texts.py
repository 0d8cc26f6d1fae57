"""Texts a compaction counts again and again (statements, names, summary lines): cached."""

from __future__ import annotations

import pytest

from proxy.core import tokens
from proxy.core.digests import Digests
from proxy.core.tokens import LARGE_TEXT_CHARS, SHORT_TEXT_CHARS, TokenCounter
from tests.core.test_tokens_large import Recording


def test_a_short_or_middling_text_is_encoded_once() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder)
    short, middling = "Never push to main.", "word " * SHORT_TEXT_CHARS
    first = (counter.text(short), counter.text(middling))
    assert (counter.text(short), counter.text(middling)) == first
    assert encoder.seen == [len(short), len(middling)]
    # One cache for every request: a counter keyed for a request finds the counts too.
    assert counter.for_request(Digests()).text(short) == first[0]
    assert len(encoder.seen) == 2
    assert len(middling) < LARGE_TEXT_CHARS


def test_the_oldest_text_goes_first_when_the_cache_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "_KNOWN_CACHE_SIZE", 2)
    encoder = Recording()
    counter = TokenCounter(encoder)
    for text in ("one", "two", "three", "two", "one"):
        counter.text(text)
    # "one" was forgotten for "three", "two" still known: encoded again only "one".
    assert encoder.seen == [3, 3, 5, 3]


def test_texts_counted_apart_are_known_once_merged() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder).for_request(Digests())
    counter.text("known before")
    apart = counter.apart()
    apart.text("counted apart")
    assert encoder.seen == [len("known before"), len("counted apart")]
    counter.merge(apart)
    counter.text("counted apart")
    assert len(encoder.seen) == 2
