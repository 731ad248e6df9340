"""The run table at the width of the terminal: the full table when it fits, else a narrow one.

Guarantee: at any width of 80 columns or more the table fits, and no cell wraps inside a word:
the narrow layout merges tokens into one column, shows compactions as a total, leaves errors out
(they are in ``runner report --json`` and the viewer) and cuts a long job name with an ellipsis.
In both, a job that had subagents says how many (and how many failed) on a line under its name.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..rundir.docs import Status
from .report import STATUS_STYLE, job_cell, run_table
from .terminal import printable

NARROW_STATUS: dict[str, str] = {Status.BUDGET_EXCEEDED: "budget", Status.SUCCEEDED: "ok"}


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


def narrow_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    estimated = any(j.get("usage_estimated") for j in jobs)
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("job", no_wrap=True, overflow="ellipsis", min_width=8, max_width=22)
    table.add_column("status", no_wrap=True, min_width=9)
    for name, width in (
        ("turns", 5),
        ("tok in/out", 13),
        ("cmp", 3),
        ("cost $" + ("*" if estimated else ""), 9),
        ("wall s", 6),
    ):
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    for job in jobs:
        usage = job.get("usage") or {}
        status = str(job.get("status", "?"))
        comp = job.get("compactions") or {}
        table.add_row(
            job_cell(job),
            Text(printable(NARROW_STATUS.get(status, status)), style=STATUS_STYLE.get(status, "white")),
            str(job.get("turns", 0)),
            f"{_tokens(usage.get('input_tokens', 0))}/{_tokens(usage.get('output_tokens', 0))}",
            str(sum(v for v in comp.values() if isinstance(v, int))),
            _short(job.get("cost_usd", 0.0), 4),
            _short(job.get("wall_s", 0.0), 1),
        )
    table.caption = (
        "ok = succeeded, cmp = compactions, * estimated (offline model)"
        if estimated
        else "ok = succeeded, cmp = compactions"
    )
    return table


def fitting_table(jobs: list[dict[str, Any]], title: str | None, width: int) -> Table:
    """The full run table when it fits in ``width`` columns, else the narrow one."""
    wide = run_table(jobs, title=title)
    measure = Console(width=10_000).measure(wide)
    return wide if measure.maximum <= width else narrow_table(jobs, title)
