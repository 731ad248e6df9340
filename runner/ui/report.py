"""The run table, from ``run.json`` or from results in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from rich.table import Table
from rich.text import Text

from ..compaction.stages import Stage
from ..config import ConfigError
from ..pricing import Usage
from ..rundir import docs as rundocs
from ..rundir.docs import LIVE_STATUSES, RUN_JSON, Status, load_run, metrics_of
from .terminal import printable

STATUS_STYLE: dict[str, str] = {
    Status.SUCCEEDED: "green",
    Status.FAILED: "red",
    Status.TIMEOUT: "yellow",
    Status.MAX_TURNS: "yellow",
    Status.BUDGET_EXCEEDED: "yellow",
    Status.STUCK: "yellow",
    Status.DISK_QUOTA: "yellow",
    Status.CANCELLED: "magenta",
    Status.RUNNING: "cyan",
    Status.QUEUED: "dim",
    Status.NOT_STARTED: "dim",
    Status.INTERRUPTED: "red",
}


def short_name(stage: str) -> str:
    """A compaction stage's short label, for tables and the viewer (another name as it is)."""
    known = Stage.named(stage)
    return known.label if known else stage


def subagent_counts(rows: Any) -> tuple[int, int, int]:
    """(subagents, failed, running) of a job's ``subagents`` rows: failed is every one that ended
    otherwise than succeeded (its parent got an error result); a damaged row counts as failed."""
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    running = sum(1 for r in rows if r.get("status") in LIVE_STATUSES)
    failed = sum(1 for r in rows if r.get("status") not in (Status.SUCCEEDED, *LIVE_STATUSES))
    return len(rows), failed, running


def subagent_note(rows: Any) -> str:
    """``8 subagents, 1 failed`` (and how many run now); empty for a job without subagents."""
    count, failed, running = subagent_counts(rows)
    if not count:
        return ""
    return ", ".join(
        [
            plural(count, "subagent"),
            *([f"{failed} failed"] if failed else []),
            *([f"{running} running"] if running else []),
        ]
    )


def load_report(run_dir: Path) -> dict[str, Any]:
    """The run as a report shows it, never raising on a damaged file (only on a missing or unreadable
    run.json, or one that is no run document): :func:`runner.rundir.docs.load_run`'s rows, every field in
    its type (a damaged value is 0 or '?'), each overlaid with the job's own ``metrics.json``; totals
    recomputed."""
    path = run_dir / RUN_JSON
    if not path.exists():
        raise ConfigError([f"{path}: not found; is {run_dir} a run directory (runs/<run-id>)?"])
    data = load_run(run_dir, with_specs=False)
    if not data.run_json_ok:
        raise ConfigError(
            [
                next(
                    (p for p in data.problems if p.startswith(str(path))),
                    f"{path}: not a run document (expected an object with a jobs list)",
                )
            ]
        )
    return {
        **data.run.head(),
        "state": data.run.state,
        "totals": data.run.totals,
        "jobs": [j.metrics.clean() for j in data.jobs],
    }


def clean_job(row: dict[str, Any]) -> dict[str, Any]:
    """One job's row with every field the table reads in its expected type (a damaged value is 0 or '?')."""
    return metrics_of(row).clean()


def totals_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of job rows (see :func:`runner.rundir.docs.totals_of`)."""
    return dict(rundocs.totals_of([metrics_of(r) for r in rows]))


def run_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    estimated = any(j.get("usage_estimated") for j in jobs)
    table = Table(title=title, title_justify="left")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("job", "left"),
        ("status", "left"),
        ("turns", "right"),
        ("in tok", "right"),
        ("out tok", "right"),
        ("cache r/w", "right"),
        ("compactions", "left"),
        ("persisted", "right"),
        ("cost $" + ("*" if estimated else ""), "right"),
        ("wall s", "right"),
        ("error", "left"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, overflow="fold")
    for job in jobs:
        usage, own = job_usage(job)
        comp = job.get("compactions") or {}
        status = job.get("status", "?")
        table.add_row(  # free text goes in as Text, its control characters escaped: never markup or escapes
            job_cell(job),
            Text(printable(status), style=STATUS_STYLE.get(status, "white")),
            str(job.get("turns", 0)),
            _with_own(usage, own, lambda u: f"{u.input_tokens:,}"),
            _with_own(usage, own, lambda u: f"{u.output_tokens:,}"),
            _with_own(
                usage, own, lambda u: f"{u.cache_read_input_tokens:,}/{u.cache_creation_input_tokens:,}"
            ),
            Text(printable(" ".join(f"{short_name(k)}:{v}" for k, v in sorted(comp.items())) or "-")),
            _bytes(job.get("persisted_bytes", 0)),
            f"{job.get('cost_usd', 0.0):.4f}",
            f"{job.get('wall_s', 0.0):.1f}",
            Text(printable(job.get("error") or "")),
        )
    if estimated:
        table.caption = "* estimated: no API reported usage; token counts and cost at 4 chars per token"
    return table


def job_usage(job: dict[str, Any]) -> tuple[Usage, Usage | None]:
    """A row's usage as every table shows it: the job's whole (``total_usage``: its own calls', its
    summaries' and its subagents'), and its own calls' when they differ (None when they do not)."""
    record = metrics_of(job)  # total_usage is made from the parts, so an older row without it adds up too
    whole, own = record.total_usage(), record.usage
    return whole, (None if own == whole else own)


def _with_own(whole: Usage, own: Usage | None, shown: Callable[[Usage], str]) -> Text:
    """A token cell: the job's whole count, and under it (dim) its own calls' when they differ."""
    cell = Text(shown(whole))
    if own is not None:
        cell.append(f"\nown {shown(own)}", style="dim")
    return cell


def job_cell(job: dict[str, Any]) -> Text:
    """A job's name, and under it, for a job that had subagents, how many (and how many failed)."""
    cell = Text(printable(job.get("job", "?")))
    note = subagent_note(job.get("subagents"))
    if note:
        cell.append(f"\n{note}", style="dim")
    return cell


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return str(size)


def plural(n: int, noun: str) -> str:
    """``1 job``, ``2 jobs``: a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else noun + 's'}"


def totals_line(document: dict[str, Any]) -> str:
    """One line of totals: jobs, each status that occurred, tokens (cache reads and writes too; with the
    summaries' share when the rows are given under ``jobs``) and cost. The tokens are the sum of the
    rows' ``total_usage`` (:func:`runner.rundir.docs.totals_of`), as the job columns show them."""
    totals = document.get("totals") or {}
    statuses = ", ".join(
        f"{totals[s]} {s}" for s in STATUS_STYLE if isinstance(totals.get(s), int) and totals[s]
    )
    tokens = f"{_count(totals.get('input_tokens')):,} in / {_count(totals.get('output_tokens')):,} out tokens"
    read, write = (
        _count(totals.get("cache_read_input_tokens")),
        _count(totals.get("cache_creation_input_tokens")),
    )
    if read or write:
        tokens += f" (cache {read:,} read / {write:,} written)"
    summary_in = summary_out = 0
    for job in document.get("jobs") or ():
        usage = job.get("summarizer_usage") if isinstance(job, dict) else None
        if isinstance(usage, dict):
            summary_in += _count(usage.get("input_tokens"))
            summary_out += _count(usage.get("output_tokens"))
    summaries = (
        f"; the tokens include summaries' {summary_in:,} in / {summary_out:,} out"
        if summary_in or summary_out
        else ""
    )
    jobs = totals.get("jobs", 0)
    return (
        f"{plural(jobs if isinstance(jobs, int) else 0, 'job')}, {statuses or '0 ' + Status.SUCCEEDED}; "
        f"{tokens}; "
        f"cost ${totals.get('cost_usd', 0):.4f}{summaries}"
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
