"""The batch core every executor shares: what a batch is (:class:`Batch`), how it runs and ends
(:func:`run_batch_with`), parametrized by how one job is dispatched (:class:`Dispatch`: in this
process's task group, or on a Ray worker).

Guarantees:
- At most ``concurrency`` jobs are dispatched at once; a job's failure is its own (``run_job``'s).
- ``run.json`` is written before any job starts, rewritten (atomically) when a job starts or ends, at
  most every ``MIN_INTERVAL_S`` (or 50 times the last rewrite's own time, when longer) between
  the first write and the last, and written last through the disk reserve (``final_write``) with
  state ``finished`` or ``interrupted``; the reserves are then released and the batch's model closed.
- Every job ends in a final state, in ``run.json`` and in :attr:`BatchResult.results`: a task file that
  did not load is ``failed`` (its ``metrics.json`` says why); a job never started when the batch
  stopped is ``not_started`` with the reason when the backend is unusable, else ``cancelled``.
- Signals (with ``handle_signals``; listened for before anything is written): the first SIGINT or
  SIGTERM marks the batch interrupted, starts no more jobs and cancels every running one
  (:meth:`Dispatch.cancel`); each writes its files with status ``cancelled`` and the batch waits for
  them. A second signal stops waiting: a job still running is recorded ``cancelled`` at once (its own
  files are whatever it wrote by then). A third gets Python's default handling.
- A job that meets :class:`~runner.models.base.BackendUnusable` stops the batch as the first signal
  does, but not interrupted: :attr:`BatchResult.fatal` is the one-line reason.
- Bookkeeping per event is O(1) in the jobs of the batch but for a rewrite's join of the rows' texts:
  a row is serialized when it changes (an ended job's once), the totals are kept as rows change.
- Bookkeeping never ends the batch: a failure to write ``run.json``, of the display or of closing
  is a warning on stderr.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from ..agent.runjob import Resumed
from ..agent.session import new_record
from ..compaction.compactor import Compactor
from ..jobs import JobError, JobSpec
from ..messages import Message
from ..models.base import BackendUnusable, Model
from ..pricing import USAGE_KEYS, PriceTable
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
    totals_document,
    totals_of,
)
from ..rundir.reserve import final_write, release
from ..rundir.store import JobStore, overwrite, write_atomic
from ..services import Budget, RunBudget

MIN_INTERVAL_S = 0.5


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
        return (
            not self.interrupted
            and self.kept_ok
            and all(r.status == Status.SUCCEEDED for r in self.results.values())
        )


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
    deadline: float | None = None  # the run's deadline (epoch seconds): every job's timeout ends by then


class Dispatch(Protocol):
    """How an executor runs one job. The core calls :meth:`start` once, :meth:`run` for each job (at
    most ``concurrency`` at once), :meth:`cancel` when the batch stops early, :meth:`finish` once every
    job ended and :meth:`close` last (only after a :meth:`start` that returned)."""

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Before any job: start what the jobs need; background tasks go in ``tasks`` (cancelled when the
        last job ended). A :class:`~runner.config.ConfigError` here ends the batch before anything is
        written; whatever was started is stopped first."""
        return None

    async def run(self, spec: JobSpec, record: JobMetrics, resumed: Resumed | None) -> JobMetrics:
        """Run ``spec`` to its ending and return its result; ``record`` is the job's live record (the
        display and ``run.json`` read it meanwhile). Cancelled by :meth:`cancel`, it returns a result
        with status ``cancelled`` once the job's files are written."""
        ...

    async def cancel(self) -> None:
        """Cancel every job running, and any dispatched from now on."""
        return None

    async def finish(self) -> None:
        """Every job ended, before the last ``run.json`` (it may add to the batch's ``meta``)."""
        return None

    async def close(self) -> None:
        """The batch ended: stop what :meth:`start` started."""
        return None


def ended(spec: JobSpec, status: str, error: str) -> JobMetrics:
    """The record of a job that ended without running."""
    record = new_record(spec)
    record.status, record.error = status, error
    return record


def never_started_ending(fatal: str | None) -> tuple[Status, str]:
    """The status and error of a job whose session never started: ``not_started`` with ``fatal`` (the
    backend is unusable), else ``cancelled``."""
    if fatal:
        return Status.NOT_STARTED, f"not started: {fatal}"
    return Status.CANCELLED, "cancelled before it started"


def unfinished_ending(status: str, *, returned: bool, fatal: str | None) -> tuple[Status, str] | None:
    """The status and error to record for a job whose dispatch ended with ``status`` (``returned``: its
    dispatch returned, else the batch stopped waiting for it), or None when ``status`` stands."""
    if status == Status.QUEUED:  # its session never started
        return never_started_ending(fatal)
    if not returned and status == Status.RUNNING:
        return Status.CANCELLED, "cancelled; the batch stopped waiting for it"
    return None


async def run_batch_with(batch: Batch, dispatch: Dispatch, display: Display | None = None) -> BatchResult:
    """Run ``batch``, each job through ``dispatch``, with ``display`` shown; see the module's guarantees."""
    return await _BatchRun(batch, dispatch, display or NoDisplay()).run()


class _BatchRun:
    """One run of :func:`run_batch_with`: what its jobs share while it runs."""

    def __init__(self, batch: Batch, dispatch: Dispatch, display: Display):
        self.batch, self.dispatch, self.display = batch, dispatch, display
        self.out = BatchResult(
            batch.run_dir, kept_ok=all(m.status == Status.SUCCEEDED for m in batch.kept.values())
        )
        self.progress = {s.name: new_record(s) for s in batch.specs}
        self.run_json = RunJson(batch, self.progress)
        self.limiter = anyio.CapacityLimiter(batch.concurrency)
        self.stopping = anyio.Event()  # no job is dispatched once set
        self.abandoned: list[str] = []  # jobs whose dispatch did not return (the batch stopped waiting)
        self.tasks: anyio.abc.TaskGroup | None = None  # the batch's task group, once it runs

    async def run(self) -> BatchResult:
        batch, dispatch = self.batch, self.dispatch
        started = False
        refused: Exception | None = None  # the dispatch could not start: raised as itself, not in a group
        try:
            async with anyio.create_task_group() as tg:
                self.tasks = tg
                if batch.handle_signals:  # listening before anything is written, so no Ctrl-C is missed
                    await tg.start(on_signals, self.interrupted, tg.cancel_scope.cancel)
                await anyio.Path(batch.run_dir).mkdir(parents=True, exist_ok=True)
                try:
                    await dispatch.start(tg)
                    started = True
                except Exception as e:
                    refused = e
                if started:
                    await self.run_jobs()
                tg.cancel_scope.cancel()  # all jobs ended: stop the signal watcher and the dispatch's tasks
        finally:
            with anyio.CancelScope(shield=True):
                if started:
                    await end(batch, dispatch, self.out, run_json=self.run_json, cancel=bool(self.abandoned))
                release(batch.run_dir, JOBS_RESERVE)
                release(batch.run_dir, RUN_RESERVE)
                if batch.model is not None:  # the HTTP sessions close inside the loop that opened them
                    await quietly(batch.model.aclose(), "could not close the model's connections")
            quietly_call(self.display.stop)
        if refused is not None:
            raise refused
        return self.out

    def stop_jobs(self) -> None:
        """No job is dispatched from now on, and the running ones are cancelled."""
        if not self.stopping.is_set():
            self.stopping.set()
            assert self.tasks is not None
            self.tasks.start_soon(self.cancel_jobs)

    async def cancel_jobs(self) -> None:
        await quietly(self.dispatch.cancel(), "could not cancel the jobs")

    def interrupted(self) -> None:
        self.out.interrupted = True
        self.stop_jobs()

    async def run_jobs(self) -> None:
        for error in self.batch.errors:
            self.out.results[error.name] = await record_load_error(self.batch.run_dir, error)
        for name, result in self.out.results.items():
            self.run_json.ended(name, result)
        await quietly(self.run_json.write(force=True))
        self.display.start(self.progress)
        async with anyio.create_task_group() as jobs:
            for spec in self.batch.specs:
                jobs.start_soon(self.run_one, spec)

    async def run_one(self, spec: JobSpec) -> None:
        async with self.limiter:
            if self.stopping.is_set():
                return  # recorded with the others never started, once the batch ends
            record = result = self.progress[spec.name]
            returned = False
            try:
                self.display.job_started(record)
                self.run_json.job_started(spec.name)
                await quietly(self.run_json.write())
                history = self.batch.histories.get(spec.name)
                resumed = Resumed(history, self.batch.priors.get(spec.name)) if history else None
                result = await self.dispatch.run(spec, record, resumed)
                returned = True
            except BackendUnusable as e:  # no job can run: stop the batch now, the rest stays not_started
                returned = True
                self.out.fatal = self.out.fatal or str(e)
                self.stop_jobs()
            finally:
                await self.job_ended(spec.name, result, returned=returned)

    async def job_ended(self, name: str, result: JobMetrics, *, returned: bool) -> None:
        """Record how ``name`` ended (``returned``: its dispatch returned) in the results, ``run.json``
        and the display."""
        if not returned:
            self.abandoned.append(name)
        if ending := unfinished_ending(result.status, returned=returned, fatal=self.out.fatal):
            result.status, result.error = ending
        self.out.results[name] = result
        self.run_json.ended(name, result)
        with anyio.CancelScope(shield=True):
            await quietly(self.run_json.write())
        quietly_call(self.display.job_finished, result)


async def end(batch: Batch, dispatch: Dispatch, out: BatchResult, *, run_json: RunJson, cancel: bool) -> None:
    """The batch's ending: jobs the batch stopped waiting for are cancelled (``cancel``), those never
    started recorded so, the last ``run.json`` written through the disk reserve, the dispatch closed."""
    if cancel:
        await quietly(dispatch.cancel(), "could not cancel the jobs")
    for spec in batch.specs:
        if spec.name not in out.results:
            out.results[spec.name] = ended(spec, *never_started_ending(out.fatal))
            run_json.ended(spec.name, out.results[spec.name])
    run_json.finished = True
    run_json.interrupted = out.interrupted
    await quietly(dispatch.finish(), "could not finish the batch")
    await quietly(
        final_write(
            batch.run_dir,
            lambda: run_json.write(force=True),
            lambda: overwrite(batch.run_dir / RUN_JSON, run_json.text()),
            reserve=RUN_RESERVE,
        )
    )
    await quietly(dispatch.close(), "could not stop the executor")


async def on_signals(
    first: Callable[[], None],
    second: Callable[[], None],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """``first()`` on the first SIGINT or SIGTERM, ``second()`` on the next; then stops listening."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        seen = 0
        async for _ in signals:
            seen += 1
            (first if seen == 1 else second)()
            if seen > 1:
                return


async def quietly(awaitable: Awaitable[Any], what: str = "could not update run.json") -> None:
    """Bookkeeping after a job ended must not end the batch; the job's own files say what happened.
    The failure is still reported, on stderr."""
    try:
        await awaitable
    except Exception as e:
        print(f"warning: {what}: {type(e).__name__}: {e}", file=sys.stderr)


def quietly_call(fn: Callable[..., None], *args: Any) -> None:
    """The display failing must not end the batch (the jobs' files and run.json say what happened);
    the failure is still reported, on stderr."""
    try:
        fn(*args)
    except Exception as e:
        print(f"warning: the progress display failed: {type(e).__name__}: {e}", file=sys.stderr)


async def record_load_error(run_dir: Path, error: JobError) -> JobMetrics:
    """A task file that did not load: its job ``failed``, its ``metrics.json`` saying why."""
    result = JobMetrics(job=error.name, status=Status.FAILED, error=error.message)
    store = JobStore(run_dir / error.name)
    await store.open()
    await store.write_json(METRICS, result.document())
    return result


class RunJson:
    """``run.json`` of a batch: kept jobs, load errors, ended jobs' results and running jobs' live rows.

    Each row is serialized when it changes, not at every write: an ended job's row once, a running
    job's live row when its status or turns moved, a queued job's once; the totals are kept as rows
    change. A write joins the rows' texts, so its cost on the loop grows with the jobs only by a join.
    """

    def __init__(self, batch: Batch, progress: dict[str, JobMetrics]):
        self.batch = batch
        self.progress = progress
        self.results: dict[str, JobMetrics] = {}  # set through :meth:`ended`
        self.started = time.time()
        self.finished = False
        self.interrupted = False
        self._lock = anyio.Lock()
        self._last_write = float("-inf")
        self._interval = MIN_INTERVAL_S
        self._sources = {
            **{e.name: str(e.source.absolute()) for e in batch.errors},
            **{s.name: str(s.source.absolute()) for s in batch.specs},
        }
        names = [*batch.kept, *(e.name for e in batch.errors), *(s.name for s in batch.specs)]
        self._index = {name: i for i, name in enumerate(dict.fromkeys(names))}
        self._texts: list[str] = [""] * len(self._index)
        self._rows: list[JobMetrics] = [JobMetrics()] * len(self._index)
        self._keys: list[object] = [None] * len(self._index)
        self._totals = _Totals()
        self._live: set[str] = set()  # jobs started and not ended: their rows are looked at on each write
        for name in self._index:
            self._refresh(name)

    def ended(self, name: str, result: JobMetrics) -> None:
        """``name`` ended with ``result`` (final from now on: its row is made once)."""
        self.results[name] = result
        self._live.discard(name)
        self._refresh(name)

    def job_started(self, name: str) -> None:
        """``name`` was dispatched: its live row follows its record until it ends."""
        if name not in self.results:
            self._live.add(name)

    def _refresh(self, name: str) -> None:
        """Make ``name``'s row again if what it shows changed since it was last made."""
        i = self._index[name]
        if name in self.results:
            result = self.results[name]
            key: object = result
            if self._keys[i] is result:
                return
            make = lambda: JobMetrics.model_validate(result.document())  # noqa: E731
        elif name in self.batch.kept:
            key = "kept"
            if self._keys[i] == key:
                return
            make = self.batch.kept[name].model_copy
        else:
            # running until its session has written its files and returned (a task file that did not
            # load is queued until its failure is recorded, before the first write)
            p = self.progress.get(name) or JobMetrics(job=name, status=Status.QUEUED)
            status = p.status if p.status in LIVE_STATUSES else Status.RUNNING
            key = (status, p.turns)
            if self._keys[i] == key:
                return
            make = lambda: JobMetrics(job=name, status=status, turns=p.turns)  # noqa: E731
        row = make()
        if name in self._sources:
            row.source = self._sources[name]
        if self._keys[i] is not None:
            self._totals.add(self._rows[i], -1)
        self._totals.add(row)
        self._rows[i], self._keys[i] = row, key
        self._texts[i] = json.dumps(row.to_json(), ensure_ascii=False)

    async def write(self, force: bool = False) -> None:
        """Rewrite run.json; between the first and the last write, at most every ``MIN_INTERVAL_S``, or
        every 50 times the last write's time (made and written) when that is longer (each write lists every
        job, so writing on every event, or every half second in a batch of any size, would cost
        O(jobs^2)). Each job's own metrics.json is always current; ``runner resume`` trusts those."""
        if not force and time.monotonic() - self._last_write < self._interval:
            return
        async with self._lock:
            if not force and time.monotonic() - self._last_write < self._interval:
                return  # another writer did it while this one waited
            began = time.monotonic()
            self._last_write = began
            try:
                await write_atomic(self.batch.run_dir / RUN_JSON, self.text())
            finally:
                self._interval = max(MIN_INTERVAL_S, 50 * (time.monotonic() - began))

    def text(self) -> str:
        """run.json as :func:`~runner.rundir.docs.run_json_text` writes :meth:`document`, from the
        rows made so far (the live ones made again where they changed)."""
        for name in list(self._live):
            self._refresh(name)
        head = {**self._head().head(), "totals": self._totals.document(len(self._texts))}
        jobs = ",\n    ".join(self._texts)
        return json.dumps(head, ensure_ascii=False)[:-1] + f', "jobs": [\n    {jobs}\n]}}\n'

    def _head(self, jobs: list[JobMetrics] | None = None) -> RunDocument:
        state = (
            RunState.INTERRUPTED
            if self.interrupted
            else (RunState.FINISHED if self.finished else RunState.RUNNING)
        )
        return RunDocument(
            run_id=self.batch.run_dir.name,
            state=state,
            started=self.started,
            updated=time.time(),
            **self.batch.meta,
            totals={} if jobs is None else totals_of(jobs),
            jobs=jobs or [],
        )

    def document(self) -> RunDocument:
        """run.json as a document, every row made again from the records."""
        for name in self._index:
            self._refresh(name)
        return self._head([row.model_copy() for row in self._rows])


class _Totals:
    """:func:`~runner.rundir.docs.totals_of` kept as rows are added and removed."""

    def __init__(self) -> None:
        self.cost = 0.0
        self.turns = 0
        self.statuses: Counter[str] = Counter()
        self.usage = dict.fromkeys(USAGE_KEYS, 0)

    def add(self, row: JobMetrics, sign: int = 1) -> None:
        self.cost += sign * row.cost_usd
        self.turns += sign * row.turns
        self.statuses[row.status] += sign
        for key in USAGE_KEYS:
            self.usage[key] += sign * row.usage_total(key)

    def document(self, jobs: int) -> dict[str, int | float]:
        statuses = {status: self.statuses[status] for status in Status}
        return totals_document(
            jobs=jobs, cost_usd=self.cost, turns=self.turns, statuses=statuses, usage=self.usage
        )
