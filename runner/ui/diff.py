"""What changed between two runs' reports (``runner diff RUN_A RUN_B``), per job: the unified diff of
``final.md`` and, for a report with an "## Every file" table (the survey's,
:mod:`runner.models.memory_survey`: its rows, or the facts files it names) or with sections per file or
finding (its ``##`` / ``###`` headings), the rows added, removed and changed.

:func:`compare` and :func:`report_units` are pure (texts in, a :class:`JobDiff` out), so the viewer can
show a job against its baseline with them; :func:`diff_runs` reads two run directories for them.

Guarantees:
- A job present in only one run counts as changed (its report appeared or went).
- Reading never raises for a damaged or missing file: a missing ``final.md`` is an empty report, a
  survey's facts file that cannot be read leaves its rows out; only files inside each run are read.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models.memory_survey import report_rows
from ..rundir.docs import FINAL, RunState, load_run

EVERY_FILE = "## Every file"
MAX_REPORT_BYTES = 16 * 1024 * 1024  # a larger final.md is compared by its first this many bytes
_HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$", re.M)
_SUBAGENT_REPORT = re.compile(r"^\| `[^`\n]+` \| .* \| \w+ \| [\d-]+ \| `([^`\n]+)` \|$", re.M)
_FACTS = re.compile(r"`memories/survey/facts-\d{3}\.md`|" + _SUBAGENT_REPORT.pattern, re.M)


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


def _unescape(cell: str) -> str:
    return cell.replace("\\|", "|").replace("\\n", "\n")


def table_rows(report: str) -> dict[str, str]:
    """The rows of the report's "## Every file" table, by their first cell: each row's whole line."""
    if EVERY_FILE not in report:
        return {}
    section = report.split(EVERY_FILE, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]
    rows: dict[str, str] = {}
    for line in section.split("\n"):
        match = re.match(r"^\| (.+?) \|", line)
        if not match or line.startswith("|---") or line.startswith("| file |"):
            continue
        rows.setdefault(_unescape(match[1]), line)
    return rows


def sections(report: str) -> dict[str, str]:
    """The report's ``##`` and ``###`` sections by heading (a repeated heading numbered): each one's text."""
    out: dict[str, str] = {}
    matches = list(_HEADING.finditer(report))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(report)
        key, n = match[2], 1
        while key in out:
            n += 1
            key = f"{match[2]} ({n})"
        out[key] = report[match.end() : end].strip()
    return out


def _stays_inside(report: str) -> bool:
    """Whether every subagent report the survey's report names (what :func:`report_rows` opens besides
    its facts files) is a relative path without ``..``, so beneath the job directory."""
    return not any(
        name.startswith("/") or ".." in name.split("/") for name in _SUBAGENT_REPORT.findall(report)
    )


def report_units(report: str, job_dir: Path | None = None) -> tuple[str, dict[str, str]]:
    """What a report is made of, by key: ("rows", its file table's rows and, with ``job_dir``, the rows
    of the survey facts files it names) or ("sections", its sections)."""
    rows = table_rows(report)
    if job_dir is not None and _FACTS.search(report) and _stays_inside(report):
        try:
            facts = report_rows(report, job_dir)
        except (OSError, ValueError, IndexError, TypeError, RecursionError):
            facts = {}
        for path, row in facts.items():
            rows.setdefault(str(path), json.dumps(row, ensure_ascii=False))
    if rows or EVERY_FILE in report:
        return "rows", rows
    return "sections", sections(report)


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


def read_report(job_dir: Path) -> str:
    """A job's final.md as text ("" when it has none)."""
    try:
        with (job_dir / FINAL).open("rb") as f:
            return f.read(MAX_REPORT_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def diff_runs(run_a: Path, run_b: Path) -> RunDiff:
    """Every job of either run, its report in ``run_b`` against ``run_a`` (jobs in their first run's
    order)."""
    runs = [load_run(run, with_specs=False) for run in (run_a, run_b)]
    jobs: dict[str, list[Any]] = {}
    for side, data in enumerate(runs):
        for job in data.jobs:
            jobs.setdefault(job.name, [None, None])[side] = job
    out = []
    for name, (a, b) in jobs.items():
        texts = [read_report(j.dir) if j is not None else "" for j in (a, b)]
        units = [
            report_units(t, j.dir if j is not None else None) for t, j in zip(texts, (a, b), strict=True)
        ]
        out.append(
            compare(
                name,
                texts[0],
                texts[1],
                units_a=units[0],
                units_b=units[1],
                status_a=_status(a),
                status_b=_status(b),
                name_a=f"{run_a}/{name}/{FINAL}",
                name_b=f"{run_b}/{name}/{FINAL}",
            )
        )
    return RunDiff(run_a, run_b, out)


def _status(job: Any) -> str | None:
    if job is None:
        return None
    return str(job.status) if job.status != RunState.UNKNOWN else "unknown"
