"""tiktoken at the edge: loading encodings once, and the fallback when they cannot load.

tiktoken downloads an encoding the first time it is asked for one and caches the file in
`TIKTOKEN_CACHE_DIR` (else a `data-gym-cache` folder under the temp dir; an empty
`TIKTOKEN_CACHE_DIR` turns the cache off, so every load downloads). An offline machine needs
`TIKTOKEN_CACHE_DIR` pointing at a folder holding the files, named by the sha1 of their
download URL as tiktoken expects.

`load_encoders` runs once at startup. If an encoding cannot be loaded it logs one warning
and counts with `ApproximateEncoder` (which errs high) instead: a missing file must never
crash a request. Loading runs under a deadline, since tiktoken's download has no time-out of
its own and a network that drops packets would otherwise hold startup for minutes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import tiktoken

from proxy.core.tokens import (
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
        """The encoder for `model`'s family (see `proxy.core.tokens.ENCODINGS`)."""
        return self.by_name.get(encoding_for_model(model), self.fallback)


def load_encoders(
    names: tuple[str, ...] = (O200K_BASE, CL100K_BASE), *, timeout_s: float = 20.0
) -> Encoders:
    """Load each named tiktoken encoding once; on failure, log one warning and fall back.

    Waits at most `timeout_s` seconds for all of them together (a load is about a second
    from the cache; a download is seconds more).
    """
    loaded, problems = _load(names, timeout_s)
    missing = [name for name in names if name not in loaded]
    if missing:
        logger.warning(_warning(missing, problems))
    encoders: dict[str, TextEncoder] = {
        name: TiktokenEncoder(encoding) for name, encoding in loaded.items()
    }
    fallback = encoders.get(DEFAULT_ENCODING, ApproximateEncoder())
    return Encoders(by_name=encoders, fallback=fallback)


def _load(names: tuple[str, ...], timeout_s: float) -> tuple[dict[str, tiktoken.Encoding], str]:
    """The encodings that loaded within the deadline, and why the others did not."""
    loaded: dict[str, tiktoken.Encoding] = {}
    problems: list[str] = []

    def load_all() -> None:
        for name in names:
            try:
                loaded[name] = tiktoken.get_encoding(name)
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


def _warning(missing: list[str], problems: str) -> str:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir is None:
        where = "TIKTOKEN_CACHE_DIR is not set (tiktoken downloads into its temp-dir cache)"
    elif cache_dir == "":
        where = "TIKTOKEN_CACHE_DIR is empty, which turns tiktoken's cache off"
    else:
        where = f"TIKTOKEN_CACHE_DIR={cache_dir} does not hold them"
    return (
        f"tiktoken encodings {', '.join(missing)} could not be loaded ({problems or 'unknown'}); "
        f"{where}. Token counts for these models use an approximate count that errs high. "
        "On an offline machine, point TIKTOKEN_CACHE_DIR at a folder holding the encoding "
        "files (named by the sha1 of their download URL)."
    )
