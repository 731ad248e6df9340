"""The run table, from ``run.json`` or from results in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from .config import ConfigError
from .jobs import valid_name

SHORT = {"tool_result_budget": "budget", "micro_compact": "micro", "fit_tool_results": "fit",
         "compact_history": "history", "compact_tool": "tool", "reactive_compact": "reactive",
         "server_compaction": "server"}
STATUS_STYLE = {"succeeded": "green", "failed": "red", "timeout": "yellow", "max_turns": "yellow",
                "budget_exceeded": "yellow", "stuck": "yellow", "cancelled": "magenta", "running": "cyan", "queued": "dim",
                "not_started": "dim"}


def load_run(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([f"{path}: not found; is {run_dir} a run directory (runs/<run-id>)?"]) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError([f"{path}: unreadable: {e}"]) from None


def load_report(run_dir: Path) -> dict[str, Any]:
    """The run as a report shows it, never raising on a damaged file (only on a missing or unreadable
    run.json): ``run.json``'s document with every job row cleaned (numbers as numbers, text as text)
    and overlaid with the job's own ``metrics.json`` (the checkpoint a running job writes after its
    turns, or its final metrics), which is never older than run.json's row. Totals are recomputed."""
    document = load_run(run_dir)
    entries = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ConfigError([f"{run_dir / 'run.json'}: not a run document (expected an object with a jobs list)"])
    jobs = []
    for entry in entries:
        row = entry if isinstance(entry, dict) else {}
        name = row.get("job")
        if isinstance(name, str) and valid_name(name):
            metrics = _read_dict(run_dir / name / "metrics.json")
            if metrics.get("job", name) == name:
                row = {**row, **metrics}
        jobs.append(clean_job(row))
    state = document.get("state")
    return {**{k: v for k, v in document.items() if k not in ("jobs", "totals")},
            "state": state if isinstance(state, str) else "unknown", "totals": totals_of(jobs), "jobs": jobs}


def totals_of(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of cleaned job rows: jobs, turns, cost, tokens (the jobs' and their summaries'), and
    a count per status that occurred."""
    totals: dict[str, Any] = {"jobs": len(jobs), "cost_usd": round(sum(j["cost_usd"] for j in jobs), 6),
                              "turns": sum(j["turns"] for j in jobs)}
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        totals[key] = sum(j["usage"][key] + _int((j.get("summarizer_usage") or {}).get(key)) for j in jobs)
    for job in jobs:
        totals[job["status"]] = totals.get(job["status"], 0) + 1
    return totals


def _read_dict(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else 0.0


def clean_job(row: dict[str, Any]) -> dict[str, Any]:
    """One job's row with every field the table reads in its expected type (a damaged value is 0 or '?')."""
    usage = row.get("usage") if isinstance(row.get("usage"), dict) else {}
    compactions = row.get("compactions") if isinstance(row.get("compactions"), dict) else {}
    status = row.get("status")
    return {**row,
            "job": str(row.get("job", "?")),
            "status": status if isinstance(status, str) and status else "?",
            "turns": _int(row.get("turns")),
            "usage": {k: _int(usage.get(k)) for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                                      "cache_read_input_tokens")},
            "compactions": {str(k): _int(v) for k, v in compactions.items()},
            "persisted_bytes": _int(row.get("persisted_bytes")),
            "cost_usd": _float(row.get("cost_usd")),
            "wall_s": _float(row.get("wall_s")),
            "usage_estimated": row.get("usage_estimated") is True,
            "error": None if row.get("error") is None else str(row.get("error"))}


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
    statuses = ", ".join(f"{totals[s]} {s}" for s in STATUS_STYLE if isinstance(totals.get(s), int) and totals[s])
    tokens = f"{totals.get('input_tokens', 0):,} in / {totals.get('output_tokens', 0):,} out tokens"
    return f"{totals.get('jobs', 0)} jobs, {statuses or '0 succeeded'}; {tokens}; cost ${totals.get('cost_usd', 0):.4f}"
