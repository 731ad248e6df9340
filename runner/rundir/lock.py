"""One writer per run directory: ``run`` and ``resume`` hold an exclusive ``flock`` on
``runs/<id>/.lock`` for their whole life.

Guarantees: while one process holds the lock, another :func:`hold_run_dir` on the same directory
fails at once with a :class:`ConfigError` naming the holder's pid (exit 2). The kernel releases the
lock when its holder exits, however it exits (``kill -9`` included), so a crash never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..config import ConfigError
from .docs import LOCK


@contextmanager
def hold_run_dir(run_dir: Path) -> Iterator[None]:
    path = run_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise ConfigError([f"{path}: cannot open the run's lock file: {e.strerror or e}"]) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise ConfigError(
                [
                    f"{run_dir}: another runner (pid {holder}) is writing this run; "
                    "wait for it to end, or stop it"
                ]
            ) from None
        # the holder's pid, for the message above (a full disk must not stop the run here)
        with suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
