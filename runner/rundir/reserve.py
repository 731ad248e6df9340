"""Room kept on the disk for a run's last words.

A run starts by writing ``runs/<id>/.reserve`` (a few KB per job). When the disk fills up, the final
documents (each job's ``metrics.json`` and ``final.md``, the last ``run.json``) could not be written
and would be left saying ``running``; :func:`final_write` then frees the reserve once and tries
again, so those documents end in their final state whenever the reserve covers them.

Guarantee: :func:`claim` fails (a :class:`ConfigError`, one line, exit 2) before anything runs when
the output directory cannot take even the reserve: starting on a full disk is refused, not a traceback.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..config import ConfigError
from .docs import JOBS_RESERVE, RUN_RESERVE

BASE_BYTES = 32 * 1024
PER_JOB_BYTES = 8 * 1024


def claim(run_dir: Path, jobs: int) -> None:
    try:
        for name, size in (
            (RUN_RESERVE, BASE_BYTES + 2 * PER_JOB_BYTES * jobs),
            (JOBS_RESERVE, BASE_BYTES + PER_JOB_BYTES * jobs),
        ):
            with open(run_dir / name, "wb") as f:
                f.write(b"\0" * size)
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:
        for name in (RUN_RESERVE, JOBS_RESERVE):
            release(run_dir, name)
        raise ConfigError([f"{run_dir}: cannot write the run's files: {e.strerror or e}"]) from None


def release(run_dir: Path, name: str = JOBS_RESERVE) -> bool:
    """Free a reserve; False when it was already gone."""
    try:
        (run_dir / name).unlink()
    except OSError:  # already gone, or not ours to remove
        return False
    return True


def _full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


async def final_write(
    run_dir: Path,
    write: Callable[[], Awaitable[None]],
    in_place: Callable[[], Awaitable[None]] | None = None,
    *,
    reserve: str = JOBS_RESERVE,
) -> None:
    """``write()``; when the disk is full, free the reserve and try once more; still full, ``in_place()``
    (rewriting an existing file over its own blocks needs no new space)."""
    full: OSError | None = None
    for _ in range(2):  # once, then once more with the reserve freed
        if full is not None and not release(run_dir, reserve):
            break  # no reserve left to free: a second try would fail the same way
        try:
            await write()
            return
        except OSError as e:
            if not _full(e):
                raise
            full = e
    if in_place is None:
        assert full is not None
        raise full
    await in_place()
