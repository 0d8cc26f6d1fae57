"""What messages mention, found once per message and remembered by digest."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import mentions as module
from proxy.core.artifacts import names_of
from proxy.core.digests import Digests
from proxy.core.ledger import extract_facts, ledger_of, ranked_facts
from proxy.core.mentions import Mentions
from proxy.core.messages import Message
from proxy.core.statements import message_statements, statements_of
from tests.builders import assistant_calls, tool_result, user


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the cache asked for (a name per finding), with the findings unchanged."""
    seen: list[str] = []

    def names(message: Message) -> tuple[str, ...]:
        seen.append("names")
        return names_of(message)

    def facts(message: Message) -> Any:
        seen.append("facts")
        return ranked_facts(message)

    monkeypatch.setattr(module, "names_of", names)
    monkeypatch.setattr(module, "ranked_facts", facts)
    return seen


def test_a_messages_names_and_facts_are_found_once(calls: list[str]) -> None:
    mentions = Mentions()
    result = tool_result("c1", "build 7f3a9c2e41 failed: exit code 2, see /var/log/ci.log")
    assert mentions.names(result) == ("7f3a9c2e41", "exit code 2", "/var/log/ci.log")
    # An equal message (a copy, as the next request parses it) is the same entry.
    assert mentions.names(dict(result)) == mentions.names(result)
    assert mentions.facts(result) == ranked_facts(result)
    assert mentions.facts(dict(result)) == ranked_facts(result)
    assert calls == ["names", "facts"]


def test_the_facts_make_the_ledger_extract_facts_makes() -> None:
    mentions = Mentions()
    messages = [
        user("Never push to main. Ticket ABC-1."),
        assistant_calls("c1", arguments={"path": "src/a.py"}),
        tool_result("c1", "ABC-1 at src/a.py, https://x.io/a"),
    ]
    ranked = [mentions.facts(m) for m in messages]
    for chars in (6000, 20, 0):
        assert ledger_of(ranked, max_chars=chars) == extract_facts(messages, max_chars=chars)


def test_the_least_recently_used_are_forgotten(calls: list[str]) -> None:
    mentions = Mentions(names_size=2, facts_size=1)
    first, second, third = (tool_result(f"c{i}", f"ABC-{i}") for i in range(3))
    for message in (first, second, first, third):  # `first` used again: `second` goes
        mentions.names(message)
    calls.clear()
    mentions.names(first)
    mentions.names(third)
    assert calls == []
    mentions.names(second)
    assert calls == ["names"]
    mentions.facts(first)
    mentions.facts(second)
    mentions.facts(first)
    assert calls == ["names", "facts", "facts", "facts"]


class CountingDigests(Digests):
    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def of(self, value: object) -> bytes:
        self.asked += 1
        return super().of(value)


def test_a_request_shares_the_cache_and_its_digests(calls: list[str]) -> None:
    mentions = Mentions()
    digests = CountingDigests()
    result = tool_result("c1", "see src/a.py")
    keyed = mentions.for_request(digests)
    assert keyed.names(result) == ("src/a.py",)
    assert digests.asked == 1  # the request's table: the counter and the chain hashes share it
    assert mentions.names(result) == ("src/a.py",)  # found for the request, kept by the cache
    assert calls == ["names"]


def test_work_apart_sees_what_is_known_and_gives_back_what_it_found(calls: list[str]) -> None:
    digests = Digests()
    mentions = Mentions().for_request(digests)
    known, new = tool_result("c1", "see src/a.py"), tool_result("c2", "see src/b.py")
    mentions.names(known)
    mentions.facts(known)
    apart = mentions.apart()
    calls.clear()
    assert apart.names(known) == ("src/a.py",)
    assert apart.facts(known) == ranked_facts(known)
    assert calls == []
    assert apart.names(new) == ("src/b.py",)
    assert apart.facts(new) == ranked_facts(new)
    assert calls == ["names", "facts"]
    assert len(mentions._names) == 1  # the thread wrote only its own tables
    mentions.merge(apart)
    assert mentions.names(new) == ("src/b.py",)
    assert mentions.facts(new) == ranked_facts(new)
    assert calls == ["names", "facts"]


def test_work_apart_without_a_request_keeps_no_digests(calls: list[str]) -> None:
    mentions = Mentions()
    result = tool_result("c1", "see src/a.py")
    apart = mentions.apart()
    assert apart.names(result) == ("src/a.py",)
    mentions.merge(apart)
    assert mentions.apart().names(result) == ("src/a.py",)
    assert calls == ["names"]


def test_a_messages_statements_are_found_once_and_the_tasks_rank_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []

    def statements(message: Message, is_task: bool) -> Any:
        seen.append(is_task)
        return message_statements(message, is_task)

    monkeypatch.setattr(module, "message_statements", statements)
    mentions = Mentions()
    task = user("Migrate the billing service. Keep the API stable.")
    assert mentions.statements(task, False) == message_statements(task, False)
    assert mentions.statements(dict(task), False) == message_statements(task, False)
    assert mentions.statements(task, True) == message_statements(task, True)
    assert mentions.statements(task, True) != mentions.statements(task, False)
    assert seen == [False, True]
    # Work in a thread finds them, and what it finds comes back merged.
    apart = mentions.apart()
    other = user("Never push to main.")
    assert apart.statements(task, True) == message_statements(task, True)
    assert apart.statements(other, False) == message_statements(other, False)
    assert seen == [False, True, False]
    mentions.merge(apart)
    assert mentions.statements(other, False) == message_statements(other, False)
    assert seen == [False, True, False]
    assert statements_of([task, other], task=task, each=mentions.statements) == statements_of(
        [task, other], task=task
    )
