"""The batch wiring every command shares: the settings a command runs with (which config file), the
model backend and summarizer, the services of a run, and executing a batch on its executor with the
live display and the final table. ``cli`` and ``resume`` both use it; it imports neither.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ..config import ConfigError, RunnerSection, Settings, load_settings
from ..jobs import JobSpec
from ..rundir.docs import BATCHES, run_document
from ..ui.report import clean_job, load_report, totals_line, totals_of
from ..ui.tables import fitting_table
from ..ui.terminal import json_printable, printable

if TYPE_CHECKING:  # the batch core pulls in the SDK (~1.5 s); `validate` and `report` do not need it
    from ..compaction.summarizer import Summarizer
    from ..models.base import Model
    from .core import Batch

DEFAULT_CONFIG = Path("config.toml")
# a terminal's own width; on a pipe, $COLUMNS or 80 (rich's default), so the run table on a pipe is the
# narrow one unless $COLUMNS makes room (every one-line message is printed with soft_wrap: never cut)


def console(*, stderr: bool = False) -> Console:
    """A console for the CLI's output: emoji codes off, so a report's ``b.py:100:`` or ``:thumbs_up:``
    is printed as written (rich would turn them into emoji); markup is escaped where text is data."""
    return Console(stderr=stderr, emoji=False)


out = console()
err = console(stderr=True)


def print_error(line: str, label: str = "error") -> None:
    """One problem as one line: user text is never read as rich markup, nor as terminal escapes, and never
    wrapped."""
    err.print(f"[red]{label}[/]: {escape(printable(line))}", highlight=False, soft_wrap=True)


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
    if getattr(args, "backend", None):
        settings.runner.backend = args.backend
    if getattr(args, "delivery", None):
        settings.runner.delivery = args.delivery
    if getattr(args, "output_dir", None):
        settings.runner.output_dir = args.output_dir
    if getattr(args, "executor", None):
        settings.runner.executor = args.executor
    if getattr(args, "ray_address", None):
        settings.runner.ray_address = args.ray_address
    if settings.runner.executor == "ray" and args.command in ("run", "resume"):
        from . import RAY_MISSING, ray_available

        if not ray_available():
            raise ConfigError([RAY_MISSING])
    return settings


ACTING_TOOLS = ("bash", "write", "edit")


def make_backend(settings: Settings, *, specs: Sequence[JobSpec] = ()) -> tuple[Model, Summarizer, str]:
    """The model for jobs (``specs``: those it will run; each job's delivery decides how its calls go)
    and the batch's Summarizer; says loudly when it is the offline model, and then, one line per job
    of ``specs`` that lists a tool that acts, that its prompt will not be carried out."""
    batch_jobs = any(spec.limits.delivery == "batch" for spec in specs)
    from ..models.adaptive import AdaptiveLimit
    from ..ui.display import API
    from .backend import build_backend

    backend = settings.runner.backend
    if backend == "auto":
        backend = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    if backend == "offline":
        err.print(
            "[bold yellow]Using the embedded offline model[/] (no ANTHROPIC_API_KEY, or backend = offline): "
            "a deterministic survey policy, not a language model; token counts are estimates.",
            soft_wrap=True,
        )
        if settings.runner.delivery == "batch" or batch_jobs:
            print_error(
                "delivery = batch has no effect on the offline model (it answers every call at once); "
                "it applies with backend = anthropic",
                label="warning",
            )
        for spec in specs:
            if acting := [t for t in spec.tools if t in ACTING_TOOLS]:
                print_error(
                    f"job {spec.name} ({shown_path(spec.source)}): the offline model only surveys the "
                    "workspace (read, glob, grep) and writes a report; it will not do what the prompt asks "
                    f"with {', '.join(acting)}; set ANTHROPIC_API_KEY to run it with a model",
                    label="warning",
                )
    elif not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError(["backend = anthropic needs ANTHROPIC_API_KEY in the environment"])
    limit = AdaptiveLimit(maximum=settings.runner.concurrency)

    def rate_limited() -> None:  # the batch backs off, and the live display counts it
        limit.rate_limited()
        API()

    model, summarizer = build_backend(
        backend,
        runner=settings.runner,
        summarizer=settings.summarizer,
        max_retries=settings.limits.max_retries,
        calls=limit,
        on_rate_limited=rate_limited,
        batch_jobs=batch_jobs,
    )
    API.batch_line = getattr(getattr(model, "batcher", None), "status_line", None)  # delivery = "batch"
    return model, summarizer, backend


def execute(batch: Batch, settings: Settings, as_json: bool = False) -> int:
    """Run a batch with the live display, print the table, return the exit code."""
    import anyio

    from ..ui.display import make_display
    from .core import BatchResult
    from .scheduler import run_batch

    if (batcher := getattr(batch.model, "batcher", None)) is not None:  # delivery = "batch": crash-safe
        batcher.open_journal(batch.run_dir / BATCHES)
    if settings.runner.executor == "ray":
        from .ray_driver import run_on_ray

        result: BatchResult = run_on_ray(batch, settings, make_display(err, batch.run_budget))
    else:
        result = anyio.run(run_batch, batch, make_display(err, batch.run_budget))
    shown = err if as_json else out
    rows = final_rows(batch.run_dir, result)
    shown.print(escape(printable(f"run {batch.run_dir}")), highlight=False, soft_wrap=True)  # never folded
    print_table(shown, rows)
    shown.print(totals_line({"totals": totals_of(rows), "jobs": rows}), highlight=False, soft_wrap=True)
    shown.print(
        escape(printable(f"files: {os.path.abspath(batch.run_dir)}")), highlight=False, soft_wrap=True
    )
    if as_json:
        print(json_printable(json.dumps(json_document(batch.run_dir), ensure_ascii=False, indent=1)))
    if result.fatal:
        print_error(result.fatal)
        return 2
    if result.interrupted:
        err.print(
            escape(
                printable(
                    "interrupted: running jobs were cancelled; "
                    f"`runner resume {batch.run_dir}` continues them"
                )
            ),
            highlight=False,
            soft_wrap=True,
        )
        return 130
    return 0 if result.ok else 1


def print_table(console: Console, rows: list[dict[str, Any]]) -> None:
    """The run table at the console's width; when that is the narrow one (no error column), each job's
    error follows it as a line of its own."""
    table = fitting_table(rows, None, console.width)
    console.print(table)
    if any(str(column.header) == "error" for column in table.columns):
        return
    for row in rows:
        if row.get("error"):
            console.print(
                escape(printable(f"{row.get('job', '?')}: {row['error']}")), highlight=False, soft_wrap=True
            )


def json_document(run_dir: Path) -> dict[str, Any]:
    """The run as ``--json`` prints it: ``run_dir`` (absolute), then run.json's fields and each job's
    metrics."""
    return {"run_dir": os.path.abspath(run_dir), **run_document(run_dir)}


def final_rows(run_dir: Path, result: Any) -> list[dict[str, Any]]:
    """The table's rows: run.json's, with every job this process ran as it ended in memory (what the
    table shows stays true when the disk refused run.json or metrics.json)."""
    try:
        rows = load_report(run_dir)["jobs"]
    except ConfigError:
        rows = []
    ran = {name: clean_job(r.document()) for name, r in result.results.items()}
    rows = [ran.pop(row["job"], row) for row in rows]
    return rows + list(ran.values())


def say(line: str) -> None:
    err.print(escape(printable(line)), highlight=False, soft_wrap=True)


def warn_fallbacks(specs: list[JobSpec], model: Model) -> None:
    """Say which jobs ask for a strategy this backend cannot run, and what they run instead."""
    from ..compaction.strategies import STRATEGIES

    for spec in specs:
        strategy = STRATEGIES[spec.limits.compaction]
        if strategy.server_side and not model.server_compaction:
            print_error(
                f'{spec.source}: limits.compaction: "{strategy.name}" needs the anthropic backend; job '
                f'{spec.name} uses "{strategy.fallback}" on the {model.name} model',
                label="warning",
            )


def spending(settings: Settings) -> dict[str, Any]:
    """The run's budget, price table and deadline, for a Batch."""
    from ..config import deadline_at
    from ..pricing import PriceTable
    from ..services import RunBudget

    return {
        "run_budget": RunBudget(settings.runner.max_cost_usd),
        "prices": PriceTable(settings.prices),
        "deadline": deadline_at(settings.runner.deadline, settings.runner.deadline_s),
    }


def run_meta(settings: Settings, backend: str) -> dict[str, Any]:
    return {
        "backend": backend,
        "model": settings.runner.model,
        "summary_model": settings.summarizer.model,
        "concurrency": settings.runner.concurrency,
    }


def shown_path(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when it is inside it, and
    absolute when that is ``/`` (``tmp/x`` from ``/`` reads as a path of its own)."""
    if Path.cwd() == Path(Path.cwd().anchor):
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
