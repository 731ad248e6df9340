"""``runner resume RUN_DIR``: rerun the jobs of a run that did not succeed, where they stopped.

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

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.text import Text

from ..agent.continuation import cut_transcript
from ..config import ConfigError, Settings, describe_errors
from ..jobs import (
    WRITING_TOOLS,
    JobError,
    JobSpec,
    load_job,
    parsed,
    protected_paths,
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
from ..rundir.lock import hold_run_dir
from ..rundir.reserve import claim
from ..rundir.store import read_jsonl, write_atomic_sync
from ..tools.sandbox import bwrap_problem
from ..ui.terminal import printable


@dataclass
class ResumePlan:
    specs: list[JobSpec] = field(default_factory=list)
    errors: list[JobError] = field(default_factory=list)
    histories: dict[str, list[Message]] = field(default_factory=dict)
    priors: dict[str, JobMetrics] = field(default_factory=dict)  # metrics.json of each job continued
    kept: dict[str, JobMetrics] = field(default_factory=dict)  # metrics of each job not rerun
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # backend and models of the run, from run.json


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
    run_dir: Path, settings: Settings, limits_from_config: bool = False, only: list[str] | None = None
) -> ResumePlan:
    """What to rerun. Each job keeps the spec (model, limits) in its ``job.json``; with
    ``limits_from_config``, the limits of today's config and task file. A job that ended on a limit
    (``budget_exceeded``, ``max_turns``) is kept as it is unless that limit was raised. Every name read
    from disk is checked before it becomes a path."""
    run_json = run_dir / RUN_JSON
    run, problem = read_json(run_json)
    if not isinstance(run, dict):
        raise ConfigError([problem or f"{run_json}: missing or no object; is {run_dir} a run directory?"])
    entries = (
        [e for e in run.get("jobs", []) if isinstance(e, dict)] if isinstance(run.get("jobs"), list) else []
    )
    names = [e.get("job") for e in entries]
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise ConfigError([f"--only: no job named {n!r} in {run_json}" for n in unknown])
    plan = ResumePlan(meta={k: run[k] for k in ("backend", "model", "summary_model") if k in run})
    for entry in entries:
        name = entry.get("job")
        if not isinstance(name, str) or not valid_name(name):
            plan.notes.append(f"{run_json}: job name {name!r} is not a valid job name; skipped")
            continue
        job_dir = run_dir / name
        metrics = read_metrics(job_dir)
        status = metrics.status if metrics else ""
        if (
            metrics and status == Status.SUCCEEDED and (job_dir / FINAL).exists()
        ):  # metrics.json is written last
            plan.kept[name] = metrics
            continue
        if only and name not in only:
            plan.kept[name] = metrics or metrics_of(entry, str(run_json))
            continue
        job_json = job_dir / JOB_JSON
        job, _ = read_json(job_json)
        if not isinstance(job, dict):
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
                plan.errors.append(loaded)
                continue
            plan.specs.append(loaded)
            continue
        try:
            recorded = spec = JobSpec.model_validate(job)
        except ValidationError as e:
            plan.errors.append(JobError(name, job_json, tuple(describe_errors(str(job_json), e))))
            continue
        if spec.name != name:  # a job.json may not send its job anywhere but its own directory
            plan.errors.append(
                JobError(
                    name,
                    job_json,
                    (f"{job_json}: name: expected {name!r} (the job's directory), got {spec.name!r}",),
                )
            )
            continue
        unsafe = workspace_problem(spec.workspace, run_dir.parent, job_json)  # nor into the run's files
        if not unsafe and WRITING_TOOLS & set(spec.tools):  # nor into what decides the next run
            unsafe = writable_workspace_problem(
                spec.workspace, protected_paths(settings, spec.source), job_json
            )
        if unsafe:
            plan.errors.append(JobError(name, job_json, (unsafe,), unsafe=True))
            continue
        if limits_from_config:
            fresh = (
                load_job(spec.source, settings, sandbox_problem=bwrap_problem)
                if spec.source.is_file()
                else None
            )
            if isinstance(fresh, JobSpec) and fresh.name == spec.name:
                spec = spec.model_copy(update={"limits": fresh.limits})
                plan.notes.append(f"{name}: limits from today's config and task file")
        if (
            metrics
            and status in LIMIT_STATUSES
            and not (limits_from_config and _limit_raised(recorded, spec, status))
        ):
            plan.kept[name] = metrics
            plan.notes.append(
                f"{name}: ended {status} and its limit was not raised "
                f"(`--limits-from-config` with a higher limit in config.toml); kept as it is"
            )
            continue
        plan.specs.append(spec)
        events, event_warnings = read_jsonl(job_dir / EVENTS)
        if event_warnings:  # rewrite whole, so the next append starts on a fresh line
            plan.notes += event_warnings
            write_atomic_sync(job_dir / EVENTS, event_lines(events))
        cut = cut_transcript(job_dir, spec.prompt)
        plan.notes += cut.warnings
        history = cut.history or []
        if cut.history:
            plan.histories[name] = cut.history
            if metrics:
                plan.priors[name] = metrics
            plan.notes.append(
                f"{name}: continuing from line {len(history)} of the transcript"
                + (f" ({cut.dropped} dropped after the last complete turn)" if cut.dropped else "")
            )
        else:
            plan.notes.append(f"{name}: no usable transcript; starting from the beginning")
        if has_tool_use(history[-1]) if history else False:
            plan.notes.append(f"{name}: warning: transcript ends on unanswered tool calls")
    return plan


def run_dir_behind(path: Path) -> Path:
    """The run directory ``path`` names: a link (``runs/latest``) is followed, so the run keeps its own
    id (its directory's name), never the link's."""
    if not path.is_symlink():
        return path
    target = Path(os.readlink(path))
    return target if target.is_absolute() else path.parent / target


def cmd_resume(args: argparse.Namespace) -> int:
    from ..compaction.compactor import Compactor
    from .batch import (
        config_path,
        console,
        execute,
        make_backend,
        run_meta,
        say,
        settings_from,
        spending,
        warn_fallbacks,
    )
    from .core import Batch

    run_dir = run_dir_behind(getattr(args, "run_dir", None) or args.resume)
    settings = parsed(lambda: settings_from(args, say=say), config_path(args))
    if not (run_dir / RUN_JSON).is_file():
        raise ConfigError([f"{run_dir / RUN_JSON}: not found; is {run_dir} a run directory (runs/<run-id>)?"])
    with hold_run_dir(run_dir):
        plan = plan_resume(
            run_dir, settings, getattr(args, "limits_from_config", False), getattr(args, "only", None)
        )
        keep_backend(run_dir, plan.meta, settings, getattr(args, "backend", None))
        if unsafe := [line for e in plan.errors if e.unsafe for line in e.problems]:
            raise ConfigError(unsafe)  # as `run`: no job starts beside one that could rewrite the others
        err_console = console(stderr=True)
        for note in plan.notes:
            err_console.print(Text(f"resume: {printable(note)}"), highlight=False, soft_wrap=True)
        if not plan.specs and not plan.errors:
            # run.json may lag behind the jobs' own files (the run was killed right after they ended)
            err_console.print(Text(printable(f"resume: no job of {run_dir} is left to run")), soft_wrap=True)
            batch = Batch(
                run_dir=run_dir,
                specs=[],
                model=None,  # type: ignore[arg-type]
                compactor=None,  # type: ignore[arg-type]
                summary_model=settings.summarizer.model,
                concurrency=1,
                kept=plan.kept,
                meta={**plan.meta, "resumed": True},
                handle_signals=False,
            )
            return execute(batch, settings, as_json=getattr(args, "json", False))
        claim(run_dir, len(plan.specs) + len(plan.errors))
        model, summarizer, backend = make_backend(settings, plan.specs)
        warn_fallbacks(plan.specs, model)
        batch = Batch(
            run_dir=run_dir,
            specs=plan.specs,
            errors=plan.errors,
            model=model,
            compactor=Compactor(summarizer),
            summary_model=settings.summarizer.model,
            concurrency=settings.runner.concurrency,
            histories=plan.histories,
            priors=plan.priors,
            kept=plan.kept,
            meta={**run_meta(settings, backend), "resumed": True},
            **spending(settings),
        )
        return execute(batch, settings, as_json=getattr(args, "json", False))


def keep_backend(run_dir: Path, meta: dict[str, Any], settings: Settings, asked: str | None) -> None:
    """A resumed run keeps the backend and models ``run.json`` names: it never switches to the offline
    model because the key is missing, and never mixes real costs with estimates."""
    where = run_dir / RUN_JSON
    backend = meta.get("backend")
    if backend not in ("anthropic", "offline"):
        if asked in ("anthropic", "offline"):
            backend = asked
        else:
            raise ConfigError(
                [
                    f'{where}: backend: expected "anthropic" or "offline", got {backend!r}; '
                    "say which with --backend"
                ]
            )
    if asked not in (None, "auto", backend):
        raise ConfigError([f"--backend {asked}: {where} ran on {backend}; a resumed run keeps its backend"])
    if backend == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError(
            [
                f"{where}: this run used the anthropic backend; resuming it needs ANTHROPIC_API_KEY "
                "(it is not switched to the offline model)"
            ]
        )
    settings.runner.backend = "anthropic" if backend == "anthropic" else "offline"
    for key, section, field_name in (
        ("model", settings.runner, "model"),
        ("summary_model", settings.summarizer, "model"),
    ):
        if isinstance(meta.get(key), str) and meta[key]:
            setattr(section, field_name, meta[key])
