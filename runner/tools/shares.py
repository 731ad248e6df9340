"""Each job's share of what the jobs of one event loop share: a job (with its subagents) may hold at
most a few of the loop's grep workers and worker threads at once, so a job whose model greps a
catastrophic pattern eight times over, or globs forty slow patterns at once, waits for its own
workers, never holding the ones another job needs.

Guarantees:

- A job holds at most :data:`JOB_GREPS` grep workers at once (of :data:`runner.tools.grep_pool.MOST`);
  its further calls wait on its own share (within their deadline), holding nothing another job waits for.
  The pool hands its workers out by share (``greps`` names the job there): a job's second worker
  never takes the last few, and a freed one goes to the waiting job holding the fewest.
- A job's blocking tool work (:func:`in_thread`: ``read``, ``write``, ``edit``, ``glob`` off the loop,
  ``recall``, the memory tool off a local disk) takes one of its :data:`JOB_THREADS` threads, then one
  of the loop's :data:`TOOL_THREADS` (through :func:`runner.rundir.store.in_thread`, the runner's one
  way off the loop); never a place of anyio's default limiter, which the rest of the process keeps
  (the sandbox's own waits have theirs: :mod:`runner.tools.sandbox`).
- A job is its directory: a subagent (``<job>/agents/<name>``) shares its job's share.
- A share lives while a toolset of its job holds it, in its event loop only (nothing is kept for a
  loop that has ended, nor used across loops).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.lowlevel import RunVar

from ..rundir import store
from ..rundir.docs import AGENTS

T = TypeVar("T")
JOB_GREPS = 2  # grep workers one job may hold at once
JOB_THREADS = 4  # worker threads one job's tools may hold at once
TOOL_THREADS = 64  # worker threads the tools of every job of one event loop may hold at once


@dataclass(eq=False)
class JobShare:
    """What one job may hold at once."""

    greps: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(JOB_GREPS))
    threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(JOB_THREADS))


@dataclass(eq=False)
class _Loop:
    jobs: weakref.WeakValueDictionary[str, JobShare] = field(default_factory=weakref.WeakValueDictionary)
    threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(TOOL_THREADS))


_loops: RunVar[_Loop] = RunVar("runner.tools.shares")  # one per event loop, gone with it


def per_loop(var: RunVar[T], make: Callable[[], T]) -> T:
    """``var``'s value in the running event loop, made by ``make`` the first time it is asked for."""
    found = var.get(None)
    if found is None:
        found = make()
        var.set(found)
    return found


def job_of(job_dir: Path) -> str:
    """The job a job directory belongs to: its own, or, for a subagent's, its job's."""
    while job_dir.parent.name == AGENTS:
        job_dir = job_dir.parent.parent
    return str(job_dir)


def share_of(job_dir: Path) -> JobShare:
    """The share of the job of ``job_dir`` in the running event loop (the same object for every
    toolset of the job while one holds it)."""
    jobs = per_loop(_loops, _Loop).jobs
    job = job_of(job_dir)
    share = jobs.get(job)
    if share is None:
        share = jobs[job] = JobShare()
    return share


async def in_thread(
    share: JobShare, work: Callable[..., T], *args: Any, abandon_on_cancel: bool = False
) -> T:
    """``work(*args)`` on a worker thread: one of the job's (``share``), then one of the loop's tool
    threads, never one of anyio's default limiter. Cancelled with ``abandon_on_cancel``, the call
    returns at once and gives its places back (the thread ends by itself)."""
    async with share.threads:
        return await store.in_thread(
            work, limiter=per_loop(_loops, _Loop).threads, abandon_on_cancel=abandon_on_cancel
        )(*args)
