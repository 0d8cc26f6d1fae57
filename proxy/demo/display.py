"""What the demo prints: a header, a line per turn under a progress bar, the final table.

On a terminal the progress bar stays on the last line, redrawn in place under each new turn
line. Anywhere else (a pipe, a log file, CI) there is no bar and no carriage return: each
turn line carries its own count instead, so the output reads the same in a log. Plain ASCII
throughout, so no locale or code page can garble it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final, TextIO

from proxy.demo.accounting import Totals
from proxy.demo.agents import AgentStats, TurnReport

_BAR_WIDTH: Final = 30
_CLEAR_LINE: Final = "\r\x1b[K"


class Progress:
    """The per-turn lines, with a progress bar under them when `out` is a terminal."""

    def __init__(self, out: TextIO, *, agents: int, turns: int, live: bool) -> None:
        self._out = out
        self._turns = turns
        self._total = agents * turns
        self._done = 0
        self._live = live
        self._started = time.monotonic()

    def start(self) -> None:
        """Print the columns' names, and the empty bar."""
        self._out.write(" " * len(self._count()) + turn_columns(self._turns) + "\n")
        self._draw_bar()

    def turn(self, report: TurnReport) -> None:
        """Print `report`'s line (above the bar, which is drawn again)."""
        self._done += 1
        self._clear_bar()
        self._out.write(self._count() + turn_line(report, self._turns) + "\n")
        self._draw_bar()

    def close(self) -> None:
        """Take the bar away, leaving the lines and how long they took."""
        self._clear_bar()
        elapsed = time.monotonic() - self._started
        self._out.write(f"{_plural(self._done, 'turn')} in {elapsed:.1f} s\n")
        self._out.flush()

    def _count(self) -> str:
        # Without a bar, each line says how far along the run is.
        width = len(str(self._total))
        return "" if self._live else f"[{self._done:>{width}}/{self._total}] "

    def _draw_bar(self) -> None:
        if self._live:
            self._out.write(_bar(self._done, self._total, time.monotonic() - self._started))
        self._out.flush()

    def _clear_bar(self) -> None:
        if self._live:
            self._out.write(_CLEAR_LINE)


def _bar(done: int, total: int, elapsed: float) -> str:
    filled = _BAR_WIDTH * done // max(total, 1)
    bar = "#" * filled + "." * (_BAR_WIDTH - filled)
    return f"[{bar}] {done}/{total} turns  {elapsed:.1f} s"


# agent, turn, session, the client's prompt, pressure, action, forwarded (before -> after).
_TURN_FORMAT: Final = "{:<8} {:>{turn_width}}  {:<8}  {:>12}  {:>8}  {:<18}  {}"


def turn_columns(turns: int) -> str:
    """The names over the turn lines."""
    return _TURN_FORMAT.format(
        "agent",
        "turn",
        "session",
        "client sent",
        "pressure",
        "proxy did",
        "tokens forwarded",
        turn_width=_turn_width(turns),
    )


def turn_line(report: TurnReport, turns: int) -> str:
    """One turn as the proxy's headers told it: session, pressure, what it compacted.

    A turn makes several requests (tool rounds, then the answer); the line shows its
    compaction if it had one, else its last request.
    """
    turn = f"{report.turn}/{turns}"
    exchange = report.exchange
    if exchange is None:
        return f"{report.agent:<8} {turn:>{_turn_width(turns)}}  error: {report.error}"
    forwarded = f"{exchange.tokens_after:,}"
    if exchange.compacted:
        forwarded = f"{exchange.tokens_before:,} -> {forwarded}"
    line = _TURN_FORMAT.format(
        report.agent,
        turn,
        (exchange.session or "-")[:8],
        f"{exchange.sent_tokens:,}",
        f"{exchange.pressure:.2f}",
        exchange.action,
        forwarded,
        turn_width=_turn_width(turns),
    )
    return f"{line}  error: {report.error}" if report.error else line


def _turn_width(turns: int) -> int:
    return max(2 * len(str(turns)) + 1, len("turn"))


def header(*, agents: int, turns: int, proxy_url: str, mock_url: str, notes: Sequence[str]) -> str:
    """What runs where, before the first turn."""
    lines = [
        f"compaction-proxy demo: {_plural(agents, 'simulated agent')}, "
        f"{_plural(turns, 'user turn')} each, through the proxy to a mock model",
        f"  proxy     {proxy_url}/v1  (embedded session store, no Redis)",
        f"  provider  {mock_url}/v1  (a mock OpenAI-compatible server in this process)",
        *(f"  {note}" for note in notes),
        "",
    ]
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


_COLUMNS: Final = (
    ("agent", "<27"),
    ("api", "<9"),
    ("sent", ">11"),
    ("forwarded", ">11"),
    ("saved", ">6"),
    ("compactions", ">12"),
    ("summaries", ">10"),
    ("cached", ">7"),
    ("errors", ">7"),
    ("facts kept", ">11"),
)


def table(agents: Sequence[AgentStats], totals: Totals) -> str:
    """Per agent: its API, tokens sent against forwarded, compactions, summaries, cache,
    errors."""
    rows = [tuple(name for name, _ in _COLUMNS)]
    rows += [_agent_row(agent) for agent in agents]
    rows.append(_totals_row(agents, totals))
    lines = [_row(cells) for cells in rows]
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return " ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, _COLUMNS, strict=True))


def _agent_row(agent: AgentStats) -> tuple[str, ...]:
    mode = "streamed" if agent.stream else "whole"
    spent = agent.forwarded_tokens + agent.summary_tokens
    return (
        f"{agent.name} {(agent.session or '-')[:8]} ({mode})",
        agent.api,
        f"{agent.sent_tokens:,}",
        f"{agent.forwarded_tokens:,}",
        _share(1 - spent / agent.sent_tokens if agent.sent_tokens else 0.0),
        str(sum(agent.compactions.values())),
        str(agent.summary_calls),
        _share(agent.cached_tokens / agent.forwarded_tokens if agent.forwarded_tokens else 0.0),
        str(agent.errors),
        f"{agent.facts_kept}/{len(agent.facts)}",
    )


def _totals_row(agents: Sequence[AgentStats], totals: Totals) -> tuple[str, ...]:
    kept = sum(agent.facts_kept for agent in agents)
    planted = sum(len(agent.facts) for agent in agents)
    forwarded = totals.forwarded_tokens
    return (
        "all",
        "",
        f"{totals.sent_tokens:,}",
        f"{forwarded:,}",
        _share(totals.saved_share),
        str(totals.compactions.total()),
        str(totals.summary_calls),
        _share(totals.cached_tokens / forwarded if forwarded else 0.0),
        str(totals.errors),
        f"{kept}/{planted}",
    )


def _share(value: float) -> str:
    return f"{value:.0%}"


def notes(agents: Sequence[AgentStats], totals: Totals) -> str:
    """What the table's numbers mean, and anything that went wrong."""
    strategies = ", ".join(f"{name} {n}" for name, n in totals.compactions.most_common())
    lines = [
        f"Compactions by strategy: {strategies or 'none'}.",
        f"'saved' counts the summaries' own prompts ({totals.summary_tokens:,} tokens) as spent; "
        "'cached' is the share of forwarded tokens the provider's prompt cache served.",
        f"The provider refused {totals.overflows} requests as too long (the proxy retries "
        f"those) and {totals.rejections} for broken tool pairing or role order (or, on the "
        "Responses API, reasoning parted from its items or altered).",
    ]
    if totals.reasoning_returned:
        lines.append(
            f"The Responses API agents sent {totals.reasoning_returned:,} encrypted reasoning "
            "items back with their calls and answers; the provider verified each."
        )
    for agent in agents:
        lines += [f"{agent.name}: {sample}" for sample in agent.error_samples[:3]]
    return "\n".join(lines)


def dashboard(base_url: str, admin_token: str, *, wait: bool) -> str:
    """Where to look next: the dashboard, the session API, and how to stop; or, when the
    proxy stops with the demo, no address that would not answer."""
    if not wait:
        return (
            "The proxy stops with the demo (--no-wait): run it without --no-wait to browse "
            "the dashboard and the session API."
        )
    return "\n".join(
        [
            f"Dashboard:   {base_url}/dashboard#token={admin_token}",
            f'Session API: curl -H "Authorization: Bearer {admin_token}" '
            f"{base_url}/v1/compaction/sessions",
            "The proxy keeps serving; press Ctrl-C to stop.",
        ]
    )
