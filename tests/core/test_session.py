"""Chain hashes, checkpoints and the forwarded view."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.digests import Digests
from proxy.core.messages import Message
from proxy.core.session import (
    Checkpoint,
    CompactionRecord,
    SessionState,
    TurnPoint,
    chain_hashes,
    content_hash,
    find_checkpoint,
    known_notes,
    new_checkpoint,
    session_id_of,
    split_head,
    tenant_of,
    view,
)
from proxy.core.summary import marker, note_digest
from tests.builders import assistant, system, user
from tests.core.conversations import conversation

BODY = [user("task"), assistant("a1"), user("u2"), assistant("a2"), user("u3")]


def checkpoint(covered: int, messages: list[Message]) -> Checkpoint:
    return Checkpoint(chain_hashes(BODY)[covered - 1], covered, messages, 0.0, "truncate", 9, 3)


def test_content_hash_ignores_key_order() -> None:
    assert content_hash({"role": "user", "content": "x"}) == content_hash(
        {"content": "x", "role": "user"}
    )
    assert content_hash(user("x")) != content_hash(user("y"))


def test_chain_hashes_take_a_requests_digests() -> None:
    digests = Digests()
    assert chain_hashes(BODY, digests.of) == chain_hashes(BODY)


def test_chain_hash_names_the_exact_prefix() -> None:
    hashes = chain_hashes(BODY)
    assert chain_hashes(BODY[:3]) == hashes[:3]
    edited = [user("task"), assistant("A1"), *BODY[2:]]
    assert chain_hashes(edited)[0] == hashes[0]
    assert chain_hashes(edited)[1:] != hashes[1:]  # everything after an edit differs


def test_head_is_the_leading_instructions() -> None:
    assert split_head([system(), system("b"), user(), system("mid")]) == (
        [system(), system("b")],
        [user(), system("mid")],
    )


def test_tenant_and_session_ids() -> None:
    assert tenant_of("Bearer sk-a") != tenant_of("Bearer sk-b")
    assert "sk-a" not in tenant_of("Bearer sk-a")
    assert tenant_of(None) == tenant_of("")
    assert session_id_of("mine", ["h1"]) == "mine"
    assert session_id_of(None, ["h1", "h2"]) == "h1"
    assert session_id_of(None, []) is None


def test_longest_matching_checkpoint_wins() -> None:
    short, long = checkpoint(2, [user("s")]), checkpoint(4, [user("l")])
    stored = {c.prefix_hash: c for c in (short, long)}
    assert find_checkpoint(chain_hashes(BODY), stored) == long
    assert find_checkpoint(chain_hashes(BODY[:3]), stored) == short
    assert find_checkpoint(chain_hashes([user("other"), *BODY[1:]]), stored) is None


def test_view_replaces_the_covered_prefix() -> None:
    head = [system()]
    assert view(head, BODY, None) == [system(), *BODY]
    frozen = [user("task"), assistant("[summary]")]
    assert view(head, BODY, checkpoint(4, frozen)) == [system(), *frozen, user("u3")]


def test_new_checkpoint_freezes_what_changed() -> None:
    head = [system()]
    compacted = [system(), user("task"), assistant("[2 omitted]"), *BODY[3:]]
    made = new_checkpoint(head, BODY, chain_hashes(BODY), compacted, created_at=1.0,
                          strategy="truncate", tokens_before=9, tokens_after=5)  # fmt: skip
    assert made is not None
    assert (made.covered, made.messages) == (3, [user("task"), assistant("[2 omitted]")])
    assert made.prefix_hash == chain_hashes(BODY)[2]
    assert view(head, BODY, made) == compacted


def test_nothing_changed_is_no_checkpoint() -> None:
    assert new_checkpoint([], BODY, chain_hashes(BODY), BODY, created_at=0.0, strategy="x",
                          tokens_before=1, tokens_after=1) is None  # fmt: skip


def test_records_round_trip_through_json() -> None:
    made = checkpoint(2, [user("s")])
    assert Checkpoint.from_json(made.to_json()) == made
    assert made.to_json() == {**asdict(made), "notes": list(made.notes)}
    record = CompactionRecord(1.0, "pressure", "summarize", 100, 40, "gpt-4o-mini", 900)
    assert CompactionRecord.from_json(record.to_json()) == record
    assert SessionState(turns=5, last_compaction_turn=3).turns_since_compaction == 2
    assert SessionState().turns_since_compaction is None


def test_a_record_stored_before_summary_input_was_recorded_loads_with_none() -> None:
    record = CompactionRecord(
        1.0, "pressure", "summarize", 100, 40, "gpt-4o-mini", 900,
        summarizer_input_tokens=800, summarizer_cached_tokens=700,
    )  # fmt: skip
    stored = record.to_json()
    assert CompactionRecord.from_json(json.loads(json.dumps(stored))) == record
    del stored["summarizer_input_tokens"], stored["summarizer_cached_tokens"]
    older = CompactionRecord.from_json(stored)
    assert (older.summarizer_input_tokens, older.summarizer_cached_tokens) == (0, 0)
    assert older.summarizer_tokens == 900


def test_a_checkpoint_keeps_the_notes_the_proxy_wrote() -> None:
    note = marker(2)
    made = replace(checkpoint(2, [user("task"), assistant(note)]), notes=(note_digest(note),))
    assert Checkpoint.from_json(json.loads(json.dumps(made.to_json()))) == made
    assert known_notes(made) == {note_digest(note)}
    assert known_notes(None) == frozenset()


def test_a_checkpoint_stored_before_notes_were_recorded_knows_its_notes_by_shape() -> None:
    note = marker(2)
    stored = checkpoint(2, [user("task"), assistant(note)]).to_json()
    del stored["notes"]
    assert Checkpoint.from_json(stored).notes == (note_digest(note),)


@given(conversation(), st.data())
def test_view_of_new_checkpoint_reproduces_the_compaction(
    messages: list[Message], data: st.DataObject
) -> None:
    head, body = split_head(messages)
    cut = data.draw(st.integers(min_value=1, max_value=len(body)))
    compacted = [*head, user("[note]"), *body[cut:]]
    made = new_checkpoint(head, body, chain_hashes(body), compacted, created_at=0.0,
                          strategy="x", tokens_before=0, tokens_after=0)  # fmt: skip
    assert made is not None
    assert view(head, body, made) == compacted
    longer = [*body, assistant("next")]
    assert view(head, longer, made) == [*compacted, assistant("next")]


def test_a_timeline_point_reads_back_as_written_and_an_older_one_gets_the_defaults() -> None:
    point = TurnPoint(
        turn=3, at=12.5, pressure=0.8, tokens_before=900, tokens_after=400, action="trim", recalls=2
    )
    assert TurnPoint.from_json(point.to_json()) == point
    # Stored before `recalls` existed (a rolling upgrade's older replica wrote it).
    older = {key: value for key, value in point.to_json().items() if key != "recalls"}
    assert TurnPoint.from_json(older) == replace(point, recalls=0)
