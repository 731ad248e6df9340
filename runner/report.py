"""The run table, from ``run.json`` or from results in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from .config import ConfigError

SHORT = {"tool_result_budget": "budget", "micro_compact": "micro", "fit_tool_results": "fit",
         "compact_history": "history", "compact_tool": "tool", "reactive_compact": "reactive",
         "server_compaction": "server"}
STATUS_STYLE = {"succeeded": "green", "failed": "red", "timeout": "yellow", "max_turns": "yellow",
                "budget_exceeded": "yellow", "stuck": "yellow", "cancelled": "magenta", "running": "cyan", "queued": "dim"}


def load_run(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([f"{path}: not found; is {run_dir} a run directory (runs/<run-id>)?"]) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError([f"{path}: unreadable: {e}"]) from None


def run_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    estimated = any(j.get("usage_estimated") for j in jobs)
    table = Table(title=title, title_justify="left")
    for column, justify in (("job", "left"), ("status", "left"), ("turns", "right"), ("in tok", "right"),
                            ("out tok", "right"), ("cache r/w", "right"), ("compactions", "left"),
                            ("persisted", "right"), ("cost $" + ("*" if estimated else ""), "right"),
                            ("wall s", "right"), ("error", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for job in jobs:
        usage = job.get("usage") or {}
        comp = job.get("compactions") or {}
        status = job.get("status", "?")
        table.add_row(  # free text goes in as Text: shown verbatim, never read as markup
            Text(str(job.get("job", "?"))),
            f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]",
            str(job.get("turns", 0)),
            f"{usage.get('input_tokens', 0):,}",
            f"{usage.get('output_tokens', 0):,}",
            f"{usage.get('cache_read_input_tokens', 0):,}/{usage.get('cache_creation_input_tokens', 0):,}",
            " ".join(f"{SHORT.get(k, k)}:{v}" for k, v in sorted(comp.items())) or "-",
            _bytes(job.get("persisted_bytes", 0)),
            f"{job.get('cost_usd', 0.0):.4f}",
            f"{job.get('wall_s', 0.0):.1f}",
            Text(str(job.get("error") or "")),
        )
    if estimated:
        table.caption = "* offline model: token counts and cost are estimates (4 chars per token)"
    return table


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def totals_line(document: dict[str, Any]) -> str:
    """One line of totals: jobs, each status that occurred, tokens and cost."""
    totals = document.get("totals") or {}
    statuses = ", ".join(f"{totals[s]} {s}" for s in ("succeeded", "failed", "timeout", "max_turns",
                                                       "budget_exceeded", "cancelled") if totals.get(s))
    tokens = f"{totals.get('input_tokens', 0):,} in / {totals.get('output_tokens', 0):,} out tokens"
    return f"{totals.get('jobs', 0)} jobs, {statuses or '0 succeeded'}; {tokens}; cost ${totals.get('cost_usd', 0):.4f}"
