"""A Ray worker: an async actor running many jobs through :func:`runner.agent.runjob.run_job` on its own
event loop, with the cluster-wide services of :mod:`.ray_services`.

Each worker builds its own model and HTTP client from :class:`WorkerConfig` (with :mod:`.backend`, as
the local executor does). The API key is never passed: it is read from the worker's environment
(inherited from the driver when the driver starts Ray, or from the environment of ``ray start`` on
each node).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import ray

from ..agent.runjob import Resumed, Services, run_job
from ..agent.session import new_record
from ..compaction.compactor import Compactor
from ..config import RunnerSection, SummarizerSection
from ..jobs import JobSpec
from ..pricing import PriceTable
from ..rundir.docs import JobMetrics
from .backend import build_backend
from .ray_services import RayBudget, RayCallLimit, RayGate


@dataclass
class WorkerConfig:
    """What a worker needs to build its services; plain data, no secrets."""

    backend: str  # "anthropic" or "offline"
    runner: RunnerSection
    summarizer: SummarizerSection
    max_retries: int
    prices: PriceTable
    budget_limit: float | None
    base_url: str | None = None
    deadline: float | None = None  # the run's (epoch seconds)
    batch_jobs: bool = False  # some job's limits set delivery = "batch" (see execution/backend.py)


@ray.remote
class JobWorker:
    def __init__(self, config: WorkerConfig, services: Any, owner: str):
        self.config = config
        self.owner = owner
        self.where = {
            "node": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }
        if config.backend != "offline" and not os.environ.get("ANTHROPIC_API_KEY"):
            raise RuntimeError(
                f"ANTHROPIC_API_KEY is not set in the environment of the Ray worker on "
                f"{socket.gethostname()}; set it where the node's `ray start` runs"
            )
        self.calls, self.gate = RayCallLimit(services, owner), RayGate(services, owner)
        self.model, summarizer = build_backend(
            config.backend,
            runner=config.runner,
            summarizer=config.summarizer,
            max_retries=config.max_retries,
            calls=self.calls,
            gate=self.gate,
            base_url=config.base_url,
            batch_jobs=config.batch_jobs,
        )
        self.services = Services(
            self.model,
            Compactor(summarizer),
            config.summarizer.model,
            config.prices,
            RayBudget(services, config.budget_limit),
            config.deadline,
        )
        self.records: dict[str, JobMetrics] = {}
        self.scopes: dict[str, anyio.CancelScope] = {}

    async def probe(self, path: str, token: str) -> dict[str, Any]:
        """Write ``token`` to ``path`` (a file in the run directory), so the driver can read it back;
        returns where this worker runs and, if it could not write, why."""
        try:
            await anyio.Path(path).write_text(f"{token}\n")
            error = None
        except OSError as e:
            error = f"{type(e).__name__}: {e.strerror or e}"
        return {**self.where, "error": error}

    async def run(self, run_dir: str, spec: JobSpec, resumed: Resumed | None) -> JobMetrics:
        """Run one job to its ending; a cancelled job (:meth:`cancel_all`) returns status ``cancelled``."""
        record = self.records[spec.name] = new_record(spec)
        record.worker = dict(self.where)
        scope = self.scopes[spec.name] = anyio.CancelScope()
        try:
            with scope:
                await run_job(
                    spec, run_dir=Path(run_dir), services=self.services, record=record, resumed=resumed
                )
        finally:
            self.scopes.pop(spec.name, None)
            self.records.pop(spec.name, None)
        return record

    async def poll(self) -> dict[str, dict[str, Any]]:
        """The progress of every job running here."""
        return {name: r.model_dump(mode="json") for name, r in self.records.items()}

    async def cancel_all(self) -> int:
        """Cancel every job running here; each writes its files and its ``run`` returns. Returns how many."""
        for scope in self.scopes.values():
            scope.cancel()
        return len(self.scopes)

    async def settle(self) -> None:
        """Returns once the services actor has carried out every slot release this worker sent."""
        await self.calls.settled()
        await self.gate.settled()

    async def aclose(self) -> None:
        await self.model.aclose()
