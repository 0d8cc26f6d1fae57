"""Path normalization: no reader finds a dot segment in what is left, and `/v1/` confines."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.paths import anthropic_path, confine, normalize, routed, segment_value


def generous_reading(path: str) -> list[str]:
    """The segments the most generous upstream resolves: `%xx` decoded once, `\\` a slash,
    `;params` dropped, `.`/`..` resolved (`..` at the root stays there), `//` merged."""
    resolved: list[str] = []
    for segment in unquote(path).replace("\\", "/").split("/"):
        value = segment.partition(";")[0]
        if value == "..":
            if resolved:
                resolved.pop()
        elif value not in ("", "."):
            resolved.append(segment)
    return resolved


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/v1/../admin/keys", "/admin/keys"),
        ("/v1/%2e%2e/admin/keys", "/admin/keys"),
        ("/v1/%2E./admin", "/admin"),
        ("/v1/.%2E/admin", "/admin"),
        ("/v1/./chat/completions", "/v1/chat/completions"),
        ("/v1/%2e/chat/completions", "/v1/chat/completions"),
        ("/v1//chat/completions", "/v1/chat/completions"),
        ("/v1/chat/completions/", "/v1/chat/completions/"),
        ("/v1/models/..", "/v1/"),
        ("/a/b/.", "/a/b/"),
        ("//", "/"),
        ("/v1/a%2F..%2F..%2Fadmin", "/admin"),
        ("/v1/a%2f..%2f..%2fadmin", "/admin"),
        ("/v1/..%5cadmin", "/admin"),
        ("/v1/..\\admin", "/admin"),
        ("/v1/..;x/admin", "/admin"),
        ("/v1/../../../../etc", "/etc"),
        ("/v1/files/../models", "/v1/models"),
        ("/v1/..%2Fv1/models", "/v1/models"),
        ("/", "/"),
        ("", "/"),
        ("*", "/*"),
    ],
)
def test_dot_and_empty_segments_resolved(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["/v1/files/a%2Fb%20c", "/v1/models/gpt-4o", "/v1/files/file-abc/content", "/v1/a..b/.x"],
)
def test_ordinary_paths_unchanged(raw: str) -> None:
    # Escapes and separators as the client wrote them: a file id `a%2Fb` stays one segment.
    assert normalize(raw) == raw


@pytest.mark.parametrize(
    ("raw", "route"),
    [
        ("/v1/chat/completions/", "/v1/chat/completions"),
        ("/v1/chat/completions//", "/v1/chat/completions"),
        ("/v1/./chat/completions/.", "/v1/chat/completions"),
        ("/v1/", "/v1/"),
        ("/dashboard/", "/dashboard/"),  # a page's relative links depend on its slash
        ("/healthz", "/healthz"),
    ],
)
def test_routed_drops_a_trailing_slash_below_v1_only(raw: str, route: str) -> None:
    assert routed(raw) == route


def test_escapes_kept_around_a_resolved_dot() -> None:
    assert normalize("/v1/files/a%2Fb/./content") == "/v1/files/a%2Fb/content"


@pytest.mark.parametrize(
    ("raw", "below"),
    [
        ("/v1/models", "models"),
        ("/v1/./chat/completions", "chat/completions"),
        ("/v1/chat/completions/", "chat/completions"),
        ("/v1/files/a%2Fb", "files/a%2Fb"),
        ("/v1/../admin/keys", None),
        ("/v1/%2e%2e/admin/keys", None),
        ("/v1", None),
        ("/v1/", None),
        ("/v1%2Fmodels", None),  # the prefix is a literal `/v1/`, not one a reader may make
        ("/v2/models", None),
        ("/v1x/models", None),
    ],
)
def test_confine_to_v1(raw: str, below: str | None) -> None:
    assert confine(raw) == below


def test_segment_value_reads_escapes_and_parameters() -> None:
    assert [segment_value(text) for text in ("%2e%2E", "..;jsessionid=1", "a%20b")] == [
        "..",
        "..",
        "a b",
    ]


# Paths built from the pieces attacks are made of, joined by every spelling of a separator.
_PIECES = st.sampled_from(
    [
        "v1", "chat", "completions", "admin", "keys", "files", "a%2Fb", "x", "",
        ".", "..", "%2e", "%2E", "%2e%2e", "%2E%2e", ".%2e", "%2E.", "..;x", ".;", "%2e%2e%3b",
        "%252e%252e", "a.b", "...", "%", "%2", "%5", "%zz", ";",
    ]
)  # fmt: skip
_SEPARATORS = st.sampled_from(["/", "\\", "%2f", "%2F", "%5c", "%5C"])


@st.composite
def hostile_paths(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(_PIECES, max_size=10))
    separators = draw(st.lists(_SEPARATORS, min_size=len(pieces), max_size=len(pieces)))
    prefix = draw(st.sampled_from(["/v1/", "/", "", "/v1", "/v1%2f"]))
    return prefix + "".join(sep + piece for sep, piece in zip(separators, pieces, strict=True))


_ANY_PATH = st.one_of(
    hostile_paths(), st.text(max_size=40), st.text("/.%2eEfFcC5\\;v1", max_size=30)
)
_SPLIT = re.compile(r"/|\\|%2f|%5c", re.IGNORECASE)


@given(_ANY_PATH)
def test_normalized_paths_hold_no_dot_or_empty_segment(raw: str) -> None:
    path = normalize(raw)
    assert path.startswith("/")
    for text in _SPLIT.split(path.removesuffix("/"))[1:]:
        assert segment_value(text) not in ("", ".", "..")


@given(_ANY_PATH)
def test_normalize_and_routed_are_idempotent(raw: str) -> None:
    assert normalize(normalize(raw)) == normalize(raw)
    assert routed(routed(raw)) == routed(raw)


@given(_ANY_PATH)
def test_confined_paths_stay_below_v1_for_any_reader(raw: str) -> None:
    below = confine(raw)
    if below is not None:
        # However generously the upstream reads what is forwarded, it lands below /v1/.
        reading = generous_reading(f"/v1/{below}")
        assert reading[:1] == ["v1"]
        assert len(reading) > 1


@given(_ANY_PATH)
def test_generous_reading_unchanged_by_normalizing(raw: str) -> None:
    # Normalizing decides nothing a generous reader would decide differently: the request
    # still means the same resource.
    assert generous_reading(normalize(raw)) == generous_reading(raw)
    assert generous_reading(routed(raw)) == generous_reading(raw)


@pytest.mark.parametrize(
    ("path", "anthropic"),
    [
        ("messages", True),
        ("messages/count_tokens", True),
        ("messages/batches/msgbatch_1", True),
        ("messagesx", False),
        ("chat/completions", False),
        ("threads/t_1/messages", False),
    ],
)
def test_anthropic_paths(path: str, anthropic: bool) -> None:
    assert anthropic_path(path) is anthropic
