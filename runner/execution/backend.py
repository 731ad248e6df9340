"""The jobs' model and the batch's summarizer, built one way for every executor: the local one
(:func:`runner.execution.batch.make_backend`) and each Ray worker (:mod:`.ray_worker`).

Guarantees:
- ``anthropic``: every job's call waits for a slot of ``calls`` (the batch's adaptive concurrency,
  halved on 429/529) and goes over one of ``shards_for(concurrency)`` HTTP clients (one per
  ``JOBS_PER_SHARD`` jobs in flight); summaries call the same backend outside ``calls``, behind the
  summary gate. The API key is never passed: the SDK reads it from the environment.
- ``offline``: the deterministic offline stand-in (:func:`stand_in`, the one place it is built), and a
  summarizer without a model (the fallback summary).
- Which backend a run takes is decided here (:func:`backend_name`); a resumed run keeps the one its
  ``run.json`` names (:func:`keep_backend`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import ConfigError, RunnerSection, Settings, SummarizerSection
from ..jobs import JobSpec
from ..rundir.docs import RUN_JSON
from ..services import CallLimit, Gate

if TYPE_CHECKING:  # the SDK takes ~1.5 s to import; only the anthropic backend needs it
    from ..compaction.summarizer import Summarizer
    from ..models.base import Model

JOBS_PER_SHARD = 25
YOUNG_COLLECTION_EVERY = 10_000  # allocations between the cycle collector's young collections (Python: 700)


@contextmanager
def settled_heap() -> Iterator[None]:
    """While a batch's jobs run (local executor): what is alive when it starts (the SDK, the settings,
    the specs, a resumed run's histories) leaves the cycle collector's sight (``gc.freeze``) and young
    collections come less often, so many live sessions are not walked again and again. At 500 jobs at
    once the collector took 1.4 of 11.6 s of CPU; 0.6 s after (bench/concurrency.py's N = 500 survey).
    Closed, the collector is as it was: the threshold restored and, unless something was frozen
    before, everything in sight again (a process that runs several batches keeps nothing frozen)."""
    threshold, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    try:
        if not frozen_before:  # gc.unfreeze() gives back everything: only what this froze
            gc.freeze()
        gc.set_threshold(YOUNG_COLLECTION_EVERY, *threshold[1:])
        yield
    finally:
        gc.set_threshold(*threshold)
        if not frozen_before:
            gc.unfreeze()


def shards_for(concurrency: int) -> int:
    """HTTP clients for ``concurrency`` jobs in flight: one per ``JOBS_PER_SHARD``."""
    return -(-concurrency // JOBS_PER_SHARD)


def stand_in(*, batch_size: int = 4, serving: bool = False) -> Model:
    """The offline stand-in (``runner/offline/``) behind the ``Model`` protocol: the one place it is
    built, for ``backend = "offline"`` and, ``serving``, for the emulator's default replies (which it
    bills itself). Nothing else in the runner imports the stand-in."""
    from ..offline.model import OfflineModel

    return OfflineModel(batch_size, serving=serving)


def backend_name(settings: Settings) -> str:
    """``anthropic`` or ``offline``: ``auto`` is ``anthropic`` when ``ANTHROPIC_API_KEY`` is set;
    ConfigError for ``anthropic`` without it."""
    backend = settings.runner.backend
    if backend == "auto":
        backend = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
    if backend != "offline" and not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError(["backend = anthropic needs ANTHROPIC_API_KEY in the environment"])
    return backend


def keep_backend(
    run_dir: Path,
    meta: dict[str, Any],
    settings: Settings,
    *,
    asked: str | None,
    asked_delivery: str | None = None,
) -> None:
    """A resumed run keeps the backend, models and delivery ``run.json`` names: it never switches to the
    offline model because the key is missing, never mixes real costs with estimates, and a run that
    went by Message Batches goes on at their price unless ``--delivery`` (``asked_delivery``) says
    otherwise."""
    where = run_dir / RUN_JSON
    backend = meta.get("backend")
    if backend not in ("anthropic", "offline"):
        if asked in ("anthropic", "offline"):
            backend = asked
        else:
            raise ConfigError(
                [
                    f'{where}: backend: expected "anthropic" or "offline", got {backend!r}; '
                    "say which with --backend"
                ]
            )
    if asked not in (None, "auto", backend):
        raise ConfigError([f"--backend {asked}: {where} ran on {backend}; a resumed run keeps its backend"])
    if backend == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        raise ConfigError(
            [
                f"{where}: this run used the anthropic backend; resuming it needs ANTHROPIC_API_KEY "
                "(it is not switched to the offline model)"
            ]
        )
    settings.runner.backend = "anthropic" if backend == "anthropic" else "offline"
    for key, section in (("model", settings.runner), ("summary_model", settings.summarizer)):
        if isinstance(meta.get(key), str) and meta[key]:
            section.model = meta[key]
    if meta.get("delivery") in ("live", "batch") and asked_delivery is None:
        settings.runner.delivery = meta["delivery"]


def stand_in_warnings(settings: Settings, specs: Sequence[JobSpec]) -> list[str]:
    """What the stand-in will not do for ``specs`` (those it will run), in its own words."""
    from ..offline.model import what_it_will_not_do
    from ..ui.console import shown_path

    return what_it_will_not_do(settings, specs, shown=shown_path)


def build_backend(
    backend: str,
    *,
    runner: RunnerSection,
    summarizer: SummarizerSection,
    max_retries: int,
    calls: CallLimit,
    on_rate_limited: Callable[[], None] | None = None,
    gate: Gate | None = None,
    base_url: str | None = None,
    batch_jobs: bool = False,
) -> tuple[Model, Summarizer]:
    """The model for jobs on ``backend`` (``anthropic`` or ``offline``) and the summarizer. A 429/529
    calls ``on_rate_limited`` (default: ``calls.rate_limited``); ``gate``: a summary gate shared beyond
    this process, else the summarizer's own (``max_concurrent``, ``requests_per_minute``);
    ``batch_jobs``: some job's limits set ``delivery = "batch"`` (so batches are needed even when
    ``[runner] delivery``, every other job's default, is live)."""
    from ..compaction.summarizer import Summarizer

    s = summarizer
    summaries: Model | None = None  # the summarizer's model: None, raw, or raw through batches
    if backend == "offline":
        model: Model = stand_in()
    else:
        from ..models.adaptive import AdaptiveModel
        from ..models.anthropic import AnthropicModel

        raw = AnthropicModel(
            base_url=base_url,
            max_retries=max_retries,
            timeout=runner.request_timeout_s,
            on_rate_limited=on_rate_limited or calls.rate_limited,
            shards=shards_for(runner.concurrency),
            max_reply_bytes=runner.max_reply_bytes,
            max_retry_after_s=runner.max_retry_after_s,
        )
        summaries = raw
        model = AdaptiveModel(raw, calls)
        if runner.delivery == "batch" or batch_jobs:  # Message Batches, live near the deadline
            from ..models.batches import batch_delivery

            model, summaries = batch_delivery(raw, model, runner, max_retries=max_retries)
    return model, Summarizer(
        summaries,
        s.model,
        max_concurrent=s.max_concurrent,
        requests_per_minute=s.requests_per_minute,
        max_input_chars=s.max_input_chars,
        max_output_tokens=s.max_output_tokens,
        gate=gate,
    )
