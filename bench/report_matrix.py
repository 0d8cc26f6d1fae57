"""The effectiveness matrix's section of the report: one row per cell, the issues' tables."""

from __future__ import annotations

from collections.abc import Callable

from bench.markdown import num
from bench.markdown import table as _table
from bench.matrix_checks import pressure
from bench.measures import Answer, CellResult, Tally
from bench.report_shapes import shape_details, shape_tables
from bench.targets import API_NAMES, NOT_HAD, cell_misses
from bench.workloads import KINDS, LABELLED_KINDS, TITLES


def _title(cell: CellResult) -> str:
    """The cell's workload as the tables name it, with the strategy its proxy ran and how
    the cell differs from the others of its workload (streamed, recall off, the client
    compacting)."""
    title = TITLES.get(cell.workload, cell.workload)
    title = f"{title}, `{cell.strategy}`" if cell.strategy else title
    title += (", streamed" if cell.stream else "") + ("" if cell.recall else ", recall off")
    title += ", thinking" if cell.thinking else ""
    return title + (", client compacting" if cell.client_compacts else "")


def _matrix_row(cell: CellResult) -> list[str]:
    kept, checked = cell.kept()
    landings = cell.landing_pressures
    highest = f" ({pressure(max(landings))})" if landings else ""
    misses = cell_misses(cell)
    return [
        f"{cell.window:,}", _title(cell),
        cell.summarizer, cell.api, str(cell.model_calls), f"{cell.history_windows:.1f}",
        str(cell.compactions), num(cell.requests_per_compaction),
        f"{cell.landings_above_target}{highest}",
        f"{cell.overflows} / {cell.overflows_after_calibration}",
        f"{kept}/{checked}", f"{cell.cache_share:.0%}", f"{cell.prefix_stable_share:.0%}",
        str(cell.summary_calls), str(cell.client_errors), str(cell.strict_rejections),
        f"{cell.wall_s:.1f}", "**" + ", ".join(misses) + "**" if misses else "none",
    ]  # fmt: skip


_COMPARED: tuple[tuple[str, Callable[[CellResult], str]], ...] = (
    ("calls", lambda c: str(c.model_calls)),
    ("requests / compaction", lambda c: num(c.requests_per_compaction)),
    ("highest landing", lambda c: pressure(max(c.landing_pressures)) if c.compactions else "-"),
    ("over window after calibration", lambda c: str(c.overflows_after_calibration)),
    ("kept", lambda c: "{}/{}".format(*c.kept())),
    ("cache", lambda c: f"{c.cache_share:.0%}"),
    ("prefix-stable", lambda c: f"{c.prefix_stable_share:.0%}"),
    ("summary calls", lambda c: str(c.summary_calls)),
    ("errors", lambda c: str(c.client_errors)),
    ("strict refusals", lambda c: str(c.strict_rejections)),
    ("targets missed", lambda c: ", ".join(cell_misses(c)) or "none"),
)


def _api_comparison(cells: list[CellResult]) -> list[str]:
    """Each cell's APIs side by side, `chat / responses`, where both ran."""
    apis = list(dict.fromkeys(cell.api for cell in cells))
    pairs: dict[tuple[int, str, str], dict[str, CellResult]] = {}
    for cell in cells:
        pairs.setdefault((cell.window, _title(cell), cell.summarizer), {})[cell.api] = cell
    rows = [
        [f"{window:,}", title, summarizer,
         *(" / ".join(value(by_api[api]) for api in apis) for _, value in _COMPARED)]
        for (window, title, summarizer), by_api in pairs.items()
        if len(by_api) == len(apis)
    ]  # fmt: skip
    if len(apis) < 2 or not rows:
        return []
    names = " / ".join(API_NAMES.get(api, api) for api in apis)
    header = ("window", "workload", "summarizer", *(name for name, _ in _COMPARED))
    return [f"The same cells side by side, {names}:", "", *_table(header, rows, 3)]


def _typed_rows(cells: list[CellResult]) -> list[list[str]]:
    rows = []
    for cell in cells:
        if cell.workload != "typed":
            continue
        counts = [cell.kept(kind) for kind in KINDS]
        kept, checked = cell.kept()
        row = [f"{cell.window:,}", cell.summarizer, cell.api, *(f"{k}/{n}" for k, n in counts)]
        rows.append([*row, f"{kept}/{checked}"])
    return rows


def _fraction(tally: Tally | None) -> str:
    return f"{tally.held}/{tally.judged}" if tally is not None else "-"


def _labelled_rows(cells: list[CellResult]) -> list[list[str]]:
    rows = []
    for cell in cells:
        if cell.workload != "labelled":
            continue
        counts = [cell.kept(kind) for kind in LABELLED_KINDS]
        kept, checked = cell.kept()
        row = [f"{cell.window:,}", cell.summarizer, cell.api, *(f"{k}/{n}" for k, n in counts)]
        stale = f"{len(cell.stale_found)}/{len(cell.stale)}"
        rows.append([*row, f"{kept}/{checked}", stale])
    return rows


def _after_first(cell: CellResult) -> str:
    """Each answered request after the first: its pressure and what the proxy applied."""
    after = zip(cell.applied[1:], cell.pressures[1:], strict=True)
    return ", ".join(f"{pressure(p)} ({applied})" for applied, p in after) or "-"


def _oversized_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"`{cell.strategy}`", cell.summarizer, cell.api, _fraction(cell.result_cut),
         "; ".join(cell.result_cut.details) if cell.result_cut else "-", _after_first(cell)]
        for cell in cells
        if cell.workload == "oversized-result"
    ]  # fmt: skip


def _fixed_heavy_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"{cell.window:,}", cell.summarizer, cell.api, str(cell.model_calls),
         str(cell.compactions), num(cell.requests_per_compaction),
         _fraction(cell.running_user), _fraction(cell.running_rounds),
         str(cell.extra_rounds), str(cell.abandoned_turns),
         f"{pressure(max(cell.landing_pressures)) if cell.compactions else '-'}"
         f" / {cell.target:.3f}"]
        for cell in cells
        if cell.workload == "fixed-heavy"
    ]  # fmt: skip


def _variant(cell: CellResult) -> str:
    variant = "recall off" if not cell.recall else ("streamed" if cell.stream else "whole")
    return variant + (", thinking" if cell.thinking else "")


def _answer(answer: Answer) -> str:
    if answer.right:
        return f"{answer.state}: right"
    said = "not had" if answer.text.startswith(NOT_HAD) else f'"{answer.text[:40]}"'
    return f"{answer.state}: **{said}**"


def _recall_rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [f"{cell.window:,}", cell.summarizer, cell.api, _variant(cell), str(cell.model_calls),
         str(cell.compactions), *(_answer(answer) for answer in cell.answers),
         f"{cell.recall_calls} / {cell.recall_rounds}", str(cell.unknown_calls),
         _fraction(cell.stable), f"{cell.offered} / {len(cell.applied)}",
         f"{cell.cache_share:.0%}"]
        for cell in cells
        if cell.workload == "recall"
    ]  # fmt: skip


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _recall_cost_rows(cells: list[CellResult]) -> list[list[str]]:
    """Recall on (whole) beside recall off, per window, summarizer and API."""
    off = {
        (c.window, c.summarizer, c.api, c.thinking): c
        for c in cells
        if c.workload == "recall" and not c.recall
    }
    rows = []
    for cell in cells:
        baseline = off.get((cell.window, cell.summarizer, cell.api, cell.thinking))
        if cell.workload != "recall" or not cell.recall or cell.stream or baseline is None:
            continue
        on_mean, off_mean = _mean(cell.prompts_before), _mean(baseline.prompts_before)
        rows.append([
            f"{cell.window:,}", cell.summarizer, cell.api, str(cell.tool_tokens),
            f"{cell.offered} / {len(cell.applied)}",
            f"{len(cell.prompts_before)} / {len(baseline.prompts_before)}",
            f"{num(on_mean, 0)} / {num(off_mean, 0)}", f"{num(on_mean - off_mean, 0)}",
            f"{num((on_mean - off_mean) / off_mean * 100, 1)} %",
            f"{cell.cache_share:.0%} / {baseline.cache_share:.0%}",
            f"{cell.compactions} / {baseline.compactions}",
        ])  # fmt: skip
    return rows


def _recall_tables(cells: list[CellResult]) -> list[str]:
    """The tables of what issue 22 measures, where its cells ran."""
    rows, costs = _recall_rows(cells), _recall_cost_rows(cells)
    if not rows:
        return []
    keys = next((c.answers for c in cells if c.workload == "recall" and c.answers), [])
    header = (
        "window", "summarizer", "API", "cell", "calls", "compactions",
        *(f"`{answer.key}`: where, answer" for answer in keys),
        "recall calls / rounds", "context_recall seen by the client",
        "stable between compactions", "requests offering the tool", "cache",
    )  # fmt: skip
    lines = [
        "Recall of a compacted value: where each value's result stood in the request that "
        "asked for it, and the answer the client got; the model's `context_recall` calls and "
        "the rounds the proxy answered them in; client requests no compaction changed that "
        "extend the one before (tools and instructions included):",
        "",
        *_table(header, rows, 4),
    ]
    if costs:
        cost_header = (
            "window", "summarizer", "API", "tool schema tokens (ours)",
            "requests offering it", "requests before the question: on / off",
            "mean prompt tokens before the question: on / off", "difference", "difference %",
            "cache: on / off", "compactions: on / off",
        )  # fmt: skip
        lines += [
            "What offering `context_recall` costs: recall on against `context.recall: false`, "
            "the same workload, whole answers (prompt tokens as the provider counts them):",
            "",
            *_table(cost_header, costs, 3),
        ]
    return lines


def _issue_tables(cells: list[CellResult]) -> list[str]:
    """The tables of what issue 21 measures, where its cells ran."""
    labelled, oversized, heavy = (
        _labelled_rows(cells), _oversized_rows(cells), _fixed_heavy_rows(cells)
    )  # fmt: skip
    lines: list[str] = []
    if labelled:
        header = ("window", "summarizer", "API", *LABELLED_KINDS, "all", "replaced, in block")
        lines += [
            "Labelled statements kept, by type; replaced values still in the last request's "
            "compaction block:",
            "",
            *_table(header, labelled, 3),
        ]
    if oversized:
        header = (
            "strategy", "summarizer", "API", "forwarded cut", "each request after it",
            "each request after it: pressure (applied)",
        )  # fmt: skip
        lines += ["The oversized newest result (16k window):", "", *_table(header, oversized, 3)]
    if heavy:
        header = (
            "window", "summarizer", "API", "calls", "compactions", "requests / compaction",
            "user message in place", "rounds held", "extra rounds", "turns abandoned",
            "highest landing / its target",
        )  # fmt: skip
        lines += ["The fixed-heavy agent, request by request:", "", *_table(header, heavy, 3)]
    return lines


def _recall_details(cell: CellResult) -> list[str]:
    """What the recall workload's judge found wrong in `cell`, with what the rounds did."""
    parts = [
        f"`{answer.key}` ({answer.state}) not answered: {answer.recalls}"
        for answer in cell.answers
        if not answer.right
    ]
    if cell.stable is not None and cell.stable.held < cell.stable.judged:
        parts.append("unstable: " + " | ".join(cell.stable.details))
    if cell.unknown_calls:
        parts.append(f"{cell.unknown_calls} calls of a tool the client never offered")
    return parts


def _cell_details(cell: CellResult) -> str:
    strategies = ", ".join(f"`{k}` x{v}" for k, v in sorted(cell.strategies.items())) or "none"
    parts = [f"- {cell.name}: {cell.user_turns} user turns, {strategies}"]
    if cell.lost:
        parts.append("lost " + ", ".join(f"`{key}`" for key in cell.lost))
    for stale in cell.stale_found:
        parts.append(f'`{stale.key}` still in the block: "{stale.line}" under "{stale.heading}"')
    for tally in (cell.running_user, cell.running_rounds):
        if tally is not None and tally.held < tally.judged:
            parts.append(" | ".join(tally.details))
    if cell.extra_rounds or cell.abandoned_turns:
        parts.append(
            f"{cell.extra_rounds} tool rounds beyond the plan, {cell.abandoned_turns} turns "
            "abandoned at the cap"
        )
    parts += _recall_details(cell)
    parts += shape_details(cell)
    if cell.strict_rejections:
        parts.append(f"{cell.strict_rejections} strict refusals")
    if cell.error_samples:
        parts.append("errors: " + " | ".join(cell.error_samples))
    return "; ".join(parts)


def _matrix_intro(cells: list[CellResult]) -> str:
    scaled = sorted({(c.window, c.bulk) for c in cells if c.bulk > 1})
    bulk = "".join(
        f" At {window:,} tokens the tool results and the model's replies are {factor:g}x "
        "larger, so that the cell compacts several times within the call cap."
        for window, factor in scaled
    )
    workloads = {cell.workload for cell in cells}
    replaced = (
        " Replaced values (labelled statements): judged in the last request's compaction "
        "block (the proxy's notes), not in the messages it forwarded as they came."
        if "labelled" in workloads
        else ""
    )
    return (
        "Each cell: a scripted session through a `compaction-proxy serve` on its default "
        "`context:` settings, in front of `proxy.mock_upstream` with the cell's window "
        "(detected at `/v1/models`), a tokenizer counting 10 % more than the proxy's, strict "
        "tool pairing and role alternation, and a useless (`poor`: keeps nothing) or `good` "
        "summarizer. Calls: the client's model calls (extra tool rounds the agent asks for "
        "after a compaction included). History: the client's whole history at the end, in "
        "windows. Compactions: answers whose `x-compaction-applied` is not `none`; above "
        "target: those whose `x-context-pressure` exceeds the target the proxy stated for "
        "them (`x-compaction-target`, by a unit of the last decimal at least), with the "
        "highest landing; that target is the default `compaction_target` t applied to the "
        "room the instructions and tools leave: f + t x (1 - f), f their share of the usable "
        "input (0.45 to 0.48 for most workloads, 0.84 for the fixed-heavy agent). Over "
        "window: requests the "
        "mock refused for its window, all / after the first answer (the first calibration). "
        "Kept: the user's statements (each topic's latest value) as exact substrings of the "
        "last forwarded request (its messages; for `responses` its instructions and input, "
        "summary requests apart). Cache: cached / prompt tokens; prefix-stable: "
        "forwarded requests extending the previous one. API: each cell runs the same "
        "workload over chat completions (`chat`) and over the Responses API (`responses`: "
        "stateless, `store` false, the model's reasoning items sent back with their "
        "`encrypted_content`, which the mock refuses altered or parted from the items they "
        "preceded); for `responses` the history is counted as the provider counts items "
        "(a reasoning item as a quarter of its ciphertext); and over Anthropic's Messages API "
        "(`messages`: the `anthropic` SDK as Claude Code sends it, a Claude model whose "
        "window the cell's proxy configures, a breakpoint on the last block; `, thinking` "
        "cells enable thinking and send the signed blocks back, which must reach the mock "
        "as it issued them). Strict refusals: requests the mock refused for broken tool "
        "pairing, role order, reasoning items or thinking signatures." + bulk + replaced
    )


def matrix_section(cells: list[CellResult]) -> list[str]:
    """The section: every cell's row, the APIs side by side, the issues' tables, details."""
    if not cells:
        return []
    header = (
        "window", "workload", "summarizer", "API", "calls", "history (windows)", "compactions",
        "requests / compaction", "above target (highest)", "over window (after calibration)",
        "kept", "cache", "prefix-stable", "summary calls", "errors", "strict refusals",
        "wall s", "targets missed",
    )  # fmt: skip
    typed = _typed_rows(cells)
    typed_header = ("window", "summarizer", "API", *KINDS, "all")
    return [
        "## Effectiveness matrix",
        "",
        _matrix_intro(cells),
        "",
        *_table(header, [_matrix_row(cell) for cell in cells], 4),
        *_api_comparison(cells),
        *(
            ["Typed statements kept, by type:", "", *_table(typed_header, typed, 3)]
            if typed
            else []
        ),
        *_issue_tables(cells),
        *_recall_tables(cells),
        *shape_tables(cells),
        "Per cell: the strategies applied, what was lost, errors.",
        "",
        *(_cell_details(cell) for cell in cells),
        "",
    ]
