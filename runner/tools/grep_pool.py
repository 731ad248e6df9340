"""Kept grep workers: the processes that run a model's regular expressions, started once and reused.

Starting a Python process costs about 25 ms of CPU, more than the rest of a turn; a batch of jobs
that grep every turn would spend most of its CPU starting workers. So a finished worker is kept for
the next call (at most ``KEPT`` idle ones per event loop), and only a worker that overran its
deadline, was cancelled or broke its protocol is killed and replaced.

Guarantees:

- A call answers within its deadline: at the deadline (or on cancellation) its worker is killed and
  reaped before :func:`search` returns or raises; the next call gets a fresh worker.
- A worker serves one call at a time; calls never share one. At most ``MOST`` workers run at once
  per event loop (a batch of 500 jobs grepping at once does not start 500 Python processes); a call
  waiting for one waits within its own deadline.
- No job takes every worker: a call given its job's slots (``job_slots``, a few per job:
  :data:`runner.tools.shares.JOB_GREPS`) waits for one of those before it waits for a worker, so one
  job's eight catastrophic patterns hold two workers and another job's grep gets one of the rest.
- Nothing outlives the runner: workers die with it (``PR_SET_PDEATHSIG``), and an idle worker exits
  by itself after 30 s (:func:`runner.tools.grep_worker.serve`), so a kept one never piles up.
- Nothing outlives its event loop either: when ``asyncio.run`` (or ``anyio.run``) ends, it cancels the
  pool's keeper task, which kills and reaps the idle workers while the loop still runs (a process that
  runs several loops, a test suite, leaves no worker to a closed loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from asyncio import AbstractEventLoop, Event, Task, get_running_loop
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

MOST = 8  # workers at once per event loop: more calls wait their turn (within their deadline)
KEPT = MOST  # idle workers kept per event loop: as many as may run again (fewer would be killed and
# started again by the next burst of calls; an idle one exits by itself after 30 s)
ANSWER_BYTES = 8 << 20  # more than any answer (the worker's output is capped at 100 KiB, JSON-escaped)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the worker runs this very package (also where runner is not installed, or where another copy is: an
# editable install elsewhere on the path), loaded from its directory; the path is left as it is (the
# standard library first, so nothing beside the package can stand in for it)
_SERVE = (
    "import importlib.util, sys; "
    f"spec = importlib.util.spec_from_file_location('runner', {os.path.join(_PACKAGE, '__init__.py')!r}, "
    f"submodule_search_locations=[{_PACKAGE!r}]); "
    "package = importlib.util.module_from_spec(spec); sys.modules['runner'] = package; "
    "spec.loader.exec_module(package); from runner.tools.grep_worker import serve; serve()"
)


@dataclass
class _Worker:
    process: Process
    answers: BufferedByteReceiveStream


@dataclass
class _Pool:
    idle: list[_Worker]
    slots: anyio.CapacityLimiter
    keeper: Task[None] | None = None


_pools: weakref.WeakKeyDictionary[AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()


def _pool() -> _Pool:
    loop = get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = _Pool([], anyio.CapacityLimiter(MOST))
        pool.keeper = loop.create_task(_keep(pool))
    return pool


async def _keep(pool: _Pool) -> None:
    """Waits for the end of the loop (the cancellation of every task left), then kills the idle workers."""
    try:
        await Event().wait()
    finally:
        while pool.idle:
            await _kill(pool.idle.pop())


async def _start() -> _Worker:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    process = await anyio.open_process(
        [sys.executable, "-I", "-c", _SERVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env=env,
    )
    assert process.stdout is not None
    return _Worker(process, BufferedByteReceiveStream(process.stdout))


async def _kill(worker: _Worker) -> None:
    with anyio.CancelScope(shield=True):
        if worker.process.returncode is None:
            worker.process.kill()
        await worker.process.wait()
        await worker.process.aclose()


async def search(
    request: dict[str, Any], deadline: float, *, job_slots: anyio.CapacityLimiter | None = None
) -> dict[str, Any] | None:
    """The worker's answer to ``request``, or None when none came within ``deadline`` seconds
    (waiting for a free worker included). With ``job_slots`` (the calling job's share,
    :mod:`runner.tools.shares`), a slot of it is taken first: a call waiting for its job's turn holds
    none of the loop's workers."""
    pool = _pool()
    with anyio.move_on_after(deadline):
        if job_slots is None:
            async with pool.slots:
                return await _ask(pool, request)
        async with job_slots, pool.slots:
            return await _ask(pool, request)
    return None


async def _ask(pool: _Pool, request: dict[str, Any]) -> dict[str, Any]:
    """One request on a kept or new worker; a worker that does not answer (cancelled: the deadline)
    is killed."""
    worker = None
    while pool.idle and worker is None:
        worker = pool.idle.pop()
        if worker.process.returncode is not None:  # it left on its own (idle too long)
            await _kill(worker)
            worker = None
    worker = worker or await _start()
    kept = False
    try:
        assert worker.process.stdin is not None
        try:
            await worker.process.stdin.send(json.dumps(request).encode() + b"\n")
            line = await worker.answers.receive_until(b"\n", ANSWER_BYTES)
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            anyio.DelimiterNotFound,
            anyio.IncompleteRead,
        ):
            return {
                "error": "grep: the search failed (its worker exited; the pattern may need too much "
                "memory or time)"
            }
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            return {"error": "grep: the search failed (its worker answered something that is not an answer)"}
        kept = len(pool.idle) < KEPT
        if kept:
            pool.idle.append(worker)
        return answer
    finally:
        if not kept:
            await _kill(worker)
