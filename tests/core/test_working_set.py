"""The client's working set is told from history by where it stands across two requests.

aider's requests, in its own order (system, history, the files message, "Ok.", the ask): the
files message is outside the start the two requests share, and comes again after the new
history, so it is the working set, in its newer version too. A client that only appends (its
previous request is the start of the next) has none, whatever its messages say.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.budget import request_budget
from proxy.core.digests import digest
from proxy.core.messages import Message
from proxy.core.plan import Compacted, Situation, Unchanged, plan_compaction
from proxy.core.policy import ContextPolicy
from proxy.core.session import chain_hashes
from proxy.core.summary import detach_notes
from proxy.core.working_set import MIN_CHARS, Seen, latest_copy, seen, working_set
from tests.builders import assistant, system, user
from tests.core.client_shapes import FILES_OPENING
from tests.core.words import COUNTER


def files(version: int, lines: int = 120) -> Message:
    body = "\n".join(f"line {n} of src/app.py, version {version}" for n in range(lines))
    return user(
        f"{FILES_OPENING} so you can go ahead and edit them.\n\nsrc/app.py\n```\n{body}\n```"
    )


def aider_request(turn: int, version: int) -> list[Message]:
    history = [m for n in range(turn) for m in (user(f"Ask {n}."), assistant(f"Did {n}."))]
    return [*history, files(version), assistant("Ok."), user(f"Ask {turn}.")]


def found(previous: list[Message] | None, body: list[Message]) -> frozenset[bytes]:
    before = None if previous is None else seen(previous, chain_hashes(previous))
    return working_set(before, body, chain_hashes(body))


def test_aider_s_files_message_is_its_working_set_in_every_version() -> None:
    first, second = aider_request(1, 1), aider_request(2, 1)
    assert found(None, first) == frozenset()
    assert found(first, second) == {digest(files(1))}
    edited = aider_request(3, 2)  # the model edited the file: a newer version is re-sent
    assert found(second, edited) == {digest(files(2))}


def test_a_round_trip_through_json_remembers_the_same() -> None:
    first = aider_request(1, 1)
    remembered = seen(first, chain_hashes(first))
    assert Seen.from_json(remembered.to_json()) == remembered


def test_what_no_version_wrote_is_nothing_remembered() -> None:
    assert Seen.parsed(None) is None
    assert Seen.parsed("not json") is None
    assert Seen.parsed('[["x"]]') is None


def test_an_edit_before_what_was_remembered_finds_nothing() -> None:
    long = aider_request(20, 1)
    edited = [user("A different first ask."), *aider_request(21, 1)[1:]]
    assert found(long, edited) == frozenset()


def test_a_history_the_client_compacted_keeps_the_working_set_the_request_before_had() -> None:
    # A client compacting through `/v1/responses/compact` rewrites its history from the
    # start: its user messages, then the block; the files go beside it again.
    long = aider_request(20, 1)
    compacted = [user("Ask 0."), user("Ask 19."), assistant("[the block]")]
    after = [*compacted, files(2), assistant("Ok."), user("Ask 20.")]
    before = seen(long, chain_hashes(long))
    assert working_set(before, after, chain_hashes(after)) == frozenset()
    assert working_set(before, after, chain_hashes(after), had=True) == {digest(files(2))}


def test_a_short_message_re_sent_is_just_a_message() -> None:
    first = [user("Status?"), assistant("Ok."), user("Ask 0.")]
    second = [
        user("Ask 0."),
        assistant("Did 0."),
        user("Status?"),
        assistant("Ok."),
        user("Ask 1."),
    ]
    assert found(first, second) == frozenset()


pastes = st.integers(0, 3).map(lambda n: user(f"Pasted log {n}:\n" + "x = 1\n" * MIN_CHARS))
turns = st.lists(
    st.one_of(
        st.sampled_from(["Fix it.", "Go on.", "Why?"]).map(user),
        pastes,
        st.just(assistant("Done.")),
    ),
    max_size=30,
)


@given(turns, turns)
def test_a_client_that_only_appends_has_no_working_set(
    before: list[Message], after: list[Message]
) -> None:
    # Large pastes said again later are history like any other message.
    assert found(before, [*before, *after]) == frozenset()


def test_the_plan_keeps_the_latest_copy_whole_and_lets_the_history_go() -> None:
    # The files, then a turn after them (the ask follows that turn, not the files), larger
    # than the room the target leaves the recent window: told apart, they stay whole; taken
    # for history, they are what goes.
    history = [m for n in range(6) for m in (user(f"Ask {n}. " + "more " * 420), assistant("Did."))]
    working = files(3, lines=300)
    messages = [
        system("Act as an expert software developer."),
        *history,
        working,
        assistant("Ok."),
        user("Ask 6."),
        assistant("Did 6."),
        user("Ask 7."),
    ]
    budget = request_budget(5000, {}, output_reserved=500, margin_share=0.03)
    policy = ContextPolicy(strategy="truncate")
    told = Situation(messages, {}, policy, budget, working=frozenset({digest(working)}))
    kept = plan_compaction(told, COUNTER)
    assert isinstance(kept, Compacted)
    assert working in [detach_notes(m)[0] for m in kept.messages]
    assert kept.tokens_after < kept.tokens_before  # the history went
    untold = plan_compaction(replace(told, working=frozenset()), COUNTER)
    assert isinstance(untold, Compacted)
    assert working not in [detach_notes(m)[0] for m in untold.messages]


def test_the_working_set_counts_with_the_head_so_a_request_kept_whole_is_not_compacted_again() -> (
    None
):
    # What goes whole with every request leaves the room the trigger applies to: counted as
    # history, aider's files held every request above the trigger and each one compacted
    # again (1.04 requests per compaction in the bench), with nothing left that could go.
    working = files(3, lines=600)
    messages = [
        system("Act as an expert software developer."),
        user("Ask 0. " + "more " * 300),
        assistant("Did."),
        working,
        assistant("Ok."),
        user("Ask 1."),
    ]
    budget = request_budget(5000, {}, output_reserved=500, margin_share=0.03)
    told = Situation(messages, {}, ContextPolicy(), budget, working=frozenset({digest(working)}))
    untold = replace(told, working=frozenset())
    assert told.fixed(COUNTER) > untold.fixed(COUNTER) + 0.3
    plain = plan_compaction(untold, COUNTER)
    assert not isinstance(plain, Unchanged) or plain.reason != "under_trigger"
    kept = plan_compaction(told, COUNTER)
    assert isinstance(kept, Unchanged)
    assert kept.reason == "under_trigger"


def test_the_latest_copy_is_the_last_user_message_of_the_working_set_and_none_without_one() -> None:
    working = files(2, lines=100)
    messages = [user("Ask 0."), working, assistant("Ok."), working, user("Ask 1.")]
    assert latest_copy(messages, frozenset({digest(working)})) == 3
    assert latest_copy(messages[:1], frozenset({digest(working)})) is None
    assert latest_copy(messages, frozenset()) is None
