"""A small progress bar on stderr (a line per step when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts units of work done out of `total`, redrawing at most ten times a second."""

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.label = ""
        self._stream = stream or sys.stderr
        self._width = width
        self._start = time.monotonic()
        self._drawn = 0.0
        self._tty = self._stream.isatty()

    def step(self, label: str) -> None:
        """A new step starts: named on the bar, or on its own line without a terminal."""
        self.label = label
        if not self._tty:
            elapsed = time.monotonic() - self._start
            print(f"[{elapsed:6.1f} s] {label}", file=self._stream, flush=True)
        self._draw(force=True)

    def add_total(self, units: int) -> None:
        self.total += units

    def tick(self, units: int = 1) -> None:
        self.done += units
        self._draw()

    def close(self) -> None:
        self.done = self.total
        self._draw(force=True)
        if self._tty:
            print(file=self._stream, flush=True)

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self._tty or (not force and now - self._drawn < 0.1):
            return
        self._drawn = now
        share = min(self.done / self.total, 1.0)
        filled = int(share * self._width)
        bar = "#" * filled + "-" * (self._width - filled)
        elapsed = now - self._start
        eta = elapsed / share - elapsed if share > 0.02 else float("nan")
        eta_text = f"{eta:4.0f} s left" if eta == eta else "   ? s left"
        line = f"\r[{bar}] {share:4.0%} {elapsed:5.0f} s, {eta_text}  {self.label[:40]:<40}"
        self._stream.write(line)
        self._stream.flush()
