"""``runner run`` and ``runner resume``: a batch made from the task files (or from a run directory's
plan), its backend chosen and announced, run on its executor with the live display, its table printed;
the exit code from how it ended.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from ..config import ConfigError, Settings
from ..execution.batch import json_document, run_meta, spending
from ..jobs import JobSpec, parsed
from ..rundir.docs import RUN_JSON
from ..rundir.lock import hold_run_dir
from ..rundir.prune import prune
from ..rundir.reserve import claim
from ..ui.console import err, out, print_document, print_error, print_table, say
from ..ui.report import totals_line, totals_of
from ..ui.terminal import json_printable, printable
from .common import (
    collect,
    config_path,
    no_task_files,
    report_prune,
    settings_from,
    show,
    warn_host_fit,
    warn_unpriced,
    warn_unused_job_tables,
)

if TYPE_CHECKING:
    from ..execution.batch import Backend
    from ..execution.core import Batch
    from ..models.base import Model


def cmd_run(args: argparse.Namespace) -> int:
    settings = parsed(lambda: settings_from(args, say=say), config_path(args))
    specs, errors, missing = collect(args.targets, settings)
    if missing:
        raise ConfigError(missing)
    unsafe = [line for e in errors if e.unsafe or e.duplicate for line in e.problems]
    # a job there could read and rewrite the other jobs' files, or the system's, or two task files claim one
    # name (which job is which would be a guess): nothing starts
    if unsafe:
        raise ConfigError(unsafe)
    warn_unused_job_tables(args, settings, specs, errors=errors)
    if args.only:
        known = {s.name for s in specs} | {e.name for e in errors}
        unknown = [n for n in args.only if n not in known]
        if unknown:
            raise ConfigError(
                [f"--only: no job named {n!r} (known: {', '.join(sorted(known))})" for n in unknown]
            )
        specs = [s for s in specs if s.name in args.only]
        errors = [e for e in errors if e.name in args.only]
    if not specs and not errors:
        raise ConfigError([no_task_files(args.targets)])
    if errors:  # as `validate`: every problem of every bad task file (file, field), and nothing starts
        raise ConfigError([line for e in errors for line in e.problems])
    if args.fresh:
        specs = [spec.run_fresh() for spec in specs]
    from ..compaction.compactor import Compactor
    from ..execution.core import Batch, new_run_id
    from ..rundir.store import link_latest

    backend = backend_for(settings, specs)
    warn_fallbacks(specs, backend.model)
    warn_unpriced(settings, specs)
    warn_host_fit(settings, specs)
    run_dir = settings.runner.output_dir / new_run_id()
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise ConfigError(
            [f"{settings.runner.output_dir}: cannot create the run directory {run_dir}: {e.strerror or e}"]
        ) from None
    batch = Batch(
        run_dir=run_dir,
        specs=specs,
        model=backend.model,
        compactor=Compactor(backend.summarizer),
        summary_model=settings.summarizer.model,
        concurrency=settings.runner.concurrency,
        meta=run_meta(settings, backend.name),
        **spending(settings),
    )
    if problem := link_latest(run_dir):
        print_error(problem, label="warning")
    with hold_run_dir(run_dir):
        claim(run_dir, len(specs))
        code = execute(batch, settings, as_json=args.json)
    say_incremental(run_dir)
    # this run is `latest`: never among those removed
    if settings.runner.keep_runs is not None and code != 130:
        report_prune(
            prune(settings.runner.output_dir, keep=settings.runner.keep_runs),
            settings.runner.output_dir,
            say,
            quiet=True,
        )
    return code


def cmd_resume(args: argparse.Namespace) -> int:
    from ..compaction.compactor import Compactor
    from ..execution.backend import keep_backend
    from ..execution.core import Batch
    from ..execution.resume import plan_resume, run_dir_behind

    run_dir = run_dir_behind(getattr(args, "run_dir", None) or args.resume)
    settings = parsed(lambda: settings_from(args, say=say), config_path(args))
    if not (run_dir / RUN_JSON).is_file():
        raise ConfigError([f"{run_dir / RUN_JSON}: not found; is {run_dir} a run directory (runs/<run-id>)?"])
    as_json = getattr(args, "json", False)
    with hold_run_dir(run_dir):
        plan = plan_resume(
            run_dir, settings, getattr(args, "limits_from_config", False), only=getattr(args, "only", None)
        )
        if unsafe := [line for e in plan.errors if e.unsafe for line in e.problems]:
            raise ConfigError(unsafe)  # as `run`: no job starts beside one that could rewrite the others
        for note in plan.notes:
            err.print(Text(f"resume: {printable(note)}"), highlight=False, soft_wrap=True)
        if not plan.specs and not plan.errors:
            # run.json may lag behind the jobs' own files (the run was killed right after they ended)
            err.print(Text(printable(f"resume: no job of {run_dir} is left to run")), soft_wrap=True)
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
            return execute(batch, settings, as_json=as_json)
        keep_backend(  # only a run with jobs left needs its backend (and, for the API, the key)
            run_dir,
            plan.meta,
            settings,
            asked=getattr(args, "backend", None),
            asked_delivery=getattr(args, "delivery", None),
        )
        claim(run_dir, len(plan.specs) + len(plan.errors))
        backend = backend_for(settings, plan.specs)
        warn_fallbacks(plan.specs, backend.model)
        batch = Batch(
            run_dir=run_dir,
            specs=plan.specs,
            errors=plan.errors,
            model=backend.model,
            compactor=Compactor(backend.summarizer),
            summary_model=settings.summarizer.model,
            concurrency=settings.runner.concurrency,
            histories=plan.histories,
            priors=plan.priors,
            kept=plan.kept,
            meta={**run_meta(settings, backend.name), "resumed": True},
            **spending(settings),
        )
        return execute(batch, settings, as_json=as_json)


def backend_for(settings: Settings, specs: list[JobSpec]) -> Backend:
    """The run's model backend; says loudly when it is the offline model, and then what it will not do
    for ``specs`` (one warning a line)."""
    from ..execution.backend import backend_name, stand_in_warnings
    from ..execution.batch import make_backend

    name = backend_name(settings)
    if name == "offline":
        err.print(
            "[bold yellow]Using the embedded offline model[/] (no ANTHROPIC_API_KEY, or backend = offline): "
            "a deterministic survey policy, not a language model; token counts are estimates.",
            soft_wrap=True,
        )
        for line in stand_in_warnings(settings, specs):
            print_error(line, label="warning")
    return make_backend(settings, name, specs=specs)


def warn_fallbacks(specs: list[JobSpec], model: Model) -> None:
    """Say which jobs ask for a strategy this backend cannot run, and what they run instead."""
    from ..execution.batch import fallback_warnings

    for line in fallback_warnings(specs, model):
        print_error(line, label="warning")


def execute(batch: Batch, settings: Settings, *, as_json: bool = False) -> int:
    """Run a batch with the live display, print the table, return the exit code."""
    from ..execution.batch import final_rows, run_on_executor
    from ..ui.display import make_display

    result = run_on_executor(batch, settings, make_display(err, batch.run_budget))
    shown = err if as_json else out
    rows = final_rows(batch.run_dir, result)
    show(f"run {batch.run_dir}", shown)  # never folded
    print_table(shown, rows)
    shown.print(totals_line({"totals": totals_of(rows), "jobs": rows}), highlight=False, soft_wrap=True)
    show(f"files: {os.path.abspath(batch.run_dir)}", shown)
    if as_json:
        document = json_document(batch.run_dir)
        print_document(json_printable(json.dumps(document, ensure_ascii=False, indent=1)))
    if result.fatal:
        print_error(result.fatal)
        return 2
    if result.interrupted:
        say(f"interrupted: running jobs were cancelled; `runner resume {batch.run_dir}` continues them")
        return 130
    return 0 if result.ok else 1


def say_incremental(run_dir: Path) -> None:
    """One line on stderr per incremental job: its baseline and the files changed, or why it ran fresh."""
    from ..agent.incremental import summary_line
    from ..rundir.docs import load_run

    for job in load_run(run_dir, with_specs=False).jobs:
        if job.metrics.incremental is not None:
            say(summary_line(job.name, job.metrics.incremental))
