"""``run_job``: the seam where one job runs. Every executor calls it, each with its own implementation
of the services (in this process for the local executor; cluster-wide ones elsewhere).

Guarantees: it never raises for the job's own failure (the result says ``failed`` and why, and the
job's files are written); it raises only when cancelled, after the job's files are written with
status ``cancelled``, and with :class:`~runner.models.base.BackendUnusable` when the backend refuses
every call (bad credentials, nothing listening), so the executor can stop the batch.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ..jobs import JobSpec
from ..messages import Message, one_line
from ..models.base import BackendUnusable
from ..rundir.docs import JobMetrics, Status
from ..rundir.store import JobStore
from .session import Session, new_record
from .shared import Services

__all__ = ["Resumed", "Services", "run_job"]


@dataclass
class Resumed:
    """Where a resumed job continues: its history so far and what it had spent."""

    history: list[Message]
    prior: JobMetrics | None  # its metrics.json so far, if it had one


async def run_job(
    spec: JobSpec,
    *,
    run_dir: Path,
    services: Services,
    record: JobMetrics | None = None,
    resumed: Resumed | None = None,
) -> JobMetrics:
    """Run ``spec`` to an ending in ``run_dir/<name>/``; return its record. ``record``, when given, is
    the one the job fills in as it goes (the executor and its display read it), so a caller that is
    cancelled still holds what the job did."""
    record = record if record is not None else new_record(spec)
    record.worker = record.worker or {"node": socket.gethostname(), "pid": os.getpid()}
    store = JobStore(run_dir / spec.name)
    try:
        await store.open()
        session = Session(
            spec,
            services=services,
            store=store,
            record=record,
            history=resumed.history if resumed else None,
            prior=resumed.prior if resumed else None,
        )
        await session.run()
    except BackendUnusable:  # no job can run on this backend: the executor stops the batch
        raise
    except Exception as e:  # setting the job up failed (its directory, the disk): this job alone fails
        record.status, record.error = (
            Status.FAILED,
            one_line(f"could not run the job: {type(e).__name__}: {e}"),
        )
    finally:
        store.close()  # its job-long records
    return record
