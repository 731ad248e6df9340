"""``runner resume RUN_DIR``'s plan: which jobs of a run that did not succeed run again, and where they
continue (the command itself is ``cli.cmd_resume``).

Guarantees:
- A job whose status is ``succeeded`` is never touched: its files and its line in ``run.json`` stay.
- Every other job continues from its transcript, cut back to its last complete turn (a reply whose
  tool calls have no results yet is dropped, and run again); a job with no usable transcript starts
  from the beginning.
- A continued job's spend (cost, usage, summaries' usage, compactions, turns, wall time of every
  segment) is rebuilt from the ``model_call`` line of its last kept reply, never only from the last
  checkpoint; what came after that reply is taken back and done again (:mod:`runner.agent.continuation`).
- A half-written last line in ``transcript.jsonl`` or ``events.jsonl`` (the runner was killed
  mid-write) is reported and dropped, never a crash; the transcript is then rewritten whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..agent.continuation import cut_transcript
from ..config import ConfigError, Settings, describe_errors
from ..jobs import (
    WRITING_TOOLS,
    JobError,
    JobSpec,
    load_job,
    protected_paths,
    reserved_name,
    valid_name,
    workspace_problem,
    writable_workspace_problem,
)
from ..messages import Message, has_tool_use
from ..rundir.docs import (
    EVENTS,
    FINAL,
    JOB_JSON,
    LIMIT_STATUSES,
    RUN_JSON,
    JobMetrics,
    Status,
    event_lines,
    metrics_of,
    read_json,
    read_metrics,
)
from ..rundir.store import read_jsonl, write_atomic_sync
from ..tools.sandbox import bwrap_problem


@dataclass
class ResumePlan:
    specs: list[JobSpec] = field(default_factory=list)
    errors: list[JobError] = field(default_factory=list)
    histories: dict[str, list[Message]] = field(default_factory=dict)
    priors: dict[str, JobMetrics] = field(default_factory=dict)  # metrics.json of each job continued
    kept: dict[str, JobMetrics] = field(default_factory=dict)  # metrics of each job not rerun
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # backend and models of the run, from run.json

    def add(self, job: JobPlan) -> None:
        """One job's plan, in the run's order."""
        self.notes += job.notes
        if job.kept is not None:
            self.kept[job.name] = job.kept
        if job.error is not None:
            self.errors.append(job.error)
        if job.spec is not None:
            self.specs.append(job.spec)
        if job.history:
            self.histories[job.name] = job.history
        if job.prior is not None:
            self.priors[job.name] = job.prior


@dataclass(frozen=True)
class JobPlan:
    """What resume does with one job of the run: keeps it, reports it, or runs ``spec`` (continuing
    ``history`` when there is one, its spend so far ``prior``); ``notes`` say why, in order."""

    name: str = ""
    spec: JobSpec | None = None
    error: JobError | None = None
    kept: JobMetrics | None = None
    notes: list[str] = field(default_factory=list)
    history: list[Message] | None = None
    prior: JobMetrics | None = None


def _limit_raised(old: JobSpec, new: JobSpec, status: str) -> bool:
    """Whether today's limits lift the limit a job ended on."""
    if status == Status.BUDGET_EXCEEDED:
        return old.limits.max_cost_usd is not None and (
            new.limits.max_cost_usd is None or new.limits.max_cost_usd > old.limits.max_cost_usd
        )
    if status == Status.MAX_TURNS:
        return new.limits.max_turns > old.limits.max_turns
    return True


def plan_resume(
    run_dir: Path, settings: Settings, limits_from_config: bool = False, *, only: list[str] | None = None
) -> ResumePlan:
    """What to rerun. Each job keeps the spec (model, limits) in its ``job.json``; with
    ``limits_from_config``, the limits of today's config and task file. A job that ended on a limit
    (``budget_exceeded``, ``max_turns``) is kept as it is unless that limit was raised. Every name read
    from disk is checked before it becomes a path."""
    run_json = run_dir / RUN_JSON
    run, entries = read_run(run_dir)
    names = [e.get("job") for e in entries]
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise ConfigError([f"--only: no job named {n!r} in {run_json}" for n in unknown])
    plan = ResumePlan(meta={k: run[k] for k in ("backend", "model", "summary_model", "delivery") if k in run})
    for entry in entries:
        plan.add(plan_job(run_dir, entry, settings, limits_from_config=limits_from_config, only=only))
    return plan


def read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run.json`` and its job entries (those that are objects); ConfigError when it is no object."""
    run_json = run_dir / RUN_JSON
    run, problem = read_json(run_json)
    if not isinstance(run, dict):
        raise ConfigError([problem or f"{run_json}: missing or no object; is {run_dir} a run directory?"])
    jobs = run.get("jobs")
    return run, [e for e in jobs if isinstance(e, dict)] if isinstance(jobs, list) else []


def plan_job(
    run_dir: Path,
    entry: dict[str, Any],
    settings: Settings,
    *,
    limits_from_config: bool,
    only: list[str] | None,
) -> JobPlan:
    """What resume does with the job of ``entry`` (its row in ``run.json``)."""
    run_json = run_dir / RUN_JSON
    name = entry.get("job")
    if isinstance(name, str) and reserved_name(name):  # a run made before the name was the run dir's own
        return JobPlan(
            name,
            kept=metrics_of(entry, str(run_json)),
            notes=[f"{run_json}: job {name!r}: the run directory's own files take that name now; kept"],
        )
    if not isinstance(name, str) or not valid_name(name):
        return JobPlan(notes=[f"{run_json}: job name {name!r} is not a valid job name; skipped"])
    job_dir = run_dir / name
    metrics = read_metrics(job_dir)
    status = metrics.status if metrics else ""
    if metrics and status == Status.SUCCEEDED and (job_dir / FINAL).exists():  # metrics.json is written last
        return JobPlan(name, kept=metrics)
    if only and name not in only:
        return JobPlan(name, kept=metrics or metrics_of(entry, str(run_json)))
    job, _ = read_json(job_dir / JOB_JSON)
    if not isinstance(job, dict):
        return _from_task_file(name, entry, metrics, job_dir=job_dir, settings=settings)
    recorded = _recorded_spec(name, job, run_dir, settings=settings)
    if isinstance(recorded, JobError):
        return JobPlan(name, error=recorded)
    spec, notes = _with_todays_limits(recorded, settings) if limits_from_config else (recorded, [])
    if (
        metrics
        and status in LIMIT_STATUSES
        and not (limits_from_config and _limit_raised(recorded, spec, status))
    ):
        return JobPlan(
            name,
            kept=metrics,
            notes=[
                *notes,
                f"{name}: ended {status} and its limit was not raised "
                f"(`--limits-from-config` with a higher limit in config.toml); kept as it is",
            ],
        )
    if gone := _workspace_gone(spec, job_dir / JOB_JSON):  # nothing to go on with
        if metrics:  # what it did and spent stays as it was recorded
            return JobPlan(name, kept=metrics, notes=[*notes, f"{name}: not resumed: {gone}"])
        return JobPlan(name, error=JobError(name, job_dir / JOB_JSON, (gone,)))
    return _continued(spec, job_dir, metrics, notes=notes)


def _from_task_file(
    name: str, entry: dict[str, Any], metrics: JobMetrics | None, *, job_dir: Path, settings: Settings
) -> JobPlan:
    """A job without a readable ``job.json``: loaded again from its task file, if it still names it."""
    source = Path(entry.get("source") or (metrics.source if metrics else None) or "")
    loaded = (
        load_job(source, settings, sandbox_problem=bwrap_problem)
        if source.is_file()
        else JobError(name, source, (f"{job_dir}: no job.json and no task file to load it from",))
    )
    if isinstance(loaded, JobSpec) and loaded.name != name:
        loaded = JobError(
            name, source, (f"{source}: now names its job {loaded.name!r}, the run has {name!r}",)
        )
    if isinstance(loaded, JobError):
        return JobPlan(name, error=loaded)
    return JobPlan(name, spec=loaded)


def _recorded_spec(
    name: str, job: dict[str, Any], run_dir: Path, *, settings: Settings
) -> JobSpec | JobError:
    """The spec ``job.json`` recorded, or why it may not run: it does not validate, it sends its job to
    another directory, or its workspace is unsafe."""
    job_json = run_dir / name / JOB_JSON
    try:
        spec = JobSpec.model_validate(job)
    except ValidationError as e:
        return JobError(name, job_json, tuple(describe_errors(str(job_json), e)))
    if spec.name != name:  # a job.json may not send its job anywhere but its own directory
        return JobError(
            name, job_json, (f"{job_json}: name: expected {name!r} (the job's directory), got {spec.name!r}",)
        )
    unsafe = workspace_problem(spec.workspace, run_dir.parent, job_json)  # nor into the run's files
    if not unsafe and WRITING_TOOLS & set(spec.tools):  # nor into what decides the next run
        unsafe = writable_workspace_problem(spec.workspace, protected_paths(settings, spec.source), job_json)
    if unsafe:
        return JobError(name, job_json, (unsafe,), unsafe=True)
    return spec


def _workspace_gone(spec: JobSpec, job_json: Path) -> str | None:
    """Why a job cannot go on: its workspace moved or was removed since the run; None when it is there."""
    if spec.workspace.is_dir():
        return None
    what = "is not a directory" if spec.workspace.exists() else "does not exist"
    return f"{job_json}: workspace: {str(spec.workspace)!r} {what} (it did when the job ran)"


def _with_todays_limits(spec: JobSpec, settings: Settings) -> tuple[JobSpec, list[str]]:
    """``spec`` with the limits its task file gets today (``--limits-from-config``), and a note saying so;
    ``spec`` as it is, and a note saying why, when its task file is gone, does not load or names another
    job now."""
    name, source = spec.name, spec.source
    if not source.is_file():
        return spec, [f"{name}: its task file {source} is gone; its recorded limits are kept"]
    fresh = load_job(source, settings, sandbox_problem=bwrap_problem)
    if isinstance(fresh, JobError):
        return spec, [f"{name}: its recorded limits are kept: {fresh.message}"]
    if fresh.name != name:
        return spec, [f"{name}: {source} now names its job {fresh.name!r}; its recorded limits are kept"]
    return spec.model_copy(update={"limits": fresh.limits}), [
        f"{name}: limits from today's config and task file"
    ]


def _continued(spec: JobSpec, job_dir: Path, metrics: JobMetrics | None, *, notes: list[str]) -> JobPlan:
    """``spec`` run again, from its transcript's last complete turn when it has one; a half-written last
    line of ``events.jsonl`` dropped (the file rewritten whole, so the next append starts a line)."""
    name = spec.name
    notes = list(notes)
    events, event_warnings = read_jsonl(job_dir / EVENTS)
    if event_warnings:
        notes += event_warnings
        write_atomic_sync(job_dir / EVENTS, event_lines(events))
    cut = cut_transcript(job_dir, spec.prompt)
    notes += cut.warnings
    history = cut.history or []
    if history:
        notes.append(
            f"{name}: continuing from line {len(history)} of the transcript"
            + (f" ({cut.dropped} dropped after the last complete turn)" if cut.dropped else "")
        )
    else:
        notes.append(f"{name}: no usable transcript; starting from the beginning")
    if history and has_tool_use(history[-1]):
        notes.append(f"{name}: warning: transcript ends on unanswered tool calls")
    return JobPlan(
        name, spec=spec, notes=notes, history=history or None, prior=metrics if history and metrics else None
    )


def run_dir_behind(path: Path) -> Path:
    """The run directory ``path`` names: a link (``runs/latest``) is followed, so the run keeps its own
    id (its directory's name), never the link's."""
    if not path.is_symlink():
        return path
    target = Path(os.readlink(path))
    return target if target.is_absolute() else path.parent / target
