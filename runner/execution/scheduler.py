"""The batch: every job in one anyio task group, at most ``concurrency`` at a time.

Guarantees:
- Isolation: an exception, a timeout, ``max_turns`` or ``max_cost_usd`` ends only the job it
  happened in; the others run on.
- Cancellation (Ctrl-C or SIGTERM): every running job stops, writes its files with status
  ``cancelled``, and ``run.json`` says so; :func:`run_batch` then reports ``interrupted``.
- ``run.json`` is rewritten (atomically) whenever a job starts or ends, so it is always current.
"""

from __future__ import annotations

import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from ..agent.runjob import Resumed, Services, run_job
from ..agent.session import new_record
from ..compaction.compactor import Compactor
from ..jobs import JobError, JobSpec
from ..messages import Message
from ..models.base import BackendUnusable, Model
from ..pricing import PriceTable
from ..rundir.docs import (
    JOBS_RESERVE,
    LIVE_STATUSES,
    METRICS,
    RUN_JSON,
    RUN_RESERVE,
    JobMetrics,
    RunDocument,
    RunState,
    Status,
    run_json_text,
    totals_of,
)
from ..rundir.reserve import final_write, release
from ..rundir.store import JobStore, overwrite, write_atomic
from ..services import Budget, RunBudget


class Display(Protocol):
    def start(self, progress: dict[str, JobMetrics]) -> None: ...
    def job_started(self, progress: JobMetrics) -> None: ...
    def job_finished(self, result: JobMetrics) -> None: ...
    def stop(self) -> None: ...


class NoDisplay:
    def start(self, progress: dict[str, JobMetrics]) -> None: ...
    def job_started(self, progress: JobMetrics) -> None: ...
    def job_finished(self, result: JobMetrics) -> None: ...
    def stop(self) -> None: ...


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


@dataclass
class BatchResult:
    run_dir: Path
    results: dict[str, JobMetrics] = field(default_factory=dict)
    interrupted: bool = False
    fatal: str | None = None  # the backend cannot serve the batch (one line: base URL and error)
    kept_ok: bool = True  # every job kept from earlier (not rerun) had succeeded

    @property
    def ok(self) -> bool:
        return not self.interrupted and self.kept_ok and all(r.status == Status.SUCCEEDED for r in self.results.values())


@dataclass
class Batch:
    """What to run and with what; ``histories`` continue resumed jobs from their transcripts."""

    run_dir: Path
    specs: list[JobSpec]
    model: Model
    compactor: Compactor
    summary_model: str
    concurrency: int
    errors: list[JobError] = field(default_factory=list)
    histories: dict[str, list[Message]] = field(default_factory=dict)
    priors: dict[str, JobMetrics] = field(default_factory=dict)  # metrics of resumed jobs so far
    kept: dict[str, JobMetrics] = field(default_factory=dict)  # earlier results of jobs not rerun
    meta: dict[str, Any] = field(default_factory=dict)
    handle_signals: bool = True
    run_budget: Budget = field(default_factory=RunBudget)
    prices: PriceTable = field(default_factory=PriceTable)


async def run_batch(batch: Batch, display: Display | None = None) -> BatchResult:
    display = display or NoDisplay()
    out = BatchResult(batch.run_dir, kept_ok=all(m.status == Status.SUCCEEDED for m in batch.kept.values()))
    progress = {s.name: new_record(s) for s in batch.specs}
    run_json = _RunJson(batch, progress)
    limiter = anyio.CapacityLimiter(batch.concurrency)
    services = Services(batch.model, batch.compactor, batch.summary_model, batch.prices, batch.run_budget)
    stop = _Stop()

    async def run_one(spec: JobSpec) -> None:
        async with limiter:
            result = progress[spec.name]
            try:
                display.job_started(result)
                await _quietly(run_json.write())
                history = batch.histories.get(spec.name)
                resumed = Resumed(history, batch.priors.get(spec.name)) if history else None
                await run_job(spec, run_dir=batch.run_dir, services=services, record=result, resumed=resumed)
            except BackendUnusable as e:  # no job can run: stop the batch now, the rest stays not_started
                out.fatal = out.fatal or str(e)
                stop.cancel()
            finally:
                if result.status == Status.QUEUED:  # its session never started
                    result.status, result.error = Status.CANCELLED, "cancelled before it started"
                out.results[spec.name] = result
                run_json.results[spec.name] = result
                with anyio.CancelScope(shield=True):
                    await _quietly(run_json.write())
                _quietly_call(display.job_finished, result)

    try:
        async with anyio.create_task_group() as tg:
            if batch.handle_signals:  # listening before anything is written, so no Ctrl-C is missed
                await tg.start(_cancel_on_signal, tg.cancel_scope, lambda: setattr(out, "interrupted", True))
            await anyio.Path(batch.run_dir).mkdir(parents=True, exist_ok=True)
            for error in batch.errors:
                out.results[error.name] = await _record_load_error(batch.run_dir, error)
            run_json.results.update(out.results)
            await _quietly(run_json.write(force=True))
            display.start(progress)
            async with anyio.create_task_group() as jobs:
                stop.append(jobs.cancel_scope)
                for spec in batch.specs:
                    jobs.start_soon(run_one, spec)
            tg.cancel_scope.cancel()  # all jobs ended: stop the signal watcher
    finally:
        for spec in batch.specs:  # jobs that never started when the batch was cancelled
            if spec.name not in out.results:
                out.results[spec.name] = ended(spec, Status.NOT_STARTED, f"not started: {out.fatal}") if out.fatal \
                    else ended(spec, Status.CANCELLED, "cancelled before it started")
                run_json.results[spec.name] = out.results[spec.name]
        run_json.finished = True
        run_json.interrupted = out.interrupted
        with anyio.CancelScope(shield=True):
            await _quietly(final_write(batch.run_dir, lambda: run_json.write(force=True),
                                       lambda: overwrite(batch.run_dir / RUN_JSON, run_json_text(run_json.document())),
                                       RUN_RESERVE))
            release(batch.run_dir, JOBS_RESERVE)
            release(batch.run_dir, RUN_RESERVE)
            if batch.model is not None:  # the HTTP sessions close inside the loop that opened them
                await _quietly(batch.model.aclose(), "could not close the model's connections")
        _quietly_call(display.stop)
    return out


async def _quietly(awaitable: Any, what: str = "could not update run.json") -> None:
    """Bookkeeping after a job ended must not end the batch; the job's own files say what happened.
    The failure is still reported, on stderr."""
    try:
        await awaitable
    except Exception as e:
        print(f"warning: {what}: {type(e).__name__}: {e}", file=sys.stderr)


class _Stop(list[anyio.CancelScope]):
    """The jobs' cancel scope, once the task group exists."""

    def cancel(self) -> None:
        for scope in self:
            scope.cancel()


def _quietly_call(fn: Callable[..., None], *args: Any) -> None:
    """The display failing must not end the batch (the jobs' files and run.json say what happened);
    the failure is still reported, on stderr."""
    try:
        fn(*args)
    except Exception as e:
        print(f"warning: the progress display failed: {type(e).__name__}: {e}", file=sys.stderr)



async def _cancel_on_signal(scope: anyio.CancelScope, mark: Callable[[], None], *,
                            task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            mark()
            scope.cancel()
            return


def ended(spec: JobSpec, status: str, error: str) -> JobMetrics:
    """The record of a job that ended without running."""
    record = new_record(spec)
    record.status, record.error = status, error
    return record


async def _record_load_error(run_dir: Path, error: JobError) -> JobMetrics:
    result = JobMetrics(job=error.name, status=Status.FAILED, error=error.message)
    store = JobStore(run_dir / error.name)
    await store.open()
    await store.write_json(METRICS, result.document())
    return result


MIN_INTERVAL_S = 0.5


class _RunJson:
    def __init__(self, batch: Batch, progress: dict[str, JobMetrics]):
        self.batch = batch
        self.progress = progress
        self.results: dict[str, JobMetrics] = {}
        self.started = time.time()
        self.finished = False
        self.interrupted = False
        self._lock = anyio.Lock()
        self._last_write = float("-inf")
        self._rows: dict[str, tuple[JobMetrics, JobMetrics]] = {}  # an ended job's row, made once

    async def write(self, force: bool = False) -> None:
        """Rewrite run.json; between the first and the last write, at most every ``MIN_INTERVAL_S``
        (each write lists every job, so writing on every event would cost O(jobs^2) in a big batch).
        Each job's own metrics.json is always current; ``runner resume`` trusts those."""
        if not force and time.monotonic() - self._last_write < MIN_INTERVAL_S:
            return
        async with self._lock:
            if not force and time.monotonic() - self._last_write < MIN_INTERVAL_S:
                return  # another writer did it while this one waited
            self._last_write = time.monotonic()
            await write_atomic(self.batch.run_dir / RUN_JSON, run_json_text(self.document()))

    def document(self) -> RunDocument:
        jobs: list[JobMetrics] = []
        names = [*self.batch.kept, *(e.name for e in self.batch.errors), *(s.name for s in self.batch.specs)]
        sources = {**{e.name: str(e.source.absolute()) for e in self.batch.errors},
                   **{s.name: str(s.source.absolute()) for s in self.batch.specs}}
        for name in dict.fromkeys(names):
            if name in self.results:
                result = self.results[name]
                row = self._rows.get(name)
                if row is None or row[0] is not result:  # a result is final once it is here
                    row = self._rows[name] = (result, JobMetrics.model_validate(result.document()))
                job = row[1]
            elif name in self.batch.kept:
                job = self.batch.kept[name].model_copy()
            else:
                p = self.progress[name]  # running until its session has written its files and returned
                job = JobMetrics(job=name, status=p.status if p.status in LIVE_STATUSES else Status.RUNNING,
                                 turns=p.turns)
            if name in sources:
                job.source = sources[name]
            jobs.append(job)
        state = RunState.INTERRUPTED if self.interrupted else (RunState.FINISHED if self.finished else RunState.RUNNING)
        return RunDocument(run_id=self.batch.run_dir.name, state=state, started=self.started, updated=time.time(),
                           **self.batch.meta, totals=totals_of(jobs), jobs=jobs)
