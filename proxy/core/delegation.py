"""Who answers a client's compaction request: the proxy or the upstream.

`responses.compaction` says it: `proxy` (the proxy compacts with its own machinery and
answers `POST /v1/responses/compact` and `compaction_trigger` itself), `upstream` (both are
forwarded untouched, for a provider that compacts natively), or `auto`: the upstream when it
is OpenAI's API (`api.openai.com`), which compacts natively, and the proxy otherwise (vLLM,
Ollama, llama.cpp, OpenRouter... answer neither form). One rule, decided once at startup for
the settings' check, the app and the documentation alike.
"""

from __future__ import annotations

from typing import Final, Literal
from urllib.parse import urlsplit

CompactionMode = Literal["auto", "proxy", "upstream"]
Handler = Literal["proxy", "upstream"]

NATIVE_HOSTS: Final = frozenset({"api.openai.com"})
"""The upstream hosts `auto` leaves compaction to."""


def compaction_handler(mode: CompactionMode, base_url: str) -> Handler:
    """Who answers compaction requests under `mode` with the upstream at `base_url`."""
    if mode != "auto":
        return mode
    host = urlsplit(base_url).hostname or ""
    return "upstream" if host in NATIVE_HOSTS else "proxy"
