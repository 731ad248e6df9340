"""What the commands share: the config file a command reads (``--config``, else the nearest
``config.toml``), its settings with the flags applied, the task files with the warnings about them, and
the lines that say what a prune removed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..config import ConfigError, RunnerSection, Settings, load_settings
from ..execution import RAY_MISSING, ray_available
from ..jobs import JobError, JobSpec, find_task_files, load_jobs, lookalike_task_files
from ..rundir.prune import PruneResult, human_bytes
from ..tools.job_budget import host_problems
from ..tools.sandbox import CALL_MEMORY_BYTES, MAX_PROCESSES, bwrap_problem
from ..ui.console import out, print_error, shown_path
from ..ui.report import plural
from ..ui.terminal import printable

DEFAULT_CONFIG = Path("config.toml")


def show(line: str, console: Console | None = None) -> None:
    """One line on ``console`` (by default this module's ``out``, read when called), as written: never
    markup nor terminal escapes, never wrapped."""
    (console or out).print(escape(printable(line)), highlight=False, soft_wrap=True)


def config_path(args: argparse.Namespace) -> Path | None:
    """``--config``, else the nearest config.toml from the jobs (or run) directory up, else ./config.toml."""
    path = getattr(args, "config", None)
    if path is None:
        targets = getattr(args, "targets", None) or [
            getattr(args, "run_dir", None) or getattr(args, "resume", None) or Path("jobs")
        ]
        path = find_config(targets[0])
    return path


def find_config(start: Path) -> Path | None:
    here = start.absolute()
    for directory in ([here] if here.is_dir() else []) + list(here.parents):
        candidate = directory / DEFAULT_CONFIG.name
        if candidate.exists():  # a FIFO or directory by that name is found, and refused by name
            return Path(shown_path(candidate))
    return DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None


def settings_from(args: argparse.Namespace, say: Any = None) -> Settings:
    """Settings from the config file :func:`config_path` finds (named through ``say``) and the flags.
    A relative ``output_dir`` from the file is relative to the file."""
    path = config_path(args)
    settings = load_settings(path)
    if say is not None:
        say(f"config: {path if path is not None else '(none: built-in defaults and RUNNER_* variables)'}")
    if path is not None and not settings.runner.output_dir.is_absolute():
        settings.runner.output_dir = Path(shown_path(path.absolute().parent / settings.runner.output_dir))
    if getattr(args, "concurrency", None) is not None:
        limit = RunnerSection.model_fields["concurrency"].metadata
        top = next((m.le for m in limit if getattr(m, "le", None) is not None), None)
        if args.concurrency < 1 or (top is not None and args.concurrency > top):
            raise ConfigError(
                [f"--concurrency: expected a whole number from 1 to {top}, got {args.concurrency}"]
            )
        settings.runner.concurrency = args.concurrency
    for flag in ("backend", "delivery", "output_dir", "executor", "ray_address"):  # each over [runner]'s
        if getattr(args, flag, None):
            setattr(settings.runner, flag, getattr(args, flag))
    if settings.runner.executor == "ray" and args.command in ("run", "resume") and not ray_available():
        raise ConfigError([RAY_MISSING])
    return settings


def no_task_files(targets: list[Path]) -> str:
    """The line ``run`` and ``validate`` say when ``targets`` hold no task file."""
    where = ", ".join(str(t) for t in targets or [Path("jobs")])
    return f"{where}: no task files found (expected *.toml files, one job a file)"


def collect(targets: list[Path], settings: Settings) -> tuple[list[JobSpec], list[JobError], list[str]]:
    targets = targets or [Path("jobs")]
    files, missing = find_task_files(targets)
    for path in lookalike_task_files(targets):
        print_error(f"{path}: not read: task files are *.toml (lower case), one job a file", label="warning")
    specs, errors = load_jobs(files, settings, sandbox_problem=bwrap_problem)
    return specs, errors, missing


def warn_unused_job_tables(
    args: argparse.Namespace, settings: Settings, specs: list[JobSpec], *, errors: list[JobError]
) -> None:
    """A ``[jobs.<name>]`` table that names no loaded job is most likely a typo: say so (not an error,
    since one config may serve several job directories)."""
    names = {s.name for s in specs} | {e.name for e in errors}
    source = config_path(args) or "environment"
    for name in sorted(set(settings.jobs) - names):
        print_error(
            f"{source}: jobs.{name}: no task file defines a job named {name!r}; these limits apply to "
            "nothing",
            label="warning",
        )


def warn_unpriced(settings: Settings, specs: list[JobSpec]) -> None:
    """One warning per model that the price table does not know (it is priced as the dearest family)."""
    from ..pricing import PriceTable

    table = PriceTable(settings.prices)
    users: dict[str, list[str]] = {}
    for spec in specs:
        users.setdefault(spec.model, []).append(f"job {spec.name}")
    users.setdefault(settings.summarizer.model, []).append("[summarizer] model")
    for model, who in users.items():
        if line := table.unpriced(model):
            print_error(
                f"{line} (used by {', '.join(who[:3])}{', ...' if len(who) > 3 else ''})", label="warning"
            )


def warn_host_fit(settings: Settings, specs: list[JobSpec]) -> None:
    """A warning line per budget that ``concurrency`` jobs' sandboxes, at once, would take past what
    this host has (its RAM, its pid_max): the local executor runs them all here."""
    if settings.runner.executor != "local":
        return
    for line in host_problems(
        settings.runner.concurrency,
        [(s.limits, s.tools) for s in specs],
        call_memory=CALL_MEMORY_BYTES,
        call_processes=MAX_PROCESSES,
    ):
        print_error(line, label="warning")


def report_prune(result: PruneResult, output_dir: Path, show: Any, *, quiet: bool = False) -> None:
    """One line per run removed (or kept though chosen), then the count and the bytes; ``quiet``: nothing
    when nothing was chosen."""
    if quiet and not result.removed and not result.kept:
        return
    verb = "would remove" if result.dry_run else "removed"
    for run in result.removed:
        written = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.written))
        show(f"{verb} {shown_path(run.path)} (last written {written}, {human_bytes(run.bytes)})")
    for path, why in result.kept:
        show(f"kept {shown_path(path)}: {why}")
    kept = result.runs - len(result.removed)
    show(
        f"prune {shown_path(output_dir)}: {verb} {plural(len(result.removed), 'run')}, "
        f"{'would free' if result.dry_run else 'freed'} {human_bytes(result.freed)}"
        f"{f' ({result.freed:,} bytes)' if result.freed >= 1000 else ''}; {kept} kept"
    )
