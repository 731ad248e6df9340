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
- No job takes every worker, nor more than its share while another job waits: a call given its
  job's slots (``job_slots``: the job's identity, and the few workers it may hold at once,
  :data:`runner.tools.shares.JOB_GREPS`) gets a worker only while its job holds fewer than that; a
  job's second (and later) worker is taken only while more than :data:`RESERVE` stay free, so the
  last ones go to jobs that hold none; and a freed worker goes to the waiting job that holds the
  fewest (then the one waiting longest), never to whoever asks next. Four jobs each grepping two
  catastrophic patterns at once hold six or seven workers, and a fifth job's plain-word grep gets a
  worker at once (it answers in a fraction of a second, ``tests/test_attack_grep.py``). A job that
  holds none waits only when the other jobs holding none took the last ``RESERVE`` workers.
- A slow search does not slow the others: a call still running after :data:`SLOW_S` has its worker
  moved to the lowest CPU priority (nice 19), so the CPU goes first to the runner and to the quick
  searches of other jobs (a plain-word grep starting a worker beside seven catastrophic ones is not
  slowed by them); the worker is put back at the runner's priority when its call ends, or, where
  that is not allowed (only root may raise a priority), killed instead of kept.
- Nothing outlives the runner: workers die with it (``PR_SET_PDEATHSIG``), and an idle worker exits
  by itself after 30 s (:func:`runner.tools.grep_worker.serve`), so a kept one never piles up.
- Nothing outlives its event loop either: the pool is the loop's (an anyio ``RunVar``); finished
  workers are kept only while a holder is open on that loop (:func:`kept_while_open`, a job's
  toolset), and the last holder to close kills and reaps the idle ones, so a loop whose jobs have
  ended has no worker left (a process that runs several loops, a test suite, leaves none to a
  closed loop). A call made with no holder open does not keep its worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process
from anyio.lowlevel import RunVar
from anyio.streams.buffered import BufferedByteReceiveStream

from .shares import per_loop

MOST = 8  # workers at once per event loop: more calls wait their turn (within their deadline)
RESERVE = 2  # workers only a job holding none may take (a job's second and later take from the rest)
KEPT = MOST  # idle workers kept per event loop: as many as may run again (fewer would be killed and
# started again by the next burst of calls; an idle one exits by itself after 30 s)
SLOW_S = 0.5  # a call running longer than this gets the lowest CPU priority (see the Guarantees)
SLOW_NICE = 19
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
    niced: bool = False  # moved to SLOW_NICE by a slow call


def _renice(worker: _Worker, nice: int) -> bool:
    try:
        os.setpriority(os.PRIO_PROCESS, worker.process.pid, nice)
    except OSError:
        return False
    worker.niced = nice != os.getpriority(os.PRIO_PROCESS, 0)
    return True


@dataclass(eq=False)
class _Waiter:
    job: object  # the job's identity: its slots (a call without a job: one of its own)
    cap: int  # the workers the job may hold at once
    ready: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False


class _Slots:
    """The loop's ``MOST`` workers, handed out among jobs fairly (the Guarantees): counts only, no I/O."""

    def __init__(self, total: int):
        self.free = total
        self.held: dict[object, int] = {}  # job -> workers it holds now
        self.waiting: list[_Waiter] = []  # in arrival order

    def _may(self, job: object, cap: int) -> bool:
        held = self.held.get(job, 0)
        return self.free > 0 and held < cap and (held == 0 or self.free > RESERVE)

    def _take(self, job: object) -> None:
        self.free -= 1
        self.held[job] = self.held.get(job, 0) + 1

    async def acquire(self, job: object, cap: int) -> None:
        if self._may(job, cap):  # no waiter could have it: each release hands out what waiters may take
            self._take(job)
            return
        waiter = _Waiter(job, cap)
        self.waiting.append(waiter)
        try:
            await waiter.ready.wait()
        except BaseException:  # cancelled (its deadline): a worker handed to it in between goes back
            if waiter.granted:
                self.release(job)
            else:
                self.waiting.remove(waiter)
            raise

    def release(self, job: object) -> None:
        held = self.held[job] - 1
        if held:
            self.held[job] = held
        else:
            del self.held[job]
        self.free += 1
        self._hand_out()

    def _hand_out(self) -> None:
        """Free workers to the waiters that may take one: the job holding the fewest first, then the
        one waiting longest."""
        while self.free > 0:
            best = self._next_waiter()
            if best is None:
                return
            self.waiting.remove(best)
            self._take(best.job)
            best.granted = True
            best.ready.set()

    def _next_waiter(self) -> _Waiter | None:
        """The first waiter, in arrival order, of those that may take a worker whose job holds the
        fewest; the scan ends at the first whose job holds none (none can hold fewer), so a release
        among many waiting jobs is not a walk over all of them."""
        best, fewest = None, None
        for waiter in self.waiting:
            if not self._may(waiter.job, waiter.cap):
                continue
            held = self.held.get(waiter.job, 0)
            if not held:
                return waiter
            if fewest is None or held < fewest:
                best, fewest = waiter, held
        return best

    @asynccontextmanager
    async def holding(self, job: object, cap: int) -> AsyncIterator[None]:
        await self.acquire(job, cap)
        try:
            yield
        finally:
            self.release(job)


@dataclass
class _Pool:
    idle: list[_Worker]
    slots: _Slots
    holders: int = 0  # holders open on this loop (kept_while_open): finished workers are kept meanwhile


_pools: RunVar[_Pool] = RunVar("runner.tools.grep_pool")  # one per event loop, gone with it


def _pool() -> _Pool:
    return per_loop(_pools, lambda: _Pool([], _Slots(MOST)))


@asynccontextmanager
async def kept_while_open() -> AsyncIterator[None]:
    """While open (a job's toolset holds it), this loop's finished workers are kept for the next call;
    the last holder of the loop to close kills and reaps the idle ones."""
    pool = _pool()
    pool.holders += 1
    try:
        yield
    finally:
        pool.holders -= 1
        if not pool.holders:
            idle, pool.idle = pool.idle, []
            for worker in idle:
                await _kill(worker)


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
    (waiting for a free worker included). ``job_slots`` (the calling job's share,
    :mod:`runner.tools.shares`) names the job and how many workers it may hold at once (its
    ``total_tokens``); a call waiting for its turn holds no worker. Without it the call is a job of
    its own that may hold every worker."""
    pool = _pool()
    job = object() if job_slots is None else job_slots
    cap = MOST if job_slots is None else max(1, int(job_slots.total_tokens))
    with anyio.move_on_after(deadline):
        async with pool.slots.holding(job, cap):
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
            with anyio.move_on_after(SLOW_S) as quick:  # receive_until keeps what it read when cancelled
                line = await worker.answers.receive_until(b"\n", ANSWER_BYTES)
            if quick.cancelled_caught:
                _renice(worker, SLOW_NICE)
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
        kept = (
            pool.holders > 0
            and len(pool.idle) < KEPT
            and (not worker.niced or _renice(worker, os.getpriority(os.PRIO_PROCESS, 0)))
        )
        if kept:
            pool.idle.append(worker)
        return answer
    finally:
        if not kept:
            await _kill(worker)
