"""The run table at the width of the terminal: the full table when it fits, else a narrow one.

Guarantee: at any width of 80 columns or more the table fits, and no cell wraps inside a word:
the narrow layout merges tokens into one column, shows compactions as a total, leaves errors out
(they are in ``runner report --json`` and the viewer) and cuts a long job name with an ellipsis.
In both, a job that had subagents says how many (and how many failed) on a line under its name.
A big run (over ``PLAIN_ROWS`` jobs) gets the narrow layout as plain lines, laid out here: rich lays out
every cell of a table, about 0.6 ms a row, a cost per job as large as a share of the job's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ..rundir.docs import Status
from .report import STATUS_STYLE, job_cell, job_usage, run_table, subagent_note
from .terminal import printable

NARROW_STATUS: dict[str, str] = {Status.BUDGET_EXCEEDED: "budget", Status.SUCCEEDED: "ok"}
PLAIN_ROWS = 100  # a run of more jobs gets its table as plain lines (rich's costs 60 ms at 100 rows)


def _tokens(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _short(value: float, places: int) -> str:
    """A number in at most 9 characters: fewer decimals as it grows."""
    for digits in range(places, -1, -1):
        text = f"{value:.{digits}f}"
        if len(text) <= 9:
            return text
    return f"{value:.3g}"


def caption(estimated: bool) -> str:
    """The narrow layout's key, at most 80 columns."""
    return "ok = succeeded, cmp = compactions, tok in: cache too" + (", * estimated" if estimated else "")


def _number_columns(estimated: bool) -> list[tuple[str, int]]:
    """The narrow layout's right-justified columns after job and status: (header, least width)."""
    return [
        ("turns", 5),
        ("tok in/out", 13),
        ("cmp", 3),
        ("cost $" + ("*" if estimated else ""), 9),
        ("wall s", 6),
    ]


def _number_cells(job: dict[str, Any]) -> list[str]:
    """A job's cells of :func:`_number_columns`."""
    usage, _ = job_usage(job)
    comp = job.get("compactions") or {}
    return [
        str(job.get("turns", 0)),
        f"{_tokens(usage.context_tokens)}/{_tokens(usage.output_tokens)}",
        str(sum(v for v in comp.values() if isinstance(v, int))),
        _short(job.get("cost_usd", 0.0), 4),
        _short(job.get("wall_s", 0.0), 1),
    ]


def narrow_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    estimated = any(j.get("usage_estimated") for j in jobs)
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("job", no_wrap=True, overflow="ellipsis", min_width=8, max_width=22)
    table.add_column("status", no_wrap=True, min_width=9)
    for name, width in _number_columns(estimated):
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    for job in jobs:
        status = str(job.get("status", "?"))
        table.add_row(
            job_cell(job),
            Text(printable(NARROW_STATUS.get(status, status)), style=STATUS_STYLE.get(status, "white")),
            *_number_cells(job),
        )
    table.caption = caption(estimated)
    return table


@dataclass
class PlainColumn:
    header: str


class PlainTable:
    """The narrow table's columns and caption as plain lines (no styles), each at most 80 columns."""

    def __init__(self, jobs: list[dict[str, Any]], title: str | None = None):
        estimated = any(j.get("usage_estimated") for j in jobs)
        numbers = _number_columns(estimated)
        headers = ["job", "status", *(header for header, _ in numbers)]
        self.columns = [PlainColumn(h) for h in headers]
        rows: list[tuple[list[str], str]] = []
        for job in jobs:
            status = str(job.get("status", "?"))
            name = printable(job.get("job", "?"))
            cells = [
                name if len(name) <= 22 else name[:21] + "…",
                printable(NARROW_STATUS.get(status, status))[:13],
                *_number_cells(job),
            ]
            rows.append((cells, subagent_note(job.get("subagents"))))
        widths = [max([len(h), *(len(cells[i]) for cells, _ in rows)]) for i, h in enumerate(headers)]
        widths = [max(w, m) for w, m in zip(widths, (8, 9, *(m for _, m in numbers)), strict=True)]

        def line(cells: list[str]) -> str:
            out = [cells[0].ljust(widths[0]), cells[1].ljust(widths[1])]
            out += [c.rjust(w) for c, w in zip(cells[2:], widths[2:], strict=True)]
            return " ".join(out).rstrip()

        self.lines = ([title] if title else []) + [line(headers)]
        for cells, note in rows:
            self.lines.append(line(cells))
            if note:
                self.lines.append(note[:80])
        self.lines.append(caption(estimated))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for text in self.lines:
            yield Segment(text)
            yield Segment.line()


def fitting_table(jobs: list[dict[str, Any]], title: str | None, width: int) -> Table | PlainTable:
    """The full run table when it fits in ``width`` columns, else the narrow one; over ``PLAIN_ROWS``
    jobs, the narrow one as plain lines."""
    if len(jobs) > PLAIN_ROWS:
        return PlainTable(jobs, title)
    wide = run_table(jobs, title=title)
    measure = Console(width=10_000).measure(wide)
    return wide if measure.maximum <= width else narrow_table(jobs, title)
