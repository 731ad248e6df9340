"""What changed between two runs' results (``runner diff RUN_A RUN_B``), per job: the unified diff of
``final.md`` and the rows added, removed and changed: the rows of the report's Markdown tables and the
lines of the files the job declares as ``outputs`` in its task file (:mod:`.rows`), or, for a report
with neither, its sections (its ``##`` / ``###`` headings).

:func:`compare` and :func:`report_units` are pure (texts in, a :class:`JobDiff` out), so the viewer can
use them on reports it already holds; :func:`job_diff` reads and compares one job of two runs, as
``runner diff`` does for each job and the viewer does for an incremental job and its baseline.

Guarantees:
- Every job of either run is in the result, in the first run's order; a job in one run only is
  added or removed, not an error. A report that cannot be read is compared as empty, and an output
  file that cannot be read leaves its rows out, each said in the job's ``problems``.
- Confined to the two runs at every level: a job's directory is opened beneath its run's (no symbolic
  link, no ``..``), its ``final.md`` and ``job.json`` beneath the job's, and its outputs as
  :mod:`.rows` promises; one leading out is not read.
- Bounded: a ``final.md`` is read up to :data:`MAX_REPORT_BYTES`, a ``job.json`` up to
  :data:`MAX_SPEC_BYTES`, the outputs as :mod:`.rows` bounds them. What is cut or refused is said,
  naming the file, in the job's ``problems`` (in ``--json``) and on stderr.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rundir.docs import FINAL, JOB_JSON, JobData, RunState, load_run
from ..tools.beneath import Root, open_beneath, open_regular
from .rows import output_rows, refusal, table_rows, unique_key
from .terminal import printable

MAX_REPORT_BYTES = 16 * 1024 * 1024  # a larger final.md is compared by its first this many bytes
MAX_SPEC_BYTES = 1024 * 1024  # a job.json (the runner writes a few KiB)
_HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$", re.M)


@dataclass
class JobDiff:
    """One job's report, run A against run B."""

    job: str
    status_a: str | None  # None: the job is not in that run
    status_b: str | None
    diff: str  # the unified diff of final.md ("" when equal)
    unit: str = "rows"  # what ``added``/``removed``/``changed`` list: "rows" of a file table, or "sections"
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # files cut or not read, each named

    @property
    def report_changed(self) -> bool:
        return bool(self.diff) or self.status_a is None or self.status_b is None

    def document(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status_a": self.status_a,
            "status_b": self.status_b,
            "changed": self.report_changed,
            "unit": self.unit,
            "added": self.added,
            "removed": self.removed,
            "changed_units": self.changed,
            "diff": self.diff,
            "problems": self.problems,
        }


@dataclass
class RunDiff:
    run_a: Path
    run_b: Path
    jobs: list[JobDiff]

    @property
    def changed(self) -> list[JobDiff]:
        return [j for j in self.jobs if j.report_changed]

    def document(self) -> dict[str, Any]:
        return {
            "run_a": str(self.run_a),
            "run_b": str(self.run_b),
            "changed": bool(self.changed),
            "jobs_changed": [j.job for j in self.changed],
            "jobs": [j.document() for j in self.jobs],
        }


def sections(report: str) -> dict[str, str]:
    """The report's ``##`` and ``###`` sections by heading (a repeated heading numbered): each one's text."""
    out: dict[str, str] = {}
    matches = list(_HEADING.finditer(report))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(report)
        out[unique_key(out, match[2], "")] = report[match.end() : end].strip()
    return out


def report_units(
    report: str,
    job_dir: Path | None = None,
    problems: list[str] | None = None,
    *,
    outputs: list[str] | None = None,
) -> tuple[str, dict[str, str]]:
    """What a report is made of, by key: ("rows", its tables' rows and, with ``job_dir``, the rows of
    the job's ``outputs`` files, read beneath ``job_dir`` only: what is refused is said in
    ``problems``) or, with no row at all, ("sections", its sections)."""
    rows = table_rows(report)
    if job_dir is not None and outputs:
        found: list[str] = []
        for key, row in output_rows(job_dir, outputs, found).items():
            rows.setdefault(key, row)
        if problems is not None:
            problems += found
    if rows:
        return "rows", rows
    return "sections", sections(report)


def declared_outputs(job_dir: Path, problems: list[str]) -> list[str]:
    """The ``outputs`` patterns of the job's ``job.json`` (none when it has none), read beneath
    ``job_dir`` up to :data:`MAX_SPEC_BYTES`; one that cannot be read is said in ``problems``."""
    path = job_dir / JOB_JSON
    try:
        with Root.open(str(job_dir)) as root:
            fd, _ = open_regular(root, JOB_JSON, no_symlinks=True)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        problems.append(f"{path}: {refusal(e)}; its outputs are not compared")
        return []
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_SPEC_BYTES + 1)
    try:
        if len(data) > MAX_SPEC_BYTES:
            raise ValueError(f"more than {MAX_SPEC_BYTES} bytes")
        spec = json.loads(data)
        outputs = spec.get("outputs", []) if isinstance(spec, dict) else None
        if not isinstance(outputs, list):
            raise ValueError("outputs: expected a list of patterns")
    except ValueError as e:
        problems.append(f"{path}: {e}; its outputs are not compared"[:300])
        return []
    return outputs


def compare(
    job: str,
    report_a: str,
    report_b: str,
    *,
    units_a: tuple[str, dict[str, str]] | None = None,
    units_b: tuple[str, dict[str, str]] | None = None,
    status_a: str | None = "",
    status_b: str | None = "",
    name_a: str = "a/final.md",
    name_b: str = "b/final.md",
) -> JobDiff:
    """``report_b`` against ``report_a``: the unified diff and the units added, removed and changed (the
    units :func:`report_units` finds, unless given). Pure."""
    lines = difflib.unified_diff(
        report_a.splitlines(keepends=True), report_b.splitlines(keepends=True), fromfile=name_a, tofile=name_b
    )
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    kind_a, a = units_a or report_units(report_a)
    kind_b, b = units_b or report_units(report_b)
    unit = kind_b if kind_a == kind_b else "rows" if "rows" in (kind_a, kind_b) else kind_b
    if kind_a != kind_b:  # one report has a file table, the other not: compare what each has of that kind
        a, b = (a if kind_a == unit else {}), (b if kind_b == unit else {})
    return JobDiff(
        job=job,
        status_a=status_a,
        status_b=status_b,
        diff=text,
        unit=unit,
        added=sorted(k for k in b if k not in a),
        removed=sorted(k for k in a if k not in b),
        changed=sorted(k for k in b if k in a and a[k] != b[k]),
    )


def read_report(job_dir: Path, problems: list[str] | None = None) -> str:
    """A job's final.md as text ("" when it has none), its first :data:`MAX_REPORT_BYTES` (a longer one
    is said in ``problems``); opened beneath ``job_dir``, never through a symbolic link."""
    notes = problems if problems is not None else []
    path = job_dir / FINAL
    try:
        with Root.open(str(job_dir)) as root:
            fd, st = open_regular(root, FINAL, no_symlinks=True)
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as e:
        notes.append(f"{path}: {refusal(e)}; compared as an empty report")
        return ""
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        notes.append(
            f"{path}: {st.st_size} bytes, more than the {MAX_REPORT_BYTES} bytes read of a report; "
            f"compared by its first {MAX_REPORT_BYTES} bytes"
        )
        data = data[:MAX_REPORT_BYTES]
    return data.decode("utf-8", errors="replace")


def job_dir_problem(run_dir: Path, name: str) -> str | None:
    """Why the job ``name``'s directory is not one diff reads: not a plain directory beneath the run's
    (a symbolic link, a ``..``, a path); None when it is."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        return f"{run_dir}: job name {name!r} is not a directory of the run; not read"
    try:
        with Root.open(str(run_dir)) as root:
            os.close(open_beneath(root, name, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True))
    except FileNotFoundError:
        return None  # a job only in run.json: no report
    except (OSError, ValueError) as e:
        return f"{run_dir / name}: {refusal(e)}"
    return None


def _stderr(problem: str) -> None:
    print(f"runner diff: {printable(problem)}", file=sys.stderr)


def job_diff(
    name: str,
    run_a: Path,
    status_a: str | None,
    *,
    run_b: Path,
    status_b: str | None,
    warn: Callable[[str], None] | None = None,
) -> JobDiff:
    """Job ``name``'s report in ``run_b`` against ``run_a`` (a status None: the job is not in that run,
    nothing of it read), read as :func:`diff_runs` reads every job's. Each file cut or not read is in
    the result's ``problems`` and given to ``warn``."""
    problems: list[str] = []
    texts, units = [], []
    for run, status in ((run_a, status_a), (run_b, status_b)):
        refused = job_dir_problem(run, name) if status is not None else None
        if refused:
            problems.append(refused)
        readable = status is not None and refused is None
        job_dir = run / name
        text = read_report(job_dir, problems) if readable else ""
        outputs = declared_outputs(job_dir, problems) if readable else []
        texts.append(text)
        units.append(report_units(text, job_dir if readable else None, problems, outputs=outputs))
    result = compare(
        name,
        texts[0],
        texts[1],
        units_a=units[0],
        units_b=units[1],
        status_a=status_a,
        status_b=status_b,
        name_a=f"{run_a}/{name}/{FINAL}",
        name_b=f"{run_b}/{name}/{FINAL}",
    )
    result.problems = problems
    if warn is not None:
        for problem in problems:
            warn(problem)
    return result


def diff_runs(run_a: Path, run_b: Path, warn: Callable[[str], None] | None = _stderr) -> RunDiff:
    """Every job of either run, its report in ``run_b`` against ``run_a`` (jobs in their first run's
    order). Each file cut or not read is in its job's ``problems`` and given to ``warn`` (default: a
    line on stderr)."""
    runs = [load_run(run, with_specs=False) for run in (run_a, run_b)]
    jobs: dict[str, list[Any]] = {}
    for side, data in enumerate(runs):
        for job in data.jobs:
            jobs.setdefault(job.name, [None, None])[side] = job
    out = [
        job_diff(name, run_a, _status(a), run_b=run_b, status_b=_status(b), warn=warn)
        for name, (a, b) in jobs.items()
    ]
    return RunDiff(run_a, run_b, out)


def _status(job: Any) -> str | None:
    return None if job is None else status_of(job)


def status_of(job: JobData) -> str:
    """A job's status as a diff shows it (``unknown`` for a row with none)."""
    return str(job.status) if job.status != RunState.UNKNOWN else "unknown"
