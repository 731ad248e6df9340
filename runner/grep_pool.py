"""Kept grep workers: the processes that run a model's regular expressions, started once and reused.

Starting a Python process costs about 25 ms of CPU, more than the rest of a turn; a batch of jobs
that grep every turn would spend most of its CPU starting workers. So a finished worker is kept for
the next call (at most ``KEPT`` idle ones per event loop), and only a worker that overran its
deadline, was cancelled or broke its protocol is killed and replaced.

Guarantees:

- A call answers within its deadline: at the deadline (or on cancellation) its worker is killed and
  reaped before :func:`search` returns or raises; the next call gets a fresh worker.
- A worker serves one call at a time; calls never share one.
- Nothing outlives the runner: workers die with it (``PR_SET_PDEATHSIG``), and an idle worker exits
  by itself after 30 s (:func:`runner.grep_worker.serve`), so a kept one never piles up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from asyncio import AbstractEventLoop, get_running_loop
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

KEPT = 4  # idle workers kept per event loop
ANSWER_BYTES = 8 << 20  # more than any answer (the worker's output is capped at 100 KiB, JSON-escaped)
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# also where runner is not installed: the directory holding the package goes last on the path (the
# standard library first, so nothing beside it can stand in for it)
_SERVE = (f"import sys; sys.path.append({_PACKAGE_PARENT!r}); "
          "from runner.grep_worker import serve; serve()")


@dataclass
class _Worker:
    process: Process
    answers: BufferedByteReceiveStream


_idle: weakref.WeakKeyDictionary[AbstractEventLoop, list[_Worker]] = weakref.WeakKeyDictionary()


async def _start() -> _Worker:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    process = await anyio.open_process([sys.executable, "-I", "-c", _SERVE], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", env=env)
    assert process.stdout is not None
    return _Worker(process, BufferedByteReceiveStream(process.stdout))


async def _kill(worker: _Worker) -> None:
    with anyio.CancelScope(shield=True):
        if worker.process.returncode is None:
            worker.process.kill()
        await worker.process.wait()
        await worker.process.aclose()


async def search(request: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """The worker's answer to ``request``, or None when none came within ``deadline`` seconds."""
    idle = _idle.setdefault(get_running_loop(), [])
    worker = None
    while idle and worker is None:
        worker = idle.pop()
        if worker.process.returncode is not None:  # it left on its own (idle too long)
            await _kill(worker)
            worker = None
    worker = worker or await _start()
    kept = False
    try:
        with anyio.move_on_after(deadline):
            assert worker.process.stdin is not None
            try:
                await worker.process.stdin.send(json.dumps(request).encode() + b"\n")
                line = await worker.answers.receive_until(b"\n", ANSWER_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                    anyio.DelimiterNotFound, anyio.IncompleteRead):
                return {"error": "grep: the search failed (its worker exited; the pattern may need too much "
                                 "memory or time)"}
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                return {"error": "grep: the search failed (its worker answered something that is not an answer)"}
            kept = len(idle) < KEPT
            if kept:
                idle.append(worker)
            return answer
        return None
    finally:
        if not kept:
            await _kill(worker)
