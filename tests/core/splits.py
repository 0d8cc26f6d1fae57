"""Every split of a stream a tap can be fed, as example tests feed them: deterministic.

A stream read from a socket arrives in pieces the kernel chose, different from run to run, and
which of a tap's paths run depends on where they fell (a read holding text deltas only, an
event cut in two). The property tests draw some splits; the example tests feed these, so each
path is reached on every run, whatever a socket would have done (tests/gates.py).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

_EVENT_END = re.compile(rb"\r?\n\r?\n")


def splits(stream: bytes) -> Iterator[list[bytes]]:
    """`stream` whole; in two pieces, cut after each of its bytes; event by event; and a byte at
    a time."""
    yield [stream]
    for cut in range(1, len(stream)):
        yield [stream[:cut], stream[cut:]]
    ends = [0, *(end.end() for end in _EVENT_END.finditer(stream))]
    if ends[-1] < len(stream):
        ends.append(len(stream))
    yield [stream[a:b] for a, b in itertools.pairwise(ends)]
    yield [stream[i : i + 1] for i in range(len(stream))]


def ends_an_event(out: bytes) -> bool:
    """Whether a relayed piece ends where an event does (a partial event waits for its end)."""
    return out.endswith((b"\n\n", b"\n\r\n"))
