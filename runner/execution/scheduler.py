"""The local executor: every job in this process, in one anyio task group, at most ``concurrency`` at a
time, through :func:`runner.agent.runjob.run_job` with the batch's own services; the batch itself
(``run.json``, signals, the display, the ending) is :mod:`.core`'s.

Guarantees:
- Isolation: an exception, a timeout, ``max_turns`` or ``max_cost_usd`` ends only the job it
  happened in; the others run on.
- Cancellation (Ctrl-C or SIGTERM): every running job stops, writes its files with status
  ``cancelled``, and ``run.json`` says so; :func:`run_batch` then reports ``interrupted``.
- ``run.json`` is rewritten (atomically) when a job starts or ends, as often as :mod:`.core`'s rate
  bound lets it; each job's own ``metrics.json`` is always current.
"""

from __future__ import annotations

import anyio

from ..agent.runjob import Resumed, Services, run_job
from ..jobs import JobSpec
from ..rundir.docs import JobMetrics
from .core import Batch, BatchResult, Dispatch, Display, run_batch_with


class InProcess(Dispatch):
    """Each job in the caller's task group, in a cancel scope of its own."""

    def __init__(self, batch: Batch):
        self.run_dir = batch.run_dir
        self.services = Services(
            batch.model, batch.compactor, batch.summary_model, batch.prices, batch.run_budget, batch.deadline
        )
        self.scopes: set[anyio.CancelScope] = set()
        self.cancelled = False

    async def run(self, spec: JobSpec, record: JobMetrics, resumed: Resumed | None) -> JobMetrics:
        with anyio.CancelScope() as scope:
            self.scopes.add(scope)
            if self.cancelled:
                scope.cancel()
            try:
                await run_job(
                    spec, run_dir=self.run_dir, services=self.services, record=record, resumed=resumed
                )
            finally:
                self.scopes.discard(scope)
        return record

    async def cancel(self) -> None:
        self.cancelled = True
        for scope in self.scopes:
            scope.cancel()


async def run_batch(batch: Batch, display: Display | None = None) -> BatchResult:
    return await run_batch_with(batch, InProcess(batch), display)
