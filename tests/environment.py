"""The environment the suite runs in: the developer's shell, minus what would change a verdict.

An operator of the proxy has its settings exported (`COMPACTION_PROXY_RESPONSES__
COMPACTION_KEY`, an upstream URL, a Redis URL), a provider's key for the SDKs, and often an
outbound HTTP proxy. Every test that reads settings from the environment, starts a proxy
process or opens an HTTP client would read them too, and its verdict would depend on the
shell it was started from. So the suite starts from an environment without them, before any
test runs (the processes the tests start inherit it); a test that needs one sets it itself.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Final

from proxy.settings import ENV_PREFIX

SUITE_VARIABLES: Final = frozenset(
    {
        # `make e2e`'s switches for the real model (tests/e2e/conftest.py): read by the suite,
        # never by the proxy, whose settings they do not name.
        f"{ENV_PREFIX}REAL_LLM",
        f"{ENV_PREFIX}LLM_VENV",
        f"{ENV_PREFIX}LLM_GGUF",
    }
)
"""Variables with the proxy's prefix that are the suite's own, kept."""

_CLEARED: Final = re.compile(
    # The proxy's settings; the providers' SDKs (keys, base URLs, organizations); an outbound
    # proxy, which httpx and the SDKs honour (loopback included, unless NO_PROXY says); the
    # metrics' multiprocess folder, which makes every app in the process share its files.
    rf"{re.escape(ENV_PREFIX)}.*|OPENAI_.*|ANTHROPIC_.*|(HTTPS?|ALL|NO)_PROXY"
    r"|PROMETHEUS_MULTIPROC_DIR",
    re.IGNORECASE,
)


def clean(environ: MutableMapping[str, str]) -> list[str]:
    """Take out of `environ` what would change a verdict; the names taken, sorted."""
    names = sorted(
        name for name in environ if _CLEARED.fullmatch(name) and name not in SUITE_VARIABLES
    )
    for name in names:
        del environ[name]
    return names
