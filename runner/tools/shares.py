"""Each job's share of what the jobs of one event loop share: a job (with its subagents) may hold at
most a few of the loop's grep workers at once, so a job whose model greps a catastrophic pattern
eight times over waits for its own workers, never holding the ones another job needs.

Guarantees:

- A job holds at most :data:`JOB_GREPS` grep workers at once (of :data:`runner.tools.grep_pool.MOST`);
  its further calls wait on its own share (within their deadline), holding nothing another job waits for.
- A job is its directory: a subagent (``<job>/agents/<name>``) shares its job's share.
- A share lives while a toolset of its job holds it, in its event loop only (nothing is kept for a
  loop that has ended, nor used across loops).
"""

from __future__ import annotations

import weakref
from asyncio import AbstractEventLoop, get_running_loop
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ..rundir.docs import AGENTS

JOB_GREPS = 2  # grep workers one job may hold at once


@dataclass(eq=False)
class JobShare:
    """What one job may hold at once."""

    greps: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(JOB_GREPS))


_shares: weakref.WeakKeyDictionary[AbstractEventLoop, weakref.WeakValueDictionary[str, JobShare]] = (
    weakref.WeakKeyDictionary()
)


def job_of(job_dir: Path) -> str:
    """The job a job directory belongs to: its own, or, for a subagent's, its job's."""
    while job_dir.parent.name == AGENTS:
        job_dir = job_dir.parent.parent
    return str(job_dir)


def share_of(job_dir: Path) -> JobShare:
    """The share of the job of ``job_dir`` in the running event loop (the same object for every
    toolset of the job while one holds it)."""
    loop = get_running_loop()
    shares = _shares.get(loop)
    if shares is None:
        shares = _shares[loop] = weakref.WeakValueDictionary()
    job = job_of(job_dir)
    share = shares.get(job)
    if share is None:
        share = shares[job] = JobShare()
    return share
