"""tiktoken at the edge: the encoder, loading once, and the fallback when loading fails.

Loading failures are simulated by replacing `tiktoken.get_encoding` (with no package to load
from: `package=None`), so no test reaches for the network. Tests needing the real encodings
get them from `TIKTOKEN_CACHE_DIR` or the installed quicktok-v1 package, and are skipped, with
both reasons, only when neither has them (`cached_encoder`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken

import proxy.core.budget
from proxy.adapters.tokenizer import (
    LOAD_ERRORS,
    SPECS,
    Encoders,
    TiktokenEncoder,
    load_encoders,
    packaged_encoding,
)
from proxy.core.tokens import CL100K_BASE, O200K_BASE, ApproximateEncoder
from tests import optional


def cached_encoder(name: str) -> TiktokenEncoder:
    """The real encoding `name`, as the proxy loads it; skips the test when it cannot load.

    From `TIKTOKEN_CACHE_DIR` when it holds the file, else from the installed package: never
    from the network (tiktoken would otherwise try to download what is missing).
    """
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if (
        cache_dir
        and (Path(cache_dir) / hashlib.sha1(SPECS[name].url.encode()).hexdigest()).is_file()
    ):
        return TiktokenEncoder(tiktoken.get_encoding(name))
    try:
        return TiktokenEncoder(packaged_encoding(name))
    except LOAD_ERRORS as exc:
        optional.skip(f"{name}: not in TIKTOKEN_CACHE_DIR={cache_dir}, and {exc}")


def byte_encoding(name: str) -> tiktoken.Encoding:
    """A real but tiny tiktoken encoding: one token per byte, no files needed."""
    ranks = {bytes([byte]): byte for byte in range(256)}
    return tiktoken.Encoding(name, pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})


class FakeLoader:
    """Stands in for `tiktoken.get_encoding`: records calls, fails for chosen names."""

    def __init__(self, failures: dict[str, Exception] | None = None) -> None:
        self.failures = failures or {}
        self.calls: list[str] = []

    def __call__(self, name: str) -> tiktoken.Encoding:
        self.calls.append(name)
        if name in self.failures:
            raise self.failures[name]
        return byte_encoding(name)


def use_loader(monkeypatch: pytest.MonkeyPatch, loader: object) -> None:
    monkeypatch.setattr(tiktoken, "get_encoding", loader)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def debugs_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]


# --- the encoder -------------------------------------------------------------------------


def test_encoder_counts_ordinary_text() -> None:
    encoder = TiktokenEncoder(byte_encoding("bytes"))
    assert encoder.name == "bytes"
    assert encoder.count("héllo") == 6


@pytest.mark.parametrize("name", [O200K_BASE, CL100K_BASE])
def test_special_token_text_counts_as_ordinary_text(name: str) -> None:
    encoder = cached_encoder(name)
    assert encoder.name == name
    assert encoder.count("hello world") == 2
    # `encode` would raise on this; providers tokenize it as plain characters.
    assert encoder.count("<|endoftext|>") > 1


# --- loading -----------------------------------------------------------------------------


def test_each_encoding_is_loaded_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loader = FakeLoader()
    use_loader(monkeypatch, loader)
    encoders = load_encoders(package=None)
    for model in ("gpt-4o", "gpt-4", "o3-mini", "llama-3", None):
        encoders.for_model(model)
    assert sorted(loader.calls) == [CL100K_BASE, O200K_BASE]
    assert warnings_of(caplog) == []


def test_models_get_their_family_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    use_loader(monkeypatch, FakeLoader())
    encoders = load_encoders(package=None)
    assert encoders.for_model("gpt-4o-mini").name == O200K_BASE
    assert encoders.for_model("gpt-3.5-turbo").name == CL100K_BASE
    assert encoders.for_model("mistral-large").name == O200K_BASE


def test_claude_models_are_counted_approximately_erring_high(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No public tokenizer: the approximate count, above o200k_base's on prose and code."""
    use_loader(monkeypatch, FakeLoader())
    encoders = load_encoders(package=None)
    claude = encoders.for_model("claude-sonnet-4-6")
    assert isinstance(claude, ApproximateEncoder)
    assert encoders.for_model("anthropic/claude-opus-4-1").name == claude.name


@pytest.mark.parametrize("error", [OSError("no network"), ValueError("hash mismatch")])
def test_failed_load_warns_once_and_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    use_loader(monkeypatch, FakeLoader({O200K_BASE: error, CL100K_BASE: error}))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/nowhere")
    with caplog.at_level(logging.DEBUG, logger="proxy"):
        encoders = load_encoders(package=None)
    assert isinstance(encoders.for_model("gpt-4o"), ApproximateEncoder)
    assert isinstance(encoders.for_model("gpt-4"), ApproximateEncoder)
    [warning] = warnings_of(caplog)
    assert "o200k_base, cl100k_base not loaded: counting approximately" in warning
    [details] = debugs_of(caplog)
    assert str(error) in details
    assert "TIKTOKEN_CACHE_DIR=/nowhere does not hold them" in details


@pytest.mark.parametrize(
    ("cache_dir", "says"),
    [
        (None, "TIKTOKEN_CACHE_DIR is not set"),
        ("", "TIKTOKEN_CACHE_DIR is empty, which turns tiktoken's cache off"),
    ],
)
def test_warning_explains_the_cache_setting(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    cache_dir: str | None,
    says: str,
) -> None:
    use_loader(monkeypatch, FakeLoader({O200K_BASE: OSError("offline")}))
    if cache_dir is None:
        monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", cache_dir)
    with caplog.at_level(logging.DEBUG, logger="proxy"):
        load_encoders(names=(O200K_BASE,), package=None)
    [details] = debugs_of(caplog)
    assert says in details


def test_a_partial_failure_falls_back_to_the_default_encoding(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    use_loader(monkeypatch, FakeLoader({CL100K_BASE: OSError("offline")}))
    encoders = load_encoders(package=None)
    assert encoders.for_model("gpt-4").name == O200K_BASE
    [warning] = warnings_of(caplog)
    assert "encodings cl100k_base not loaded" in warning


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event a hanging loader waits on; set at the end so its thread finishes."""
    event = threading.Event()
    yield event
    event.set()


def test_a_hanging_download_gives_up_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, release: threading.Event
) -> None:
    def hang(name: str) -> tiktoken.Encoding:
        release.wait(timeout=10)
        return byte_encoding(name)

    use_loader(monkeypatch, hang)
    with caplog.at_level(logging.DEBUG, logger="proxy"):
        # One name: once released, the worker must not go on to tiktoken's real loader.
        encoders = load_encoders((O200K_BASE,), timeout_s=0.05, package=None)
    assert isinstance(encoders.for_model("gpt-4o"), ApproximateEncoder)
    [details] = debugs_of(caplog)
    assert "still loading after 0.05 s" in details


def test_encoders_value_holds_what_it_was_given() -> None:
    approximate = ApproximateEncoder()
    encoders = Encoders(by_name={}, fallback=approximate)
    assert encoders.for_model("gpt-4o") is approximate


def test_real_encodings_load_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    for name in (O200K_BASE, CL100K_BASE):
        cached_encoder(name)  # skips unless both can load
    encoders = load_encoders()
    assert encoders.for_model("gpt-4o").name == O200K_BASE
    assert encoders.for_model("gpt-4").name == CL100K_BASE
    assert warnings_of(caplog) == []


# --- the fallback against the real thing --------------------------------------------------

SAMPLES = {
    "prose": (
        "Compaction keeps long conversations inside the model's context window. When a "
        "request would overflow, the oldest tool results are cleared first, then older turns "
        "are summarised, and only then truncated. "
    )
    * 20,
    "code": inspect.getsource(proxy.core.budget),
    "json": json.dumps(
        [{"id": i, "name": f"item{i}", "price": i * 1.37, "tags": ["a", "bb"]} for i in range(200)]
    ),
    "log": "\n".join(
        f"2025-05-{i % 28 + 1:02d}T12:{i % 60:02d}:33Z INFO [worker-{i % 8}] id=req_{i:08x} "
        f"status=200 latency_ms={i * 7 % 900}"
        for i in range(200)
    ),
    "cjk": "東京は日本の首都であり、世界最大級の都市圏を形成している。" * 30,
    "cyrillic": "Москва — столица России, крупнейший по численности населения город. " * 30,
}


@pytest.mark.parametrize("name", [O200K_BASE, CL100K_BASE])
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_approximate_count_errs_high_but_not_wildly(name: str, sample: str) -> None:
    real = cached_encoder(name).count(SAMPLES[sample])
    approximate = ApproximateEncoder().count(SAMPLES[sample])
    assert real <= approximate <= real * 4.5
