"""What the viewer reads from a run directory, read defensively (the run's documents through
:mod:`runner.rundir.docs`, which ``runner report`` reads too).

Guarantees:
- Nothing here raises on a damaged, missing or half-written file: a file that cannot be read is
  treated as absent and named in ``problems``; a half-written JSONL line is skipped.
- A run in progress is shown as it stands: each job's ``metrics.json`` (checkpointed while the job
  runs) takes precedence over its entry in ``run.json``, which is rewritten less often.
- Only files inside the run directory are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...rundir.docs import JobData, totals_of
from ...rundir.store import read_jsonl


def totals(jobs: list[JobData]) -> dict[str, Any]:
    """Totals over ``jobs``, computed from the jobs themselves (never trusted from run.json)."""
    return totals_of([j.metrics for j in jobs])


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
