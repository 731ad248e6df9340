"""The batch wiring every command shares: the model backend and summarizer of a run (and what the
operator should be told about them), the services of a run, and a batch run on its executor with a
display. It takes settings and plain values and prints nothing: ``cli`` reads the flags, shows the
display and prints the table.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import ConfigError, Settings
from ..jobs import JobSpec
from ..rundir.docs import BATCHES, run_document
from ..ui.report import clean_job, load_report

if TYPE_CHECKING:  # the batch core pulls in the SDK (~1.5 s); `validate` and `report` do not need it
    from ..compaction.summarizer import Summarizer
    from ..models.base import Model
    from .core import Batch, BatchResult, Display


@dataclass(frozen=True)
class Backend:
    model: Model
    summarizer: Summarizer
    name: str  # anthropic or offline, as run.json names it


def make_backend(settings: Settings, backend: str, *, specs: Sequence[JobSpec] = ()) -> Backend:
    """The model for jobs on ``backend`` (:func:`runner.execution.backend.backend_name`; ``specs``: those
    it will run, each job's delivery decides how its calls go) and the batch's Summarizer."""
    from ..models.adaptive import AdaptiveLimit
    from ..ui.display import API
    from .backend import build_backend

    limit = AdaptiveLimit(maximum=settings.runner.concurrency)

    def rate_limited() -> None:  # the batch backs off, and the live display counts it
        limit.rate_limited()
        API()

    model, summarizer = build_backend(
        backend,
        runner=settings.runner,
        summarizer=settings.summarizer,
        max_retries=settings.limits.max_retries,
        calls=limit,
        on_rate_limited=rate_limited,
        batch_jobs=any(spec.limits.delivery == "batch" for spec in specs),
    )
    API.batch_line = getattr(getattr(model, "batcher", None), "status_line", None)  # delivery = "batch"
    return Backend(model, summarizer, backend)


def run_on_executor(batch: Batch, settings: Settings, display: Display) -> BatchResult:
    """Run ``batch`` on the executor ``settings`` names, ``display`` showing it."""
    import anyio

    from .backend import settled_heap
    from .scheduler import run_batch

    if (batcher := getattr(batch.model, "batcher", None)) is not None:  # delivery = "batch": crash-safe
        batcher.open_journal(batch.run_dir / BATCHES)
    if settings.runner.executor == "ray":
        from .ray_driver import run_on_ray

        return run_on_ray(batch, settings, display)
    with settled_heap():
        return anyio.run(run_batch, batch, display)


def json_document(run_dir: Path) -> dict[str, Any]:
    """The run as ``--json`` prints it: ``run_dir`` (absolute), then run.json's fields and each job's
    metrics."""
    return {"run_dir": os.path.abspath(run_dir), **run_document(run_dir)}


def final_rows(run_dir: Path, result: Any) -> list[dict[str, Any]]:
    """The table's rows: run.json's, with every job this process ran as it ended in memory (what the
    table shows stays true when the disk refused run.json or metrics.json)."""
    try:
        rows = load_report(run_dir)["jobs"]
    except ConfigError:
        rows = []
    ran = {name: clean_job(r.document()) for name, r in result.results.items()}
    rows = [ran.pop(row["job"], row) for row in rows]
    return rows + list(ran.values())


def fallback_warnings(specs: list[JobSpec], model: Model) -> list[str]:
    """One line per job that asks for a strategy this backend cannot run: what it runs instead."""
    from ..compaction.strategies import STRATEGIES

    warnings = []
    for spec in specs:
        strategy = STRATEGIES[spec.limits.compaction]
        if strategy.server_side and not model.server_compaction:
            warnings.append(
                f'{spec.source}: limits.compaction: "{strategy.name}" needs the anthropic backend; job '
                f'{spec.name} uses "{strategy.fallback}" on the {model.name} model'
            )
    return warnings


def spending(settings: Settings) -> dict[str, Any]:
    """The run's budget, price table and deadline, for a Batch."""
    from ..config import deadline_at
    from ..pricing import PriceTable
    from ..services import RunBudget

    return {
        "run_budget": RunBudget(settings.runner.max_cost_usd),
        "prices": PriceTable(settings.prices),
        "deadline": deadline_at(settings.runner.deadline, settings.runner.deadline_s),
    }


def run_meta(settings: Settings, backend: str) -> dict[str, Any]:
    return {
        "backend": backend,
        "model": settings.runner.model,
        "summary_model": settings.summarizer.model,
        "delivery": settings.runner.delivery,
        "concurrency": settings.runner.concurrency,
    }
