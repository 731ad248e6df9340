"""``runner run / validate / resume / report / emulate``.

Exit codes: 0 every job succeeded, 1 a job did not, 2 bad configuration or usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from .config import ConfigError, RunnerSection, Settings, load_settings
from .jobs import JobError, JobSpec, find_task_files, load_jobs
from .report import clean_job, load_report, totals_line, totals_of
from .reserve import claim
from .rundir import hold_run_dir
from .rundocs import RUN_JSON, Status, is_run_dir, run_document
from .tables import fitting_table

if TYPE_CHECKING:  # the scheduler pulls in the SDK (~1.5 s); `validate` and `report` do not need it
    from .compactor.summarizer import Summarizer
    from .models.base import Model
    from .scheduler import Batch

DEFAULT_CONFIG = Path("config.toml")
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_error(line: str, label: str = "error") -> None:
    """One problem as one line: user text is never read as rich markup, and never wrapped."""
    err.print(f"[red]{label}[/]: {escape(line)}", highlight=False, soft_wrap=True)


EXIT_CODES = """exit codes:
  0    every job succeeded
  1    a job did not succeed
  2    bad configuration or usage
  130  interrupted (Ctrl-C)"""
EXIT_CODES_VIEW = """exit codes:
  0    the pages were written (or the server stopped)
  2    RUN_DIR is not a run directory, or bad usage"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runner")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner", description="Run batches of agent jobs concurrently.",
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"runner {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)

    class Sub:  # every subcommand lists its exit codes under its --help
        @staticmethod
        def add_parser(name: str, epilog: str = EXIT_CODES, **kwargs: Any) -> argparse.ArgumentParser:
            return subparsers.add_parser(name, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
                                         description=kwargs.get("help"), **kwargs)

    sub = Sub()

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", type=Path, default=None,
                       help="config file (default: ./config.toml when it exists)")

    run = sub.add_parser("run", help="run every task file in JOBS_DIR (default: jobs/)")
    run.add_argument("targets", nargs="*", type=Path, metavar="JOBS_DIR_OR_FILE",
                     help="task files (*.toml) or directories of them (default: jobs)")
    common(run)
    run.add_argument("--concurrency", type=int, help="jobs at once (overrides [runner] concurrency)")
    run.add_argument("--backend", choices=["auto", "anthropic", "offline"], help="model backend")
    run.add_argument("--only", action="append", metavar="NAME", help="run only this job (repeatable)")
    run.add_argument("--output-dir", type=Path, help="where runs/<run-id> goes (overrides [runner] output_dir)")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="same as `runner resume RUN_DIR`")
    run.add_argument("--json", action="store_true",
                     help="print the run as one JSON document on stdout at the end (the table goes to stderr)")
    executor_flags(run)

    validate = sub.add_parser("validate", help="check config and task files; run nothing", epilog="""exit codes:
  0    every file is valid
  2    a problem was found (each is listed: file, field, expectation)""")
    validate.add_argument("targets", nargs="*", type=Path, metavar="JOBS_DIR_OR_FILE",
                          help="task files (*.toml) or directories of them (default: jobs)")
    common(validate)

    resume = sub.add_parser("resume", help="rerun the jobs of RUN_DIR that did not succeed")
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory, runs/<run-id>")
    common(resume)
    resume.add_argument("--backend", choices=["auto", "anthropic", "offline"],
                        help="must match the run's own backend (a resumed run keeps it)")
    resume.add_argument("--concurrency", type=int)
    executor_flags(resume)
    resume.add_argument("--limits-from-config", action="store_true",
                        help="use the limits of today's config and task files (default: the run's own)")
    resume.add_argument("--only", action="append", metavar="NAME", help="resume only this job (repeatable)")

    report = sub.add_parser("report", help="print the table of a finished or running run", epilog="""exit codes:
  0    every job of the run succeeded
  1    a job did not (or has not yet)
  2    RUN_DIR is not a run directory""")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory, runs/<run-id>")
    report.add_argument("--json", action="store_true",
                        help="print the run as one JSON document: run.json's fields and each job's metrics")

    view = sub.add_parser("view", help="write the run as HTML that opens from disk (no network)",
                          epilog=EXIT_CODES_VIEW)
    view.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory, runs/<run-id>")
    view.add_argument("--out", type=Path, metavar="FILE",
                      help="the index page (default: RUN_DIR/index.html; job pages go beside it)")
    view.add_argument("--serve", action="store_true", help="serve the pages live on loopback instead of writing them")
    view.add_argument("--port", type=int, default=8000, help="port for --serve (default: 8000)")

    emulate = sub.add_parser("emulate", help="serve the local Messages-API emulator", epilog="""exit codes:
  0    the server stopped
  2    bad emulator configuration""")
    emulate.add_argument("--host", default="127.0.0.1")
    emulate.add_argument("--port", type=int, default=8765)
    emulate.add_argument("--config", type=Path, default=None, help="emulator settings (TOML)")
    return parser


def executor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=["local", "ray"], help="where jobs run (overrides [runner] executor)")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="join this Ray cluster (`auto`, or host:port); default: start a local Ray instance")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "validate":
            return cmd_validate(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "view":
            return cmd_view(args)
        if args.command == "emulate":
            serve = _optional("runner.emulator.cli", "serve", "runner emulate")
            return serve(args)
        if args.command == "resume" or (args.command == "run" and args.resume):
            cmd_resume = _optional("runner.resume", "cmd_resume", "runner resume")
            return cmd_resume(args)
        return cmd_run(args)
    except ConfigError as e:
        for line in e.problems:
            print_error(line)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


def _optional(module: str, attr: str, command: str) -> Any:
    """A command implemented in a module this installation may not have: a clear error, not a traceback."""
    import importlib

    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name):
            raise
        raise ConfigError([f"{command}: not available in this installation (module {module} is missing)"]) from None


def config_path(args: argparse.Namespace) -> Path | None:
    """``--config``, else the nearest config.toml from the jobs (or run) directory up, else ./config.toml."""
    path = getattr(args, "config", None)
    if path is None:
        targets = getattr(args, "targets", None) or [getattr(args, "run_dir", None) or
                                                     getattr(args, "resume", None) or Path("jobs")]
        path = find_config(targets[0])
    return path


def find_config(start: Path) -> Path | None:
    here = start.absolute()
    for directory in ([here] if here.is_dir() else []) + list(here.parents):
        candidate = directory / DEFAULT_CONFIG.name
        if candidate.exists():  # a FIFO or directory by that name is found, and refused by name
            return Path(_shown(candidate))
    return DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None


def settings_from(args: argparse.Namespace, say: Any = None) -> Settings:
    """Settings from the config file :func:`config_path` finds (named through ``say``) and the flags.
    A relative ``output_dir`` from the file is relative to the file."""
    path = config_path(args)
    settings = load_settings(path)
    if say is not None:
        say(f"config: {path if path is not None else '(none: built-in defaults and RUNNER_* variables)'}")
    if path is not None and not settings.runner.output_dir.is_absolute():
        settings.runner.output_dir = Path(_shown(path.absolute().parent / settings.runner.output_dir))
    if getattr(args, "concurrency", None) is not None:
        limit = RunnerSection.model_fields["concurrency"].metadata
        top = next((m.le for m in limit if getattr(m, "le", None) is not None), None)
        if args.concurrency < 1 or (top is not None and args.concurrency > top):
            raise ConfigError([f"--concurrency: expected a whole number from 1 to {top}, got {args.concurrency}"])
        settings.runner.concurrency = args.concurrency
    if getattr(args, "backend", None):
        settings.runner.backend = args.backend
    if getattr(args, "output_dir", None):
        settings.runner.output_dir = args.output_dir
    if getattr(args, "executor", None):
        settings.runner.executor = args.executor
    if getattr(args, "ray_address", None):
        settings.runner.ray_address = args.ray_address
    if settings.runner.executor == "ray" and args.command in ("run", "resume"):
        from .executors import RAY_MISSING, ray_available

        if not ray_available():
            raise ConfigError([RAY_MISSING])
    return settings


def collect(targets: list[Path], settings: Settings) -> tuple[list[JobSpec], list[JobError], list[str]]:
    files, missing = find_task_files(targets or [Path("jobs")])
    specs, errors = load_jobs(files, settings)
    return specs, errors, missing


def warn_unused_job_tables(args: argparse.Namespace, settings: Settings, specs: list[JobSpec],
                           errors: list[JobError]) -> None:
    """A ``[jobs.<name>]`` table that names no loaded job is most likely a typo: say so (not an error,
    since one config may serve several job directories)."""
    names = {s.name for s in specs} | {e.name for e in errors}
    source = config_path(args) or "environment"
    for name in sorted(set(settings.jobs) - names):
        print_error(f"{source}: jobs.{name}: no task file defines a job named {name!r}; these limits apply to "
                    "nothing", label="warning")


def cmd_validate(args: argparse.Namespace) -> int:
    settings = settings_from(args, say=lambda line: out.print(escape(line), highlight=False, soft_wrap=True))
    specs, errors, missing = collect(args.targets, settings)
    warn_unused_job_tables(args, settings, specs, errors)
    for line in missing:
        print_error(line)
    for error in errors:
        for line in error.problems:
            print_error(line)
    for spec in specs:
        out.print(escape(f"ok     {spec.name} ({_shown(spec.source)}): workspace {spec.workspace}, "
                         f"tools {', '.join(spec.tools)}"), highlight=False, soft_wrap=True)
    if not specs and not errors:
        print_error("no task files found")
        return 2
    return 2 if errors or missing else 0


def make_backend(settings: Settings) -> tuple[Model, Summarizer, str]:
    """The model for jobs and the batch's Summarizer; says loudly when it is the offline model."""
    from .compactor.summarizer import Summarizer

    backend = settings.runner.backend
    if backend == "auto":
        backend = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    s = settings.summarizer
    if backend == "offline":
        from .models.offline import OfflineModel

        err.print("[bold yellow]Using the embedded offline model[/] (no ANTHROPIC_API_KEY, or backend = offline): "
                  "a deterministic survey policy, not a language model; token counts are estimates.")
        model: Model = OfflineModel()
        summarizer = Summarizer(None, s.model, max_concurrent=s.max_concurrent,
                                requests_per_minute=s.requests_per_minute)
        return model, summarizer, backend
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError(["backend = anthropic needs ANTHROPIC_API_KEY in the environment"])
    from .display import API
    from .models.adaptive import AdaptiveLimit, AdaptiveModel
    from .models.anthropic import AnthropicModel

    limit = AdaptiveLimit(maximum=settings.runner.concurrency)

    def rate_limited() -> None:  # the batch backs off, and the live display counts it
        limit.rate_limited()
        API()

    raw = AnthropicModel(max_retries=settings.limits.max_retries, timeout=settings.runner.request_timeout_s,
                         on_rate_limited=rate_limited, shards=-(-settings.runner.concurrency // 25))
    model = AdaptiveModel(raw, limit)
    summarizer = Summarizer(raw, s.model, max_concurrent=s.max_concurrent,
                            requests_per_minute=s.requests_per_minute, max_input_chars=s.max_input_chars,
                            max_output_tokens=s.max_output_tokens)
    return model, summarizer, backend


def execute(batch: Batch, settings: Settings, as_json: bool = False) -> int:
    """Run a batch with the live display, print the table, return the exit code."""
    import anyio

    from .display import make_display
    from .scheduler import BatchResult, run_batch
    if settings.runner.executor == "ray":
        from .executors.ray_driver import run_on_ray

        result: BatchResult = run_on_ray(batch, settings, make_display(err, batch.run_budget))
    else:
        result = anyio.run(run_batch, batch, make_display(err, batch.run_budget))
    shown = err if as_json else out
    rows = final_rows(batch.run_dir, result)
    shown.print(fitting_table(rows, escape(f"run {batch.run_dir}"), shown.width))
    shown.print(totals_line({"totals": totals_of(rows)}), highlight=False)
    shown.print(escape(f"files: {batch.run_dir}"), highlight=False, soft_wrap=True)
    if as_json:
        print(json.dumps(run_document(batch.run_dir), ensure_ascii=False, indent=1))
    if result.fatal:
        print_error(result.fatal)
        return 2
    if result.interrupted:
        err.print("interrupted: running jobs were cancelled; `runner resume` continues them")
        return 130
    return 0 if result.ok else 1


def final_rows(run_dir: Path, result: Any) -> list[dict[str, Any]]:
    """The table's rows: run.json's, with every job this process ran as it ended in memory (what the
    table shows stays true when the disk refused run.json or metrics.json)."""
    try:
        rows = load_report(run_dir)["jobs"]
    except ConfigError:
        rows = []
    ran = {name: clean_job(r.to_json()) for name, r in result.results.items()}
    rows = [ran.pop(row["job"], row) for row in rows]
    return rows + list(ran.values())


def say(line: str) -> None:
    err.print(escape(line), highlight=False, soft_wrap=True)


def cmd_run(args: argparse.Namespace) -> int:
    settings = settings_from(args, say=say)
    specs, errors, missing = collect(args.targets, settings)
    if missing:
        raise ConfigError(missing)
    warn_unused_job_tables(args, settings, specs, errors)
    if args.only:
        known = {s.name for s in specs} | {e.name for e in errors}
        unknown = [n for n in args.only if n not in known]
        if unknown:
            raise ConfigError([f"--only: no job named {n!r} (known: {', '.join(sorted(known))})" for n in unknown])
        specs = [s for s in specs if s.name in args.only]
        errors = [e for e in errors if e.name in args.only]
    if not specs and not errors:
        raise ConfigError(["no task files found (expected *.toml files in the jobs directory)"])
    for error in errors:
        print_error(error.message, label=f"job {escape(error.name)} will fail")
    from .compactor.compactor import Compactor
    from .scheduler import Batch, new_run_id
    from .store import link_latest

    model, summarizer, backend = make_backend(settings)
    warn_fallbacks(specs, model)
    run_dir = settings.runner.output_dir / new_run_id()
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise ConfigError([f"{settings.runner.output_dir}: cannot create the run directory {run_dir}: "
                           f"{e.strerror or e}"]) from None
    batch = Batch(run_dir=run_dir, specs=specs, errors=errors, model=model, compactor=Compactor(summarizer),
                  summary_model=settings.summarizer.model, concurrency=settings.runner.concurrency,
                  meta=_meta(settings, backend), **spending(settings))
    link_latest(run_dir)
    with hold_run_dir(run_dir):
        claim(run_dir, len(specs) + len(errors))
        return execute(batch, settings, as_json=args.json)


def _shown(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def warn_fallbacks(specs: list[JobSpec], model: Model) -> None:
    """Say which jobs ask for a strategy this backend cannot run, and what they run instead."""
    from .compactor.strategies import STRATEGIES

    for spec in specs:
        strategy = STRATEGIES[spec.limits.compaction]
        if strategy.server_side and not model.server_compaction:
            print_error(f"{spec.source}: limits.compaction: \"{strategy.name}\" needs the anthropic backend; job "
                        f"{spec.name} uses \"{strategy.fallback}\" on the {model.name} model", label="warning")


def spending(settings: Settings) -> dict[str, Any]:
    """The run's budget and price table, for a Batch."""
    from .pricing import PriceTable
    from .services import RunBudget

    return {"run_budget": RunBudget(settings.runner.max_cost_usd), "prices": PriceTable(settings.prices)}


def _meta(settings: Settings, backend: str) -> dict[str, Any]:
    return {"backend": backend, "model": settings.runner.model, "summary_model": settings.summarizer.model,
            "concurrency": settings.runner.concurrency}


def cmd_report(args: argparse.Namespace) -> int:
    if args.json:
        return report_json(args.run_dir)
    document = load_report(args.run_dir)
    out.print(fitting_table(document["jobs"], escape(f"run {args.run_dir} ({document['state']})"), out.width))
    totals = document["totals"]
    out.print(totals_line(document), highlight=False)
    return 0 if totals["jobs"] and totals.get(Status.SUCCEEDED, 0) == totals["jobs"] else 1


def report_json(run_dir: Path) -> int:
    if not is_run_dir(run_dir):
        raise ConfigError([f"{run_dir / RUN_JSON}: not found; is {run_dir} a run directory (runs/<run-id>)?"])
    document = run_document(run_dir)
    print(json.dumps(document, ensure_ascii=False, indent=1))
    totals = document["totals"]
    return 0 if totals[Status.SUCCEEDED] == totals["jobs"] else 1


def cmd_view(args: argparse.Namespace) -> int:
    from .viewer import write_view

    if not is_run_dir(args.run_dir):
        raise ConfigError([f"{args.run_dir / RUN_JSON}: not found; is {args.run_dir} a run directory "
                           "(runs/<run-id>)?"])
    if args.serve:
        from .viewer.serve import serve

        return serve(args.run_dir, args.port)
    result = write_view(args.run_dir, args.out)
    for problem in result.problems:
        print_error(problem, label="warning")
    out.print(escape(f"wrote {result.index} ({result.pages_written} job pages updated in {result.pages_dir})"),
              highlight=False, soft_wrap=True)
    out.print(escape(f"open: file://{result.index.resolve()}"), highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
