"""``runner run / validate / resume / report / diff / view / prune / replay / emulate``.

Exit codes: 0 every job succeeded, 1 a job did not, 2 bad configuration or usage, 130 interrupted.

Guarantees:
- A user's or the environment's error is one line naming the file, flag or address and what was
  expected, exit 2; never a traceback.
- A closed stdout is no error of the command (``runner report | head``): output stops, the command
  goes on and exits with its own code (``ui/console.py``); a run goes on and writes all its files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from .commands.batch import cmd_resume, cmd_run
from .commands.common import (
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
from .config import ConfigError, Settings
from .execution.batch import json_document
from .jobs import parsed
from .rundir.docs import INDEX, RUN_JSON, RunState, Status, is_run_dir
from .rundir.prune import parse_age, prune
from .ui.console import (
    err,
    out,
    print_document,
    print_error,
    print_table,
    say,
    shown_path,
    stdout_closed,
    stdout_gone,
)
from .ui.report import load_report, plural, totals_line
from .ui.terminal import json_printable, printable

EXIT_CODES = """exit codes:
  0    every job succeeded
  1    a job did not succeed
  2    bad configuration or usage
  130  interrupted (Ctrl-C or SIGTERM)

A closed stdout (runner report | head) is not an error: output stops, the exit code is the command's."""
# server: the API compacts, and a replay has none; clear: the API's context editing, replayed as the
# emulator serves it (runner.compaction.clearing)
REPLAY_STRATEGIES = ("client", "clear", "mask", "off")
EXIT_CODES_VIEW = """exit codes:
  0    the pages were written (or the server stopped)
  2    RUN_DIR is not a run directory, a page or directory cannot be written, the port cannot be
       listened on, or bad usage"""


def port_number(text: str) -> int:
    """``--port``: a whole number from 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number from 0 (any free one) to 65535, got {text!r}"
        )
    return port


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runner")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runner",
        description="Run batches of agent jobs concurrently.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"runner {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)

    def sub(name: str, epilog: str = EXIT_CODES, **kwargs: Any) -> argparse.ArgumentParser:
        """A subcommand, listing its exit codes under its --help."""
        return subparsers.add_parser(
            name,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description=kwargs.get("help"),
            **kwargs,
        )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            type=Path,
            default=None,
            help="config file (default: the nearest config.toml in the jobs or run directory or a "
            "directory above it, else ./config.toml when it exists)",
        )

    def task_files(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "targets",
            nargs="*",
            type=Path,
            metavar="JOBS_DIR_OR_FILE",
            help="task files (*.toml) or directories of them (default: jobs)",
        )
        common(p)

    def run_dir_or_latest(p: argparse.ArgumentParser, latest: str) -> None:
        common(p)
        p.add_argument(
            "run_dir",
            type=Path,
            metavar="RUN_DIR",
            nargs="?",
            default=None,
            help=f"a run directory, runs/<run-id> (default: the latest run, {latest})",
        )

    run_json = "print the run as one JSON document on stdout at the end (the table goes to stderr)"
    run = sub("run", help="run every task file in JOBS_DIR (default: jobs/)")
    task_files(run)
    run.add_argument("--concurrency", type=int, help="jobs at once (overrides [runner] concurrency)")
    run.add_argument("--backend", choices=["auto", "anthropic", "offline"], help="model backend")
    run.add_argument("--only", action="append", metavar="NAME", help="run only this job (repeatable)")
    run.add_argument(
        "--output-dir", type=Path, help="where runs/<run-id> goes (overrides [runner] output_dir)"
    )
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="same as `runner resume RUN_DIR`")
    run.add_argument("--json", action="store_true", help=run_json)
    run.add_argument(
        "--fresh",
        action="store_true",
        help="run incremental jobs in full: no baseline (they still write their manifest)",
    )
    executor_flags(run)

    validate = sub(
        "validate",
        help="check config and task files; run nothing",
        epilog="""exit codes:
  0    every file is valid
  2    a problem was found (each is listed: file, field, expectation)""",
    )
    task_files(validate)

    resume = sub("resume", help="rerun the jobs of RUN_DIR that did not succeed")
    resume.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory, runs/<run-id>")
    common(resume)
    resume.add_argument(
        "--backend",
        choices=["auto", "anthropic", "offline"],
        help="must match the run's own backend (a resumed run keeps it)",
    )
    resume.add_argument("--concurrency", type=int, help="jobs at once (overrides [runner] concurrency)")
    executor_flags(resume)
    resume.add_argument(
        "--limits-from-config",
        action="store_true",
        help="use the limits of today's config and task files (default: the run's own)",
    )
    resume.add_argument("--only", action="append", metavar="NAME", help="resume only this job (repeatable)")
    resume.add_argument("--json", action="store_true", help=run_json)

    report = sub(
        "report",
        help="print the table of a finished or running run",
        epilog="""exit codes:
  0    every job of the run succeeded
  1    a job did not (or has not yet)
  2    RUN_DIR is not a run directory""",
    )
    run_dir_or_latest(report, "<output_dir>/latest of the config.toml `run` would use")
    report.add_argument(
        "--json",
        action="store_true",
        help="print the run as one JSON document: run.json's fields and each job's metrics",
    )

    diff = sub(
        "diff",
        help="what changed in each job's report from RUN_A to RUN_B",
        epilog="""exit codes:
  0    no job's report changed
  1    a job's report changed (or a job is in one run only)
  2    RUN_A or RUN_B is not a run directory, or bad usage""",
    )
    diff.add_argument("run_a", type=Path, metavar="RUN_A", help="the earlier run directory, runs/<run-id>")
    diff.add_argument("run_b", type=Path, metavar="RUN_B", help="the later run directory (runs/latest)")
    diff.add_argument("--json", action="store_true", help="print the comparison as one JSON document")

    view = sub("view", help="write the run as HTML that opens from disk (no network)", epilog=EXIT_CODES_VIEW)
    run_dir_or_latest(view, "as for `runner report`")
    view.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the index page (default: RUN_DIR/index.html; job pages go beside it)",
    )
    view.add_argument(
        "--serve", action="store_true", help="serve the pages live on loopback instead of writing them"
    )
    view.add_argument(
        "--port", type=port_number, default=8000, help="port for --serve (default: 8000; 0: any free one)"
    )

    prune = sub(
        "prune",
        help="remove old runs from the output directory (never one being written, "
        "nor the one `latest` points at)",
        epilog="""exit codes:
  0    done (also when nothing was old enough to remove)
  2    bad usage, or nothing to select by (no --keep, no --older-than, no [runner] keep_runs)""",
    )
    common(prune)
    prune.add_argument(
        "--keep",
        type=int,
        metavar="N",
        help="keep the N newest runs, remove the others (default: [runner] keep_runs, unless "
        "--older-than is given)",
    )
    prune.add_argument(
        "--older-than",
        metavar="AGE",
        help="remove only runs last written longer ago than AGE: a number and s, m, h, d or w (30d)",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    prune.add_argument("--output-dir", type=Path, help="the runs directory (default: [runner] output_dir)")

    replay = sub(
        "replay",
        help="feed recorded agent histories through the Compactor and judge what each request kept",
        epilog="""exit codes:
  0    every history was replayed
  2    a file is not a history (its file and line named), or bad usage""",
    )
    common(replay)
    replay.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="a history: a JSONL file as in tests/recorded/trajectories/ (a header line, then one message a "
        "line) or a job's transcript.jsonl; a directory: its *.jsonl files (a job's directory: its "
        "transcript.jsonl)",
    )
    replay.add_argument(
        "--context-tokens",
        type=int,
        metavar="N",
        help="the window in tokens (sets context_token_limit, and context_char_limit to 4 N); "
        "default: the config's limits",
    )
    replay.add_argument(
        "--compaction",
        choices=REPLAY_STRATEGIES,
        help="the strategy (default: [limits] compaction, client unless the config says otherwise)",
    )
    replay.add_argument("--json", action="store_true", help="print one JSON document: files and totals")
    replay.add_argument(
        "--dump",
        type=Path,
        metavar="DIR",
        help="write each prepared request body as DIR/<file stem>/<turn>.json",
    )

    emulate = sub(
        "emulate",
        help="serve the local Messages-API emulator",
        epilog="""exit codes:
  0    the server stopped
  2    bad emulator configuration, a host that is not loopback, the port cannot be listened on
       (in use, say), or bad usage
  130  interrupted (Ctrl-C) before the server started""",
    )
    emulate.add_argument(
        "--host", default="127.0.0.1", help="loopback address to listen on (default: 127.0.0.1)"
    )
    emulate.add_argument(
        "--port", type=port_number, default=8765, help="port to listen on (default: 8765; 0: any free one)"
    )
    emulate.add_argument("--config", type=Path, default=None, help="emulator settings (TOML)")
    return parser


def executor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--delivery",
        choices=["live", "batch"],
        help="model calls at once, or as Message Batches at half price (overrides [runner] delivery)",
    )
    p.add_argument(
        "--executor", choices=["local", "ray"], help="where jobs run (overrides [runner] executor)"
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="join this Ray cluster (`auto`, or host:port); default: start a local Ray instance",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = dispatch(args)
    except ConfigError as e:
        for line in e.problems:
            print_error(line)
        code = 2
    except KeyboardInterrupt:
        err.print("interrupted")
        code = 130
    except BrokenPipeError as e:  # a write to stdout that no console caught: the reader has gone, no error
        if stdout_closed():
            stdout_gone()
            code = 0
        else:  # another pipe broke (a worker's, a socket): the command failed
            print_error(f"{type(e).__name__}: {e}")
            code = 1
    try:
        sys.stdout.flush()  # here, not at exit, where a broken pipe would be reported
    except BrokenPipeError:
        stdout_gone()
    return code


def dispatch(args: argparse.Namespace) -> int:
    """The command ``args`` name, run; its exit code."""
    if args.command == "emulate":  # imported only here: the emulator's server is its own
        from .emulator.cli import serve

        return serve(args)
    if args.command == "resume" or (args.command == "run" and args.resume):
        return cmd_resume(args)
    commands = {
        "validate": cmd_validate,
        "report": cmd_report,
        "view": cmd_view,
        "diff": cmd_diff,
        "prune": cmd_prune,
        "replay": cmd_replay,
    }
    return commands.get(args.command, cmd_run)(args)


def cmd_validate(args: argparse.Namespace) -> int:
    settings, problems = validate_settings(args)
    specs, errors, missing = collect(args.targets, settings)
    if not problems:  # against a config that could not be read, these would be guesses
        warn_unused_job_tables(args, settings, specs, errors=errors)
        warn_unpriced(settings, specs)
        warn_host_fit(settings, specs)
    for line in [*problems, *missing]:
        print_error(line)
    for error in errors:
        for line in error.problems:
            print_error(line)
    for spec in specs:
        show(
            f"ok     {spec.name} ({shown_path(spec.source)}): workspace {spec.workspace}, "
            f"tools {', '.join(spec.tools)}"
        )
    if not specs and not errors:
        print_error(no_task_files(args.targets))
        return 2
    return 2 if problems or errors or missing else 0


def validate_settings(args: argparse.Namespace) -> tuple[Settings, list[str]]:
    """The settings ``validate`` checks the task files against, and the config's problems: when the config
    has any, the built-in defaults (so that the task files are checked too)."""
    try:
        return parsed(lambda: settings_from(args, say=show), config_path(args)), []
    except ConfigError as e:
        return Settings.model_construct(), e.problems


def cmd_prune(args: argparse.Namespace) -> int:
    settings = parsed(lambda: settings_from(args, say=say), config_path(args))  # it deletes: say whose
    keep = (
        args.keep
        if args.keep is not None
        else (settings.runner.keep_runs if args.older_than is None else None)
    )
    older = parse_age(args.older_than) if args.older_than is not None else None
    output_dir = settings.runner.output_dir
    if not output_dir.is_dir():
        raise ConfigError([f"{output_dir}: no such output directory (nothing to prune)"])
    result = prune(output_dir, keep=keep, older_than_s=older, dry_run=args.dry_run)
    report_prune(result, output_dir, show)
    return 0


def latest_run(args: argparse.Namespace) -> Path:
    """``<output_dir>/latest`` of the settings ``run`` would use here; says which run it is (on stderr)."""
    settings = parsed(lambda: settings_from(args), config_path(args))
    latest = settings.runner.output_dir / "latest"
    if not latest.exists():
        raise ConfigError(
            [
                f"{latest}: no latest run (no RUN_DIR given, and {settings.runner.output_dir} holds no "
                "run yet); give RUN_DIR, or start one with `runner run`"
            ]
        )
    target = latest.resolve()
    say(f"{args.command}: {latest} -> {shown_path(target)} (the latest run)")
    return Path(shown_path(target))


def cmd_report(args: argparse.Namespace) -> int:
    if args.run_dir is None:
        args.run_dir = latest_run(args)
    if args.json:
        return report_json(args.run_dir)
    document = load_report(args.run_dir)
    show(f"run {args.run_dir} ({document['state']})")
    print_table(out, document["jobs"])
    totals = document["totals"]
    out.print(totals_line(document), highlight=False, soft_wrap=True)
    if document["state"] == RunState.INTERRUPTED:
        show(f"interrupted: its runner is gone; `runner resume {args.run_dir}` continues it")
    return 0 if totals["jobs"] and totals.get(Status.SUCCEEDED, 0) == totals["jobs"] else 1


def report_json(run_dir: Path) -> int:
    if not is_run_dir(run_dir):
        raise ConfigError([f"{run_dir / RUN_JSON}: not found; is {run_dir} a run directory (runs/<run-id>)?"])
    document = json_document(run_dir)
    print_document(json_printable(json.dumps(document, ensure_ascii=False, indent=1)))
    totals = document["totals"]
    return 0 if totals[Status.SUCCEEDED] == totals["jobs"] else 1


DIFF_NAMES_SHOWN = 20  # rows or sections named per kind and job; --json names every one


def cmd_diff(args: argparse.Namespace) -> int:
    from .ui.diff import diff_runs

    bad = [
        f"{run}: not a run directory (no {RUN_JSON}, no job's metrics.json)"
        for run in (args.run_a, args.run_b)
        if not is_run_dir(run)
    ]
    if bad:
        raise ConfigError(bad)
    result = diff_runs(args.run_a, args.run_b)
    if args.json:
        print_document(json_printable(json.dumps(result.document(), ensure_ascii=False, indent=1)))
        return 1 if result.changed else 0
    for job in result.jobs:
        what = (
            "only in RUN_B"
            if job.status_a is None
            else "only in RUN_A"
            if job.status_b is None
            else "report changed"
            if job.report_changed
            else "unchanged"
        )
        counts = (
            f" ({job.unit}: {len(job.added)} added, {len(job.removed)} removed, {len(job.changed)} changed)"
            if job.added or job.removed or job.changed
            else ""
        )
        show(f"job {job.job}: {what}{counts}")
        for kind, names in (("added", job.added), ("removed", job.removed), ("changed", job.changed)):
            for name in names[:DIFF_NAMES_SHOWN]:
                show(f"  {kind}: {name}")
            if len(names) > DIFF_NAMES_SHOWN:
                show(f"  {kind}: ... and {len(names) - DIFF_NAMES_SHOWN} more (--json lists them all)")
        if job.diff:
            out.print(
                escape(printable(job.diff.rstrip("\n"), one_line=False, tabs=True)),
                highlight=False,
                soft_wrap=True,
            )
    show(f"{plural(len(result.jobs), 'job')}, {len(result.changed)} with a changed report")
    return 1 if result.changed else 0


def cmd_view(args: argparse.Namespace) -> int:
    from .ui.viewer import write_view

    if args.run_dir is None:
        args.run_dir = latest_run(args)
    if not is_run_dir(args.run_dir):
        raise ConfigError(
            [f"{args.run_dir / RUN_JSON}: not found; is {args.run_dir} a run directory (runs/<run-id>)?"]
        )
    if args.serve:
        from .listen import ListenError
        from .ui.viewer.serve import serve

        try:
            return serve(args.run_dir, args.port)
        except ListenError as e:
            raise ConfigError([f"{e} (--port chooses another)"]) from None
    check_view_out(args.out, args.run_dir)
    try:
        result = write_view(args.run_dir, args.out)
    except OSError as e:
        raise ConfigError(
            [f"{e.filename2 or e.filename}: cannot write the view: {e.strerror or e}"]
        ) from None
    for problem in result.problems:
        print_error(problem, label="warning")
    show(f"wrote {result.index} ({plural(result.pages_written, 'job page')} updated in {result.pages_dir})")
    show(f"open: file://{result.index.resolve()}")
    return 0


def check_view_out(out_file: Path | None, run_dir: Path) -> None:
    """Refuse, before anything is written, an index page ``view`` could not write: ``--out`` in a
    directory that does not exist (never made), or an index that is a directory."""
    from .ui.viewer.render import pages_dir_for

    index = out_file or run_dir / INDEX
    if out_file is not None and not out_file.parent.is_dir():
        raise ConfigError(
            [f"--out {out_file}: expected a file in an existing directory; {out_file.parent} is none"]
        )
    if index.is_dir():
        if out_file is not None:
            raise ConfigError([f"--out {out_file}: a directory; expected the index page's file (index.html)"])
        raise ConfigError([f"{index}: a directory where the index page goes; --out FILE writes it elsewhere"])
    pages = pages_dir_for(index)
    if pages.exists() and not pages.is_dir():
        raise ConfigError([f"{pages}: not a directory; the job pages go there"])


def cmd_replay(args: argparse.Namespace) -> int:
    import anyio

    from .pricing import PriceTable
    from .replay import (
        SUMMARIZER_NAME,
        FileReport,
        HistoryError,
        ReplayOptions,
        compactor_contestant,
        replay_files,
        totals,
        window_limits,
    )

    if args.context_tokens is not None and args.context_tokens < 1_000:
        raise ConfigError(
            [f"--context-tokens: expected a whole number of at least 1000, got {args.context_tokens}"]
        )
    settings = settings_from(args)
    limits = window_limits(settings.limits, args.context_tokens, args.compaction)
    strategy = limits.compaction
    if strategy not in REPLAY_STRATEGIES:
        raise ConfigError(
            [
                f"[limits] compaction = {strategy!r}: the API compacts, and a replay has no server; "
                f"use --compaction {' or '.join(REPLAY_STRATEGIES)}"
            ]
        )
    summary_model = settings.summarizer.model
    options = ReplayOptions(
        model=settings.runner.model,
        summary_model=summary_model,
        prices=PriceTable(settings.prices),
        context_tokens=limits.context_token_limit,
        max_output_tokens=limits.max_output_tokens,
        max_reactive_retries=limits.max_reactive_retries,
        dump_dir=args.dump,
    )
    say(
        f"replay: strategy {strategy}, window {limits.context_token_limit or '(none)'} tokens, model "
        f"{options.model}; summaries: {SUMMARIZER_NAME} {summary_model}; prompt cache: the runner's "
        "breakpoints, a 5-minute TTL that never expires between calls"
    )

    def progress(report: FileReport, seconds: float) -> None:
        say(
            f"replay: {report.file}: {report.turns} turns, {report.needed} needed facts: "
            f"{report.in_context} in context, {report.recoverable} recoverable, {report.lost} lost; "
            f"${report.cost_usd:.4f} (effective ${report.effective_cost_usd:.4f}) in {seconds:.1f} s"
        )

    try:
        reports = anyio.run(
            lambda: replay_files(
                args.files,
                options,
                lambda job_dir: compactor_contestant(strategy, limits, job_dir, summary_model=summary_model),
                progress=progress,
            )
        )
    except HistoryError as e:
        print_error(str(e))
        return 2
    document: dict[str, Any] = {
        "strategy": strategy,
        "files": [r.to_json() for r in reports],
        "totals": totals(reports),
    }
    if args.json:
        print_document(json_printable(json.dumps(document, ensure_ascii=False, indent=1)))
        return 0
    window = limits.context_token_limit or "-"
    out.print(
        _replay_table(document, title=f"replay: {strategy}, window {window} tokens", width=out.width),
        crop=False,
    )
    done = document["totals"]
    out.print(
        escape(
            f"compactions: {', '.join(f'{k} {v}' for k, v in done['compactions'].items()) or 'none'}; "
            f"summaries {done['summaries']}; recalls {done['recalls']} ({done['recall_tokens']:,} tokens); "
            f"requests over the window {done['over_window']} (refused and made room for: {done['refused']})"
        ),
        highlight=False,
        soft_wrap=True,
    )
    return 0


REPLAY_HEADERS = ("file", "turns", "sent", "cost", "effective", "needed", "in ctx", "recov.", "lost")


def _replay_table(document: dict[str, Any], *, title: str, width: int) -> Any:
    """``runner replay``'s table of ``document`` within ``width`` cells when it fits: every number whole,
    a file name too long for the rest cut (:func:`_cut_names`: every row told apart); when even the
    numbers do not fit, wider than ``width`` (print it uncropped), never a number cut."""
    from rich import box
    from rich.cells import cell_len
    from rich.table import Table

    rows = [
        [
            printable(str(row["file"]).removesuffix(".jsonl")),
            f"{row['turns']:,}",
            f"{row['tokens_sent'] / 1e6:.2f}M",
            f"${row['cost_usd']:.3f}",
            f"${row['effective_cost_usd']:.3f}",
            f"{row['needed']:,}",
            f"{row['in_context']:,}",
            f"{row['recoverable']:,}",
            f"{row['lost']:,}",
        ]
        for row in [*document["files"], {"file": "total", **document["totals"]}]
    ]
    widths = [
        max(cell_len(column), *(cell_len(r[i]) for r in rows)) for i, column in enumerate(REPLAY_HEADERS)
    ]
    numbers = sum(widths[1:]) + 3 * (len(REPLAY_HEADERS) - 1)  # 3 cells between two columns
    widths[0] = min(widths[0], max(width - numbers, 8))
    table = Table(
        box=box.SIMPLE, title=title, show_edge=False, pad_edge=False, width=max(width, widths[0] + numbers)
    )
    for i, column in enumerate(REPLAY_HEADERS):
        table.add_column(column, justify="right" if i else "left", no_wrap=True, min_width=widths[i])
    names = _cut_names([row[0] for row in rows], widths[0])
    for name, (_, *cells) in zip(names, rows, strict=True):
        table.add_row(escape(name), *cells)
    return table


def _cut_names(names: list[str], cells: int) -> list[str]:
    """``names`` in at most ``cells`` terminal cells each, each told from the others: one too long is cut
    at its start (where histories' names differ); when that cut reads as another's (two job directories'
    ``<job>/transcript``), it shows the part where it differs from them instead."""
    ends = [_cut_start(name, cells) for name in names]
    alike: dict[str, set[str]] = {}
    for name, end in zip(names, ends, strict=True):
        alike.setdefault(end, set()).add(name)
    differ: dict[str, int] = {}  # where a name parts from the nearest of those cut alike
    for group in alike.values():
        ordered = sorted(group)  # the longest common start with any other is with a neighbour
        for i, name in enumerate(ordered):
            near = ordered[max(0, i - 1) : i] + ordered[i + 1 : i + 2]
            if near:
                differ[name] = max(_common_prefix(name, other) for other in near)
    return [
        end if name not in differ else _cut_around(name, differ[name], cells)
        for name, end in zip(names, ends, strict=True)
    ]


def _common_prefix(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _cut_around(text: str, at: int, cells: int) -> str:
    """``text`` in at most ``cells`` terminal cells, showing its character ``at`` and from a few before it:
    ``…`` where it is cut."""
    from rich.cells import cell_len

    start = max(0, at - 3)
    head = "…" if start else ""
    kept = ""
    for char in text[start:]:
        if cell_len(head + kept + char) > cells - 1:
            break
        kept += char
    return head + kept + ("…" if start + len(kept) < len(text) else "")


def _cut_start(text: str, cells: int) -> str:
    """``text`` in at most ``cells`` terminal cells: whole, or ``…`` and as much of its end as fits."""
    from rich.cells import cell_len

    if cell_len(text) <= cells:
        return text
    kept = ""
    for char in reversed(text):
        if cell_len(char + kept) > cells - 1:
            break
        kept = char + kept
    return "…" + kept


if __name__ == "__main__":
    sys.exit(main())
