"""``runner prune`` and ``[runner] keep_runs``: remove old runs from the output directory.

Which runs go: with ``keep``, all but the ``keep`` newest; with ``older_than_s``, those last written
longer ago than that; with both, only runs that both would remove. A run's age is when it was last
written (its directory or its ``run.json``, whichever is newer: a resumed run is as new as its resume).

Guarantees:
- A run being written is never removed: each run's lock (``.lock``, the one ``run`` and ``resume`` hold)
  is taken exclusively, without waiting, before anything is touched, and held until the run is gone;
  a run whose lock is held is kept and named. A ``run`` or ``resume`` started on it meanwhile fails to
  take the lock (exit 2), and after that finds no run (the directory is first renamed to a hidden
  ``.pruning-<run-id>`` beside it, in one step, then deleted).
- ``<output_dir>/latest``'s target is never removed, nor is anything that is not a run directory
  (:func:`runner.rundir.docs.is_run_dir`), a symlink or a hidden entry (except ``.pruning-*`` leftovers of an
  interrupted prune, which are finished off).
- Nothing outside the output directory is touched: deleting never follows a symlink.
- A run of any depth is measured and removed (a chain of directories a job's ``bash`` made, deeper
  than Python's recursion or a path can reach): :mod:`runner.rundir.trees` walks without recursion.
- ``dry_run`` removes nothing and reports the same list, with the same byte counts.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError
from .docs import LATEST, RUN_JSON, is_run_dir, writer_alive
from .lock import hold_run_dir
from .trees import remove_tree, tree_bytes

PRUNING = ".pruning-"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` as seconds; anything else is a :class:`ConfigError`."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not match:
        raise ConfigError(
            [f"--older-than: expected a number and a unit (s, m, h, d or w), such as 30d; got {text!r}"]
        )
    return float(match[1]) * _UNITS[match[2]]


@dataclass(frozen=True)
class Run:
    path: Path
    written: float  # when it was last written (epoch seconds)
    bytes: int


@dataclass
class PruneResult:
    removed: list[Run] = field(default_factory=list)  # or, with dry_run, what would be
    kept: list[tuple[Path, str]] = field(default_factory=list)  # runs chosen but kept, and why
    runs: int = 0  # runs found in the output directory
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(r.bytes for r in self.removed)


def _written(path: Path) -> float:
    times = []
    for p in (path, path / RUN_JSON):
        with suppress(OSError):
            times.append(p.stat().st_mtime)
    return max(times, default=0.0)


def find_runs(output_dir: Path) -> list[Path]:
    """The run directories directly in ``output_dir``, newest first."""
    try:
        entries = list(output_dir.iterdir())
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError([f"{output_dir}: cannot list the output directory: {e.strerror or e}"]) from None
    runs = [
        p
        for p in entries
        if not p.name.startswith(".") and not p.is_symlink() and p.is_dir() and is_run_dir(p)
    ]
    return sorted(runs, key=lambda p: (_written(p), p.name), reverse=True)


def latest_target(output_dir: Path) -> Path | None:
    link = output_dir / LATEST
    if not link.is_symlink():
        return None
    try:
        return link.resolve(strict=True)
    except OSError:
        return None


def _chosen(runs: list[Path], keep: int | None, *, older_than_s: float | None, now: float) -> list[Path]:
    """The runs (given newest first) that ``keep`` and ``older_than_s`` select, newest first."""
    chosen = runs[keep:] if keep is not None else runs
    if older_than_s is not None:
        chosen = [p for p in chosen if now - _written(p) > older_than_s]
    return chosen


def _remove(path: Path, *, dry_run: bool) -> Run | str:
    """The run at ``path``, removed (with ``dry_run``, untouched), or why it is kept."""
    if dry_run:  # touches nothing, not even the lock file
        if writer_alive(path):
            return "a runner is writing this run"
        return Run(path, _written(path), tree_bytes(path))
    try:
        with hold_run_dir(path):
            run = Run(path, _written(path), tree_bytes(path))
            trash = path.parent / f"{PRUNING}{path.name}"
            os.rename(path, trash)
            remove_tree(trash)
    except ConfigError as e:  # its lock is held: a run or resume is writing it
        return e.problems[0].split(": ", 1)[-1]
    except OSError as e:
        return f"could not remove it: {e.strerror or e}"
    return run


def _finish_leftovers(output_dir: Path) -> None:
    """Remove what a prune interrupted between rename and delete left (``.pruning-*``)."""
    for leftover in output_dir.glob(f"{PRUNING}*"):
        if leftover.is_dir() and not leftover.is_symlink():
            remove_tree(leftover, ignore_errors=True)


def prune(
    output_dir: Path,
    keep: int | None = None,
    older_than_s: float | None = None,
    *,
    dry_run: bool = False,
    now: float | None = None,
) -> PruneResult:
    """Remove (or, with ``dry_run``, list) the runs of ``output_dir`` that ``keep`` and ``older_than_s``
    select."""
    if keep is None and older_than_s is None:
        raise ConfigError(
            ["prune: nothing to select by: give --keep N or --older-than AGE (or set [runner] keep_runs)"]
        )
    if keep is not None and keep < 0:
        raise ConfigError([f"--keep: expected 0 or more runs to keep, got {keep}"])
    now = time.time() if now is None else now
    runs = find_runs(output_dir)
    result = PruneResult(runs=len(runs), dry_run=dry_run)
    chosen = _chosen(runs, keep, older_than_s=older_than_s, now=now)
    latest = latest_target(output_dir)
    for path in reversed(chosen):  # oldest first
        if latest is not None and path.resolve() == latest:
            outcome: Run | str = f"{output_dir / LATEST} points at it"
        else:
            outcome = _remove(path, dry_run=dry_run)
        if isinstance(outcome, Run):
            result.removed.append(outcome)
        else:
            result.kept.append((path, outcome))
    if not dry_run:
        _finish_leftovers(output_dir)
    return result


def human_bytes(n: int) -> str:
    """``812 bytes``, ``3.4 MB``, ``1.2 GB`` (powers of 1000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} bytes"
