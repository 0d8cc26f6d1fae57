"""Message digests: equal content, equal digest; computed once per object per request."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.digests import DIGEST_BYTES, Digests, chain, digest
from tests.builders import user

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(), JSON, max_size=6))
def test_key_order_does_not_matter(value: dict[str, object]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert digest(value) == digest(reordered)
    assert len(digest(value)) == DIGEST_BYTES


def test_different_content_different_digest() -> None:
    assert digest(user("x")) != digest(user("y"))
    assert digest(user("x")) != digest({"role": "assistant", "content": "x"})


def test_chain_depends_on_order() -> None:
    a, b = digest(user("a")), digest(user("b"))
    assert chain(chain(b"", a), b) != chain(chain(b"", b), a)


def test_a_table_hashes_each_object_once() -> None:
    digests = Digests()
    message = user("x")
    first = digests.of(message)
    message["content"] = "changed"  # a request's messages do not change; if one did, the
    assert digests.of(message) == first  # table would still answer for the object it saw
    twin = user("x")
    assert digests.of(twin) == first  # an equal object, hashed on its own
    assert digests.of(user("changed")) != first


def test_entries_keep_their_objects_alive() -> None:
    # Without the reference, a freed object's id could be reused by a new one, which would
    # then be given the old object's digest.
    digests = Digests()
    for n in range(1000):
        assert digests.of(user(str(n))) == digest(user(str(n)))
