"""The ``ray`` executor's driver: starts (or joins) Ray, starts the run's services actor and its
workers, assigns jobs and collects their results; the batch itself (``run.json``, signals, the live
display, the ending) is :mod:`.core`'s, as for the local executor.

Guarantees:
- Before any job starts, every worker writes a probe file into the run directory and the driver
  reads it back: a worker that cannot see the run directory is one :class:`ConfigError`.
- A worker process that dies (kill -9, its node lost) loses no job: each of its jobs continues on
  another worker from its last complete turn (as ``runner resume`` would continue it), at most
  ``MAX_REQUEUES`` times per job; a replacement worker is started to keep the pool's size.
- A worker is declared dead once, by whichever comes first: Ray reports it (a job's or a poll's
  ``RayActorError``) or it stops answering polls for ``stall_s`` seconds (its event loop blocked,
  the process stopped). Declaring it dead kills it (``ray.kill``; SIGKILL too when it runs on the
  driver's node), gives back every slot it held at the services actor and fences it there, and
  only then are its jobs continued elsewhere: a job, and the call it had in flight, runs again
  exactly once per death, never on two workers at once. ``run.json``'s ``workers`` say which were
  lost, why, and what was given back for each.
- Ctrl-C (SIGINT or SIGTERM) cancels every job on every worker; each writes its files with status
  ``cancelled`` and the batch reports ``interrupted``. A second Ctrl-C stops waiting for them.
  A job a worker was still running when the batch stopped waiting is cancelled there at the end.
- Every job ends in a final state in ``run.json``, which also gets the services actor's counts
  once every job ended and every live worker's slot releases were carried out there, waited for at
  most ``SETTLE_WAIT_S`` (``slots_at_end``: all zero unless a slot leaked; a release still on its way
  is not counted as held, unless that wait ran out, which is warned about). Jobs the batch stopped
  waiting for may still be unwinding: their releases are not waited for.
- A Ray instance the runner starts (no ``ray_address``: :func:`start_local_ray`) is this machine's
  alone: always a new one (``address="local"``, never a cluster found running), its node's address
  127.0.0.1, so every server of it listens on the loopback only, with the token authentication this
  Ray turns on for a local instance (unless ``RAY_AUTH_MODE`` says otherwise). Ray takes the address
  from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its own single-machine switch, read when ``ray`` is
  imported: this module sets it, unless it is set, before importing ``ray``); an instance that came
  up on another address is shut down at once, a :class:`ConfigError`. Joining a cluster
  (``ray_address``) is not changed by it: the driver finds its node through the cluster.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from ..agent.continuation import cut_transcript
from ..agent.runjob import Resumed
from ..agent.spend import mirror
from ..config import ConfigError, Settings
from ..jobs import JobSpec
from ..messages import one_line
from ..models.base import BackendUnusable
from ..rundir.docs import (
    EVENTS,
    JobMetrics,
    Status,
    WorkerLostEvent,
    event_lines,
    probe_name,
    read_metrics,
)
from ..rundir.store import read_jsonl, write_atomic_sync
from .core import Batch, BatchResult, Dispatch, Display, ended, quietly, run_batch_with

# Ray's own switch for an instance of one machine (its node's address the loopback), read when ray is
# imported: set before the first import of it (see the module's guarantees); an explicit value is kept
LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
os.environ.setdefault(LOCAL_ONLY, "0")

import ray  # noqa: E402
from ray.exceptions import RayActorError  # noqa: E402

from .ray_services import SLOT_KEYS, RunServices, leaked  # noqa: E402
from .ray_worker import JobWorker, WorkerConfig  # noqa: E402

MAX_REQUEUES = 3
POLL_INTERVAL_S = 0.5
POLL_WAIT_S = 2.0  # a poll not answered by then is retried next round
STALL_S = 60.0  # a worker that answered no poll for this long is declared dead
CANCEL_WAIT_S = 30.0
SETTLE_WAIT_S = 10.0  # for the live workers' slot releases at the end, before the counts are read


def continue_point(job_dir: Path, spec: JobSpec, lost: dict[str, Any]) -> Resumed | None:
    """Where a job whose worker (``lost``) died continues: its transcript cut back to the last complete
    turn (rewritten so), and its metrics so far; ``None`` to start it over (no usable transcript).
    ``events.jsonl`` gets a ``worker_lost`` line saying from which message the job continues and how
    many model turns it lost (they run again). A job the worker had not started yet (no directory)
    simply starts."""
    if not job_dir.is_dir():
        return None
    cut = cut_transcript(job_dir, spec.prompt)
    events, _ = read_jsonl(job_dir / EVENTS)
    events.append(
        WorkerLostEvent(
            worker=lost, continue_from_message=len(cut.history or []), turns_rerun=cut.turns_rerun
        ).line()
    )
    # rewritten whole: a half-written last line (the worker died mid-write) is dropped
    write_atomic_sync(job_dir / EVENTS, event_lines(events))
    if cut.history is None:
        return None
    return Resumed(cut.history, read_metrics(job_dir))


async def _answer(ref: Any, what: str) -> Any:
    """``await ref``; ``None`` (and a warning on stderr) when it fails: bookkeeping never ends the batch."""
    try:
        return await ref
    except Exception as e:  # noqa: BLE001
        print(f"warning: {what}: {type(e).__name__}: {one_line(str(e))}", file=sys.stderr)
        return None


def worker_config(batch: Batch, settings: Settings) -> WorkerConfig:
    return WorkerConfig(
        backend=str(batch.meta.get("backend", "offline")),
        runner=settings.runner,
        summarizer=settings.summarizer,
        max_retries=settings.limits.max_retries,
        prices=batch.prices,
        budget_limit=batch.run_budget.limit,
        base_url=os.environ.get("ANTHROPIC_BASE_URL"),
        deadline=batch.deadline,
        batch_jobs=any(spec.limits.delivery == "batch" for spec in batch.specs),
    )


@dataclass
class _Worker:
    owner: str
    handle: Any
    where: dict[str, Any] = field(default_factory=dict)
    load: int = 0


class Pool:
    """The run's workers: started and probed, picked least loaded, replaced when one dies."""

    def __init__(self, run_dir: Path, config: WorkerConfig, services: Any, size: int):
        self.run_dir = run_dir
        self.node_id = ray.get_runtime_context().get_node_id()
        self.config = config
        self.services = services
        self.size = size
        self.live: dict[str, _Worker] = {}
        self.started: list[dict[str, Any]] = []  # every worker started, for run.json
        self.handles: list[Any] = []
        self.lost: list[str] = []
        self._ids = 0
        self._lock = anyio.Lock()

    async def _start_one(self) -> _Worker:
        self._ids += 1
        owner = f"w{self._ids}-{secrets.token_hex(3)}"
        handle = JobWorker.options(  # type: ignore[attr-defined]  # a @ray.remote class
            max_concurrency=self.config.runner.concurrency + 16, scheduling_strategy="SPREAD"
        ).remote(self.config, self.services, owner)
        worker = _Worker(owner, handle)
        self.handles.append(handle)
        answer = await self._probe(worker)
        worker.where = {k: answer[k] for k in ("node", "node_id", "pid")}
        self.live[owner] = worker
        self.started.append({"owner": owner, **worker.where})
        return worker

    async def _probe(self, worker: _Worker) -> dict[str, Any]:
        token = secrets.token_hex(8)
        path = self.run_dir.absolute() / probe_name(worker.owner)
        try:
            answer = await worker.handle.probe.remote(str(path), token)
        except RayActorError as e:
            raise ConfigError(
                [f"ray executor: a worker could not start: {one_line(str(e.__cause__ or e))}"]
            ) from None
        where = f"ray worker on {answer['node']} (pid {answer['pid']})"
        try:
            seen = path.read_text(encoding="utf-8").strip()
            path.unlink()
        except OSError:
            seen = None
        if answer["error"] or seen != token:
            reason = answer["error"] or f"its probe file {path.name} did not appear on the driver's side"
            raise ConfigError(
                [
                    f"{self.run_dir}: the {where} cannot see the run directory ({reason}); on a "
                    "multi-machine cluster the run directory must be on storage every node sees, "
                    "at the same path"
                ]
            )
        return answer

    async def start(self) -> None:
        """Start and probe every worker; the first problem found is the one raised."""
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(self.size):
                    tg.start_soon(self._start_one)
        except BaseExceptionGroup as group:
            problems = group.subgroup(lambda e: isinstance(e, ConfigError))
            first = problems.exceptions[0] if problems else group.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None

    def pick(self) -> _Worker:
        return min(self.live.values(), key=lambda w: w.load)

    async def replace(self, worker: _Worker, reason: str = "died") -> None:
        """Declare ``worker`` dead (``reason``: ``died``, Ray said so; ``stalled``, it stopped answering):
        kill it, give back and fence what it held at the services, start another in its place. Only
        the first call for a worker does this; every caller returns once it is done."""
        async with self._lock:
            if self.live.pop(worker.owner, None) is None:
                return  # another of its jobs already reported it
            self.lost.append(worker.owner)
            entry = next((e for e in self.started if e["owner"] == worker.owner), {})
            entry.update(lost=True, lost_because=reason)
            self._kill(worker)
            entry["released"] = (
                await _answer(
                    self.services.release_owner.remote(worker.owner),
                    "could not give back a lost worker's slots",
                )
                or {}
            )
            if len(self.live) < self.size and len(self.lost) <= 4 * self.size:
                try:
                    await self._start_one()
                except Exception:  # noqa: BLE001 - the live workers carry on; none left is the error below
                    pass
            if not self.live:
                raise RuntimeError("ray executor: every worker died and none could be started")

    def _kill(self, worker: _Worker) -> None:
        """Make sure ``worker`` runs nothing more: a worker Ray lost touch with, or one that stopped
        answering, may still be alive (a stopped process survives ``ray.kill``)."""
        try:
            ray.kill(worker.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        pid = worker.where.get("pid")
        if worker.where.get("node_id") == self.node_id and isinstance(pid, int) and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # already gone

    def close(self) -> None:
        for handle in self.handles:
            ray.kill(handle)


class OnRay(Dispatch):
    """Each job on the least loaded worker of a :class:`Pool`, its progress polled into its record;
    continued on another worker when its worker dies."""

    def __init__(
        self,
        batch: Batch,
        settings: Settings,
        *,
        workers: int | None,
        summary_window_s: float,
        stall_s: float,
    ):
        self.batch = batch
        self.settings = settings
        self.workers = workers
        self.summary_window_s = summary_window_s
        self.stall_s = stall_s
        self.records: dict[str, JobMetrics] = {}  # the jobs on a worker now, polled
        self.stopping = False

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        batch, s = self.batch, self.settings.summarizer
        self.services = RunServices.options(  # type: ignore[attr-defined]  # a @ray.remote class
            name=f"runner-services-{batch.run_dir.name}-{secrets.token_hex(3)}", get_if_exists=True
        ).remote(
            s.max_concurrent,
            s.requests_per_minute,
            self.summary_window_s,
            self.settings.runner.concurrency,
            batch.run_budget.limit,
        )
        size = self.workers or max(1, min(batch.concurrency, int(ray.available_resources().get("CPU", 1))))
        self.pool = Pool(batch.run_dir, worker_config(batch, self.settings), self.services, size)
        try:
            await self.pool.start()
        except BaseException:
            self.pool.close()
            ray.kill(self.services)
            raise
        batch.meta = {**batch.meta, "executor": "ray", "workers": self.pool.started}
        tasks.start_soon(self.poll)

    async def run(self, spec: JobSpec, record: JobMetrics, resumed: Resumed | None) -> JobMetrics:
        if self.stopping:
            return record
        self.records[spec.name] = record
        last = ""
        try:
            for attempt in range(MAX_REQUEUES + 1):
                worker = self.pool.pick()
                worker.load += 1
                try:
                    result: JobMetrics = await worker.handle.run.remote(
                        str(self.batch.run_dir.absolute()), spec, resumed
                    )
                    return result
                except RayActorError as e:
                    await self.pool.replace(worker)
                    if self.stopping:
                        return ended(spec, Status.CANCELLED, "cancelled; its worker died")
                    last = type(e).__name__
                    if attempt < MAX_REQUEUES:
                        resumed = await anyio.to_thread.run_sync(
                            continue_point,
                            self.batch.run_dir / spec.name,
                            spec,
                            {"owner": worker.owner, **worker.where},
                        )
                except BackendUnusable as e:  # Ray's error for it is one too, and carries the worker's
                    record.status, record.error = Status.FAILED, str(getattr(e, "cause", e))
                    raise BackendUnusable(record.error) from None
                finally:
                    worker.load -= 1
        finally:
            self.records.pop(spec.name, None)
        return ended(
            spec, Status.FAILED, one_line(f"its Ray worker died {MAX_REQUEUES + 1} times; last: {last}")
        )

    async def watch(self, worker: _Worker) -> None:
        """Poll one worker for its jobs' progress; declare it dead when Ray says so or when it has
        answered no poll for ``stall_s`` seconds."""
        answered = anyio.current_time()
        while worker.owner in self.pool.live:
            await anyio.sleep(POLL_INTERVAL_S)
            states = None
            try:
                with anyio.move_on_after(POLL_WAIT_S):
                    states = await worker.handle.poll.remote()
            except RayActorError:
                await self.pool.replace(worker, "died")
                return
            if states is None:
                if anyio.current_time() - answered >= self.stall_s and worker.owner in self.pool.live:
                    await self.pool.replace(worker, "stalled")
                    return
                continue
            answered = anyio.current_time()
            for name, state in states.items():
                if name in self.records:
                    mirror(self.records[name], JobMetrics.model_validate(state))

    async def poll(self) -> None:
        watched: set[str] = set()
        async with anyio.create_task_group() as watchers:
            while True:
                for owner, worker in list(self.pool.live.items()):
                    if owner not in watched:
                        watched.add(owner)
                        watchers.start_soon(self.watch, worker)
                await anyio.sleep(POLL_INTERVAL_S)

    async def cancel(self) -> None:
        """Cancel every job on every worker (each writes its files and its ``run`` returns)."""
        self.stopping = True
        with anyio.move_on_after(CANCEL_WAIT_S):
            for worker in list(self.pool.live.values()):
                await quietly(worker.handle.cancel_all.remote(), "could not cancel a Ray worker's jobs")

    async def finish(self) -> None:
        """The services actor's counts, once every job ended, into ``run.json``: read after each live
        worker's releases were carried out (a worker sends them without waiting, and Ray may deliver
        one after this question)."""
        with anyio.move_on_after(SETTLE_WAIT_S) as settling:
            async with anyio.create_task_group() as tg:  # every worker at once: a slow one delays no other
                for worker in list(self.pool.live.values()):
                    tg.start_soon(
                        _answer, worker.handle.settle.remote(), "could not settle a Ray worker's releases"
                    )
        if settling.cancelled_caught:  # the counts below may then show a release still on its way
            print(
                f"warning: a Ray worker's slot releases were not all carried out in {SETTLE_WAIT_S:g} s; "
                "slots_at_end may count them as held",
                file=sys.stderr,
            )
        with anyio.move_on_after(10):
            slots = await _answer(self.services.state.remote(), "could not read the services' counts")
            if slots is not None:
                self.batch.meta = {
                    **self.batch.meta,
                    "slots_at_end": {"leaked": leaked(slots), **{k: slots[k] for k in SLOT_KEYS}},
                }

    async def close(self) -> None:
        for worker in list(self.pool.live.values()):
            with anyio.move_on_after(5):
                await quietly(worker.handle.aclose.remote(), "could not close a Ray worker's model")
        self.pool.close()
        ray.kill(self.services)


async def run_batch_ray(
    batch: Batch,
    settings: Settings,
    display: Display | None = None,
    *,
    workers: int | None = None,
    summary_window_s: float = 60.0,
    stall_s: float = STALL_S,
) -> BatchResult:
    """:func:`runner.execution.scheduler.run_batch` on the Ray cluster this process is connected to."""
    dispatch = OnRay(batch, settings, workers=workers, summary_window_s=summary_window_s, stall_s=stall_s)
    return await run_batch_with(batch, dispatch, display)


LOOPBACK = ("127.0.0.1", "::1")


def start_local_ray(**options: Any) -> None:
    """Start a new Ray instance on this machine for this process (``ray.init(address="local",
    **options)``), every server of it on the loopback only; :class:`ConfigError` (the instance shut
    down) when its node came up on another address."""
    ray.init(address="local", **options)
    where = sorted({str(node.get("NodeManagerAddress")) for node in ray.nodes()})
    if not where or any(address not in LOOPBACK for address in where):
        ray.shutdown()
        raise ConfigError(
            [
                f"ray executor: the local Ray instance came up on {', '.join(where) or 'no address'}, "
                f"reachable from the network, not on 127.0.0.1 ({LOCAL_ONLY} = "
                f"{os.environ.get(LOCAL_ONLY)!r}; it must be 0 when ray is imported); to use Ray across "
                "machines start a cluster (`ray start`, see the README) and set runner.ray_address"
            ]
        )


def run_on_ray(batch: Batch, settings: Settings, display: Display | None = None) -> BatchResult:
    """Connect to Ray (``[runner] ray_address``; none: start a local instance on the loopback, see
    :func:`start_local_ray`), run the batch, disconnect."""
    started = not ray.is_initialized()
    if started:
        address = settings.runner.ray_address
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
            "configure_logging": True,
        }
        try:
            if address:
                ray.init(address=address, **options)
            else:
                start_local_ray(**options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(
                [
                    f"runner.ray_address: could not connect to Ray at {address!r}: {one_line(str(e))}"
                    if address
                    else f"ray executor: could not start Ray: {one_line(str(e))}"
                ]
            ) from None
    try:
        return anyio.run(run_batch_ray, batch, settings, display)
    finally:
        if started:
            ray.shutdown()
