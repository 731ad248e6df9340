"""What the viewer and ``report --json`` read from a run directory, read defensively.

Guarantees:
- Nothing here raises on a damaged, missing or half-written file: a file that cannot be read is
  treated as absent and named in ``problems``; a half-written JSONL line is skipped.
- A run in progress is shown as it stands: each job's ``metrics.json`` (checkpointed while the job
  runs) takes precedence over its entry in ``run.json``, which is rewritten less often.
- Only files inside the run directory are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store import read_jsonl

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
STATUSES = ("succeeded", "failed", "timeout", "max_turns", "budget_exceeded", "cancelled", "running", "queued")


def read_json(path: Path, problems: list[str]) -> Any:
    """The JSON document at ``path``, or None (a problem is noted unless the file is simply absent)."""
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        problems.append(f"{path}: unreadable ({type(e).__name__}); skipped")
        return None


def read_records(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The object lines of a JSONL file; unreadable lines and files are noted and skipped."""
    try:
        records, warnings = read_jsonl(path)
    except OSError as e:
        problems.append(f"{path}: unreadable ({type(e).__name__}); skipped")
        return []
    problems.extend(warnings)
    return [r for r in records if isinstance(r, dict)]


def read_text(path: Path, problems: list[str]) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(f"{path}: unreadable ({type(e).__name__}); skipped")
        return None


def number(value: Any) -> float:
    """A count or an amount from a document that may be damaged: anything but a number is 0."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class JobData:
    """One job as the index shows it: its merged record and where its files are."""

    name: str
    dir: Path
    record: dict[str, Any]
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        status = self.record.get("status")
        return status if isinstance(status, str) else "unknown"

    def usage(self, key: str) -> float:
        return number(_dict(self.record.get("usage")).get(key)) + number(
            _dict(self.record.get("summarizer_usage")).get(key))

    def compactions(self) -> dict[str, int]:
        return {str(k): int(number(v)) for k, v in _dict(self.record.get("compactions")).items() if number(v)}

    def limits(self) -> dict[str, Any]:
        return _dict(self.spec.get("limits"))


@dataclass
class RunData:
    dir: Path
    run: dict[str, Any]
    jobs: list[JobData]
    problems: list[str]

    @property
    def state(self) -> str:
        state = self.run.get("state")
        return state if isinstance(state, str) else "unknown"


def _job_dirs(run_dir: Path) -> list[str]:
    """Directories of the run that hold a job's files (a run.json may lag behind them)."""
    try:
        return sorted(p.name for p in run_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
                      and ((p / "metrics.json").exists() or (p / "job.json").exists()))
    except OSError:
        return []


def load_run(run_dir: Path, with_specs: bool = True) -> RunData:
    """The run as it is on disk now. ``run.json`` may be missing or damaged; jobs are then found by
    their directories."""
    problems: list[str] = []
    run = _dict(read_json(run_dir / "run.json", problems))
    if not run and not (run_dir / "run.json").exists():
        problems.append(f"{run_dir / 'run.json'}: not found; jobs are read from their directories")
    entries = [j for j in run.get("jobs", []) if isinstance(j, dict)] if isinstance(run.get("jobs"), list) else []
    by_name: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if isinstance(entry.get("job"), str):
            by_name.setdefault(entry["job"], entry)
    for name in _job_dirs(run_dir):
        by_name.setdefault(name, {"job": name})
    jobs = []
    root = run_dir.resolve()
    for name, entry in by_name.items():
        job_dir = run_dir / name
        if root not in (run_dir / name).resolve().parents:  # a name from run.json never leaves the run
            problems.append(f"{run_dir / 'run.json'}: job name {name!r} is not a directory of the run; skipped")
            continue
        metrics = _dict(read_json(job_dir / "metrics.json", problems))
        record = {**entry, **metrics}
        record["job"] = name
        spec = _dict(read_json(job_dir / "job.json", problems)) if with_specs else {}
        jobs.append(JobData(name, job_dir, record, spec))
    return RunData(run_dir, run, jobs, problems)


def totals(jobs: list[JobData]) -> dict[str, Any]:
    """Totals over ``jobs``, computed from the jobs themselves (never trusted from run.json)."""
    out: dict[str, Any] = {"jobs": len(jobs), "turns": int(sum(number(j.record.get("turns")) for j in jobs)),
                           "cost_usd": round(sum(number(j.record.get("cost_usd")) for j in jobs), 6)}
    for status in STATUSES:
        out[status] = sum(1 for j in jobs if j.status == status)
    for key in USAGE_KEYS:
        out[key] = int(sum(j.usage(key) for j in jobs))
    return out


def run_document(run_dir: Path) -> dict[str, Any]:
    """``run.json``'s fields, with each job's entry brought up to date from its ``metrics.json`` and
    the totals recomputed from those entries: the run as one JSON document for scripts."""
    data = load_run(run_dir, with_specs=False)
    document = {k: v for k, v in data.run.items() if k != "jobs"}
    document.setdefault("run_id", run_dir.name)
    document.setdefault("state", "unknown")
    document["totals"] = totals(data.jobs)
    document["jobs"] = [j.record for j in data.jobs]
    if data.problems:
        document["problems"] = data.problems
    return document
