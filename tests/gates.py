"""What the coverage gates count: the lines that deterministic example tests reach.

`make test` holds `proxy/core` and `proxy/service` at 100 % of their lines and branches,
counted over the coverage context "example" and the import-time context "" alone (the
Makefile's `GATE`). A line counted there must be reached on every machine, by every run: a
line that only a skipped test, a drawn example or a lucky split of a socket's reads reaches
makes `make test` a coin toss for the next person who runs it. So every test runs in one
context, and an example test leaves "example" the moment its path stops being the same
everywhere:

- "property": a Hypothesis test, from its start (the examples it draws depend on the
  strategies, not on what the test means to cover);
- "optional": a test that looked for something a fresh machine may lack (Codex, Claude Code,
  Chromium, redis-server, the real model, tiktoken's files, `../shared`, an extra package:
  `tests.optional`), from that moment; a test marked `needs(tool)` from its start. The lines
  after that point run only where the tool is (or only where it is not);
- "socket": a test in which the proxy read a streamed answer from a real socket
  (`AiohttpResponse.iter_chunks`), from its first read: how the kernel split the bytes decides
  which of the stream taps' paths run, and it splits them differently from run to run.

What ran before the switch ran the same on every machine and every split, so it counts. The
gates never see the other contexts; each path the optional tools and the sockets reach needs an
example test of its own (a split fed by hand, an in-process upstream: `AsgiUpstream`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import coverage

from proxy.adapters.upstream import AiohttpResponse

EXAMPLE: Final = "example"
PROPERTY: Final = "property"
OPTIONAL: Final = "optional"
SOCKET: Final = "socket"
KINDS: Final = (EXAMPLE, PROPERTY, OPTIONAL, SOCKET)

_running: str | None = None
"""The running test's context; None between tests (collection, import)."""

_test = ""
"""The running test's id, named in its contexts when `BY_TEST` is set."""

BY_TEST: Final = os.environ.get("GATES_BY_TEST") == "1"
"""`GATES_BY_TEST=1 make test`: each context names its test too (`example|tests/...::test_x`),
so `coverage html --show-contexts` tells which tests reach a line (the gates read the kind)."""

in_suite = False
"""Whether pytest runs the suite in this process (the bench imports test helpers too)."""

ended: Counter[str] = Counter()
"""How many tests ended in each context, for the summary at the end of the run."""


def begin(kind: str, test: str = "") -> None:
    """The test `test` starts, in `kind` (EXAMPLE, PROPERTY or OPTIONAL)."""
    global _running, _test
    _running, _test = kind, test
    _switch(kind)


def end() -> None:
    """The test ended (its teardown included): back to the import-time context."""
    global _running, _test
    if _running is not None:
        ended[_running] += 1
    _running, _test = None, ""
    _switch("")


def running() -> str | None:
    """The running test's context, or None outside a test."""
    return _running


def leave_example(kind: str) -> None:
    """From here on the running test's path depends on the machine (OPTIONAL) or on the
    kernel (SOCKET): what it reaches no longer counts. A test already out of "example" stays
    where it is; outside a test (the bench, collection) nothing is counted anyway."""
    global _running
    if _running == EXAMPLE:
        _running = kind
        _switch(kind)


def _switch(context: str) -> None:
    collector = coverage.Coverage.current()
    if collector is not None:
        collector.switch_context(f"{context}|{_test}" if BY_TEST and context else context)


_plain_iter_chunks = AiohttpResponse.iter_chunks


async def _watched_iter_chunks(self: AiohttpResponse) -> AsyncIterator[bytes]:
    leave_example(SOCKET)
    async for chunk in _plain_iter_chunks(self):
        yield chunk


def start_suite() -> None:
    """pytest starts the suite in this process: tests will be counted."""
    global in_suite
    in_suite = True
    _watch_sockets()


def _watch_sockets() -> None:
    """Make a read of a streamed answer from a real socket leave "example" (the one place the
    kernel's split of the bytes enters the proxy: a whole body is read whole, and an in-process
    upstream hands on the chunks its app sent). Behaviour is unchanged."""
    AiohttpResponse.iter_chunks = _watched_iter_chunks  # type: ignore[method-assign]


# --- Comparing what two runs' gates counted --------------------------------------------------

GATED = ("proxy/core/", "proxy/service/")
"""The folders the Makefile's gates hold at 100 %."""
GATE_CONTEXTS = r"^(example(\|.*)?)?$"
"""The contexts they count (the Makefile's `--contexts`)."""


def gated_arcs(data_file: Path) -> set[tuple[str, int, int]]:
    """The branches (line to line) the gates counted in a run: `data_file` is its `.coverage`,
    in the checkout it measured (the paths are read relative to that folder)."""
    data = coverage.CoverageData(str(data_file))
    data.read()
    data.set_query_contexts([GATE_CONTEXTS])
    root = data_file.resolve().parent
    found: set[tuple[str, int, int]] = set()
    for measured in data.measured_files():
        name = Path(measured).relative_to(root).as_posix()
        if name.startswith(GATED):
            found.update((name, start, end) for start, end in data.arcs(measured) or ())
    return found


def main(argv: list[str]) -> int:
    """`python -m tests.gates A/.coverage B/.coverage`: whether two runs (two machines, one with
    the optional tools and one without, or the same one twice) counted the same for the gates;
    any difference is a path that depends on the machine or on timing. Exit 1 if they differ."""
    first, second = (gated_arcs(Path(name)) for name in argv)
    print(f"{len(first)} and {len(second)} branches counted")
    for name, start, end in sorted(first ^ second)[:40]:
        print(f"{'<' if (name, start, end) in first else '>'} {name}: {start} -> {end}")
    return 0 if first == second else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
