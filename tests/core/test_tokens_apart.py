"""A counter for a plan in a worker thread: tables of its own, merged back afterwards."""

from __future__ import annotations

from typing import Any

from proxy.core.digests import Digests, digest
from proxy.core.tokens import LARGE_TEXT_CHARS, TokenCounter
from tests.core.test_tokens_large import Recording

BIG = {"role": "user", "content": "y" * (2 * LARGE_TEXT_CHARS)}
SMALL = {"role": "assistant", "content": "fine"}
BODY: dict[str, Any] = {
    "tools": [{"type": "function", "function": {"name": "look", "parameters": {}}}]
}


def test_apart_knows_every_count_the_counter_made() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder).for_request(Digests())
    tokens = counter.messages([BIG, SMALL]) + counter.tools(BODY)
    # What an earlier plan made and counted (a placeholder), not in this plan's input.
    placeholder = {"role": "tool", "content": "[tool result cleared to save context]"}
    counted = counter.message(placeholder) + counter.text("Never push to main.")
    unknown = {"role": "user", "content": "not counted yet"}
    apart = counter.apart()
    encoder.seen.clear()
    assert apart.messages([BIG, SMALL]) + apart.tools(BODY) == tokens
    assert apart.text(BIG["content"]) == counter.text(BIG["content"])
    assert apart.message(placeholder) + apart.text("Never push to main.") == counted
    assert encoder.seen == []  # cached counts, long and short texts included, all found
    apart.message(unknown)
    assert encoder.seen == [len("not counted yet")]


def test_apart_never_changes_the_counter_tables() -> None:
    digests = Digests()
    counter = TokenCounter(Recording()).for_request(digests)
    counter.message(SMALL)
    apart = counter.apart()
    trimmed = {"role": "user", "content": "z" * LARGE_TEXT_CHARS}
    apart.messages([trimmed, {"role": "tool", "content": "new"}])
    assert list(digests._known) == [id(SMALL)]  # the thread's digests: its own table
    assert len(counter._texts) == 0
    assert counter.unknown([trimmed]) == [(b"m" + digest(trimmed), trimmed)]


def test_merge_caches_what_apart_counted_and_its_digests() -> None:
    encoder = Recording()
    digests = Digests()
    counter = TokenCounter(encoder).for_request(digests)
    apart = counter.apart()
    trimmed = {"role": "user", "content": "z" * LARGE_TEXT_CHARS}
    tokens = apart.message(trimmed)
    counter.merge(apart)
    encoder.seen.clear()
    assert counter.message(trimmed) == tokens
    assert counter.text(trimmed["content"]) == apart.text(trimmed["content"])
    assert encoder.seen == []
    assert digests.of(trimmed) == digest(trimmed)  # known: merged from the copy
    assert id(trimmed) in digests._known


def test_apart_of_a_counter_without_digests_hashes_by_content() -> None:
    encoder = Recording()
    counter = TokenCounter(encoder)
    tokens = counter.message(BIG)
    apart = counter.apart()  # an equal message: the same key
    encoder.seen.clear()
    assert apart.message(BIG) == tokens
    assert encoder.seen == []
    counter.merge(apart)
    assert counter.message(BIG) == tokens


def test_digests_copy_is_a_table_of_its_own() -> None:
    digests = Digests()
    digests.of(SMALL)
    copied = digests.copy()
    copied.of(BIG)
    assert id(BIG) not in digests._known
    assert id(SMALL) in copied._known
    digests.update(copied)
    assert digests._known[id(BIG)] == (BIG, digest(BIG))
