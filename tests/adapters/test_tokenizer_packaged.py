"""Exact counts with no download: the encodings built from the installed quicktok-v1 package.

The package's ranks, rewritten in tiktoken's file format, are handed to tiktoken's own
constructors through a private cache folder: tiktoken checks them against the sha256 it checks
its downloads against, so these tests prove the bytes are OpenAI's files, everywhere, offline.
Skipped, with the reason, only when the package is not installed.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from tiktoken_ext import openai_public  # type: ignore[import-untyped]

from proxy.adapters.tokenizer import (
    LOAD_ERRORS,
    PACKAGE,
    SPECS,
    _package_dir,
    _read_ranks,
    _tiktoken_file,
    exact_offline,
    load_encoders,
    packaged_encoding,
)
from proxy.core.tokens import CL100K_BASE, O200K_BASE, ApproximateEncoder
from tests import optional

CONSTRUCTORS: dict[str, Callable[[], dict[str, Any]]] = {
    O200K_BASE: openai_public.o200k_base,
    CL100K_BASE: openai_public.cl100k_base,
}


def package_data() -> Path:
    try:
        return _package_dir(PACKAGE) / "data"
    except LOAD_ERRORS as exc:
        optional.skip(f"quicktok-v1 is not installed ({exc}): `pip install -e .` installs it")


def _offline(blobpath: str) -> bytes:
    raise OSError(f"no network to fetch {blobpath}")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty TIKTOKEN_CACHE_DIR, nothing loaded in-process, and no network for tiktoken."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tiktoken.load, "read_file", _offline)
    return cache


@pytest.mark.parametrize("name", [O200K_BASE, CL100K_BASE])
def test_packaged_encoding_is_tiktokens_own(name: str, offline: Path) -> None:
    spec = SPECS[name]
    ranks = _read_ranks(package_data() / spec.package_file)
    (offline / hashlib.sha1(spec.url.encode()).hexdigest()).write_bytes(_tiktoken_file(ranks))
    # tiktoken's constructor reads that file only if it hashes to tiktoken's expected sha256.
    official = CONSTRUCTORS[name]()
    packaged = packaged_encoding(name)
    assert packaged.name == official["name"] == name
    assert packaged._pat_str == official["pat_str"]
    assert packaged._special_tokens == official["special_tokens"]
    assert packaged._mergeable_ranks == official["mergeable_ranks"]


def test_offline_with_an_empty_cache_counts_exactly_without_a_warning(
    offline: Path, caplog: pytest.LogCaptureFixture
) -> None:
    package_data()
    encoders = load_encoders()
    assert encoders.for_model("gpt-4o").name == O200K_BASE
    assert encoders.for_model("gpt-4").name == CL100K_BASE
    assert encoders.for_model("gpt-4o").count("hello world") == 2
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_cache_dir_still_serves_without_the_package(
    offline: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = SPECS[O200K_BASE]
    ranks = _read_ranks(package_data() / spec.package_file)
    (offline / hashlib.sha1(spec.url.encode()).hexdigest()).write_bytes(_tiktoken_file(ranks))
    encoders = load_encoders((O200K_BASE,), package=None)
    assert encoders.for_model("gpt-4o").count("hello world") == 2
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def _corrupt_rank(data: bytes) -> bytes:
    """The same file with its first token's rank changed."""
    (length,) = struct.unpack_from("<H", data, 4)
    at = 4 + 2 + length
    return data[:at] + struct.pack("<I", 7) + data[at + 4 :]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_corrupt_rank, "does not hold tiktoken's o200k_base (sha256 mismatch)"),
        (lambda data: data[:-3], "cut short"),
        (lambda data: data + b"\0", "bytes past its"),
    ],
    ids=["changed", "truncated", "trailing"],
)
def test_a_damaged_package_file_is_refused_and_counts_approximately(
    offline: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[bytes], bytes],
    says: str,
) -> None:
    real = package_data() / SPECS[O200K_BASE].package_file
    copy = tmp_path / "site" / "damagedtok"
    (copy / "data").mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    (copy / "data" / real.name).write_bytes(damage(real.read_bytes()))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with caplog.at_level(logging.DEBUG, logger="proxy"):
        encoders = load_encoders((O200K_BASE,), package="damagedtok")
    assert isinstance(encoders.for_model("gpt-4o"), ApproximateEncoder)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "\n" not in warning
    assert len(warning) < 200
    [details] = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert says in details
    assert "no network to fetch" in details


def test_a_missing_package_is_named_in_the_details(
    offline: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="proxy"):
        load_encoders((CL100K_BASE,), package="no_such_package_here")
    [details] = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert "no_such_package_here is not installed" in details


def test_an_encoding_the_package_does_not_carry_is_refused() -> None:
    with pytest.raises(ValueError, match="p50k_base is not an encoding quicktok carries"):
        packaged_encoding("p50k_base")


def test_hiding_the_package_hides_its_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the subprocess tests rely on: an empty package of that name earlier on the path."""
    package_data()
    shadow = tmp_path / PACKAGE
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        packaged_encoding(O200K_BASE)
    shutil.rmtree(shadow)


def _image_like_package(root: Path, files: tuple[str, ...]) -> None:
    """A `quicktok` package holding only `files` of the installed one's data, as the
    container image keeps it (see the Dockerfile)."""
    source = package_data()
    data = root / PACKAGE / "data"
    data.mkdir(parents=True)
    (root / PACKAGE / "__init__.py").write_text("")
    for name in files:
        shutil.copy(source / name, data / name)


def test_the_images_trimmed_package_counts_exactly_without_numpy(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Dockerfile removes numpy and the vocabularies the proxy never reads, then runs
    `exact_offline`: both encodings must still load, exactly, from the two files left."""
    _image_like_package(tmp_path, (SPECS[O200K_BASE].package_file, SPECS[CL100K_BASE].package_file))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
    exact_offline()
    encoders = load_encoders()
    assert encoders.for_model("gpt-4o").count("hello world") == 2
    assert encoders.for_model("gpt-4").name == CL100K_BASE


def test_the_images_build_check_fails_when_an_encoding_is_missing(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_like_package(tmp_path, (SPECS[O200K_BASE].package_file,))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        exact_offline()
