"""What the viewer reads from a run directory, read defensively (the run's documents through
:mod:`runner.rundir.docs`, which ``runner report`` reads too).

Guarantees:
- Nothing here raises on a damaged, missing or half-written file: a file that cannot be read is
  treated as absent and named in ``problems``; a half-written JSONL line is skipped.
- A run in progress is shown as it stands: each job's ``metrics.json`` (checkpointed while the job
  runs) takes precedence over its entry in ``run.json``, which is rewritten less often.
- Only files inside the run directory are read: a job's subagents are the directories right under
  its ``agents/`` (never one that is a link out of it). The one exception is an incremental job's
  baseline (:func:`baseline_of`): a run directory beside this one (never a link, never this run),
  of which only that job's ``metrics.json``, report and outputs are read, as ``runner diff`` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...rundir.docs import (
    AGENTS,
    INDEX,
    JOB_JSON,
    LIVE_STATUSES,
    METRICS,
    JobData,
    JobMetrics,
    Status,
    is_run_dir,
    lenient,
    read_json,
)
from ...rundir.store import read_jsonl
from ..diff import status_of


def agent_order(name: str) -> tuple[int, str]:
    """Subagents in the order their ``task`` calls were made: ``<n>-<slug>`` by ``n``."""
    head = name.split("-", 1)[0]
    return (int(head) if head.isdigit() else 10**9, name)


def subagent_names(job: JobData) -> list[str]:
    """The directories under a job's ``agents/`` that hold a subagent's files, in call order."""
    root = job.dir / AGENTS
    try:
        real = root.resolve()
        found = [
            p.name
            for p in root.iterdir()
            if not p.name.startswith(".")
            and p.is_dir()
            and p.resolve().parent == real
            and ((p / METRICS).exists() or (p / JOB_JSON).exists())
        ]
    except OSError:
        return []
    return sorted(found, key=agent_order)


def subagents_of(job: JobData, problems: list[str]) -> list[JobData]:
    """A job's subagents as they stand, each as a job of its own: its row in the parent's
    ``subagents`` overlaid with its own ``metrics.json`` (checkpointed while it runs); a live one of
    a job shown as interrupted is interrupted too."""
    rows = {
        r["agent"]: r
        for r in job.metrics.subagents
        if isinstance(r, dict) and isinstance(r.get("agent"), str)
    }
    out = []
    for name in subagent_names(job):
        child_dir = job.dir / AGENTS / name
        row = {("job" if k == "agent" else k): v for k, v in rows.get(name, {}).items()}
        data, problem = read_json(child_dir / METRICS)
        problems += [problem] if problem else []
        merged = {**row, **(data if isinstance(data, dict) else {}), "job": name}
        metrics, row_problems = lenient(JobMetrics, merged, str(child_dir / METRICS))
        problems += row_problems
        metrics = metrics or JobMetrics(job=name)
        if job.status == Status.INTERRUPTED and metrics.status in LIVE_STATUSES:
            metrics = metrics.model_copy(update={"status": Status.INTERRUPTED})
        spec, problem = read_json(child_dir / JOB_JSON)
        problems += [problem] if problem else []
        out.append(JobData(name, child_dir, metrics, spec if isinstance(spec, dict) else {}))
    return out


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


@dataclass(frozen=True)
class Baseline:
    """An incremental job's baseline as it stands: its run's id and directory (``dir`` None when that
    run is no longer a run directory beside this one), the job's status there (None: not in it)."""

    run_id: str
    dir: Path | None
    status: str | None

    @property
    def index(self) -> Path | None:
        """The baseline run's page when ``runner view`` wrote it, else its directory; None without one."""
        if self.dir is None:
            return None
        return self.dir / INDEX if (self.dir / INDEX).is_file() else self.dir


def baseline_of(job: JobData, problems: list[str]) -> Baseline | None:
    """The baseline run of an incremental job (``metrics.json``'s ``incremental.baseline``), None for a
    job without one. Its directory is the run id's in the same output directory as the job's run, when
    that is a run directory and no link; the job's status there is read from its ``metrics.json``."""
    incremental = job.metrics.incremental
    run_id = incremental.baseline if incremental is not None else None
    if not run_id:
        return None
    run_dir = job.dir.parent
    where = run_dir.parent / run_id
    usable = (
        run_id not in (".", "..")
        and "/" not in run_id
        and "\x00" not in run_id
        and not where.is_symlink()
        and where.is_dir()
        and where.resolve() != run_dir.resolve()
        and is_run_dir(where)
    )
    if not usable:
        return Baseline(run_id, None, None)
    if not (where / job.name).is_dir() or (where / job.name).is_symlink():
        return Baseline(run_id, where, None)
    data, problem = read_json(where / job.name / METRICS)
    problems += [problem] if problem else []
    metrics, _ = lenient(JobMetrics, data if isinstance(data, dict) else {}, str(where / job.name / METRICS))
    return Baseline(run_id, where, status_of(JobData(job.name, where / job.name, metrics or JobMetrics())))
