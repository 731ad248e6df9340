"""What a running emulator counts and remembers between requests.

Guarantees: :class:`EmulatorState` is mutated only on the server's event loop; ``snapshot()`` may
be called from any thread. ``outcomes`` keys: ok, 400, 401, 413, 429, 500, 529, dropped, slow
(answered late, or the client gave up first), disconnected (the client left during the latency),
internal_error (an emulator bug), stream_error (a stream cut by an ``error`` event, not billed).
A streamed request counts as any other (``requests``, its outcome, tokens) and once more in
``streamed_requests``.

Message Batches (see :mod:`.batches`) live in ``batches`` until deleted or reset. Their requests are
not in ``requests`` or ``outcomes``: ``batch_requests`` counts the requests of every batch created,
``batch_outcomes`` their results (succeeded, errored, canceled, expired, each counted once, when its
batch ends), ``batches`` the batches created, ended, and canceled (ended after a cancel, the
client's or a fault's). A succeeded batch request's tokens are billed in ``tokens`` (every billed
token, live or batch) and in ``batch_tokens`` (the part billed at the batch rate).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..billing import PromptCache
from ..execution.backend import stand_in
from ..models.base import Model
from ..pricing import USAGE_KEYS, api_count
from .config import EmulatorConfig
from .faults import SlidingWindow

BatchStatus = Literal["in_progress", "canceling", "ended"]


@dataclass
class BatchRequest:
    """One request of a batch, as it was created."""

    custom_id: str
    params: dict[str, Any]
    number: int  # 1-based, over the requests of every batch created, in creation order


@dataclass
class Batch:
    """A Message Batch: its requests, its timer, how it ended and its results (see :mod:`.batches`)."""

    id: str
    number: int  # 1-based, in creation order
    requests: list[BatchRequest]
    created_at: datetime
    started: float  # the event loop's clock at creation
    turnaround_s: float
    timer: asyncio.TimerHandle | None = None
    finishing: asyncio.Task[None] | None = None  # answering its requests (see batches.finish)
    cancel_initiated_at: datetime | None = None
    answered: int | None = None  # after a cancel: how many requests (in order) are answered
    ended_at: datetime | None = None
    counts: Counter[str] = field(default_factory=Counter)
    results: bytes = b""

    @property
    def status(self) -> BatchStatus:
        if self.ended_at is not None:
            return "ended"
        return "canceling" if self.cancel_initiated_at is not None else "in_progress"


def stand_in_replies(batch_size: int) -> Model:
    """The default replier: the backend switch's stand-in, reached through the ``Model`` protocol."""
    return stand_in(batch_size=batch_size, serving=True)


class EmulatorState:
    """Counters, the rate-limit window, the prompt cache, the script position and the batches.

    ``replies``: the model that answers a request no script or summary answers, given the config's
    ``batch_size`` (default: :func:`stand_in_replies`); it is asked through the ``Model`` protocol alone."""

    def __init__(self, config: EmulatorConfig, replies: Callable[[int], Model] = stand_in_replies):
        self.config = config
        self.replies = replies
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests = 0
            self.streamed_requests = 0
            self.outcomes: Counter[str] = Counter()
            self.concurrent = 0
            self.peak_concurrent = 0
            self.tokens = dict.fromkeys(USAGE_KEYS, 0)
            self.compactions = 0
            self.clearings = 0  # requests whose context editing cleared tool uses
            self.summary_requests = 0
            self.summary_spans: list[tuple[float, float]] = []  # (arrived, answered) of each summary request
            self.count_tokens_requests = 0
            self.recorded: deque[Any] = deque(maxlen=self.config.max_recorded)
            self.script_position = 0
            self.window = SlidingWindow()
            self.cache = PromptCache()
            self.batches: dict[str, Batch] = {}  # by id, in creation order
            self.batch_requests = 0
            self.batch_outcomes: Counter[str] = Counter()
            self.batch_tokens = dict.fromkeys(USAGE_KEYS, 0)
            self.batch_counts: Counter[str] = Counter()

    def begin(self) -> int:
        """A messages request starts: its number (1-based, in arrival order)."""
        with self._lock:
            self.requests += 1
            self.concurrent += 1
            self.peak_concurrent = max(self.peak_concurrent, self.concurrent)
            return self.requests

    def streamed(self) -> None:
        """A valid messages request asked for a stream."""
        with self._lock:
            self.streamed_requests += 1

    def end(self) -> None:
        with self._lock:
            self.concurrent -= 1

    def count(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def bill(self, usages: list[dict[str, Any]]) -> None:
        with self._lock:
            for usage in usages:
                for name in USAGE_KEYS:
                    self.tokens[name] += int(api_count(usage, name) or 0)

    def batch_created(self, requests: int) -> tuple[int, int]:
        """A batch of ``requests`` requests was created: its number and its first request's (1-based)."""
        with self._lock:
            self.batch_counts["created"] += 1
            first = self.batch_requests + 1
            self.batch_requests += requests
            return self.batch_counts["created"], first

    def batch_ended(self, results: Counter[str], *, canceled: bool) -> None:
        """A batch ended with ``results`` (requests by result type); ``canceled``: after a cancel."""
        with self._lock:
            self.batch_outcomes.update(results)
            self.batch_counts["ended"] += 1
            self.batch_counts["canceled"] += int(canceled)

    def bill_batch(self, usages: list[dict[str, Any]]) -> None:
        """Tokens billed at the batch rate: counted in ``tokens`` and in ``batch_tokens``."""
        self.bill(usages)
        with self._lock:
            for usage in usages:
                for name in USAGE_KEYS:
                    self.batch_tokens[name] += int(api_count(usage, name) or 0)

    def record(self, body: Any) -> None:
        if self.config.record_requests:
            with self._lock:
                if self.recorded.maxlen != self.config.max_recorded:
                    self.recorded = deque(self.recorded, maxlen=self.config.max_recorded)
                self.recorded.append(body)

    def summary_answered(self, arrived: float, answered: float) -> None:
        """A summary request that arrived at ``arrived`` was answered (or ended) at ``answered``."""
        with self._lock:
            self.summary_spans.append((arrived, answered))

    def snapshot(self) -> dict[str, Any]:
        """The counters as JSON (what ``GET /_emulator/stats`` returns)."""
        with self._lock:
            return {
                "requests": self.requests,
                "streamed_requests": self.streamed_requests,
                "outcomes": dict(self.outcomes),
                "concurrent": self.concurrent,
                "peak_concurrent": self.peak_concurrent,
                "requests_in_window": self.window.count(self.config.window_s),
                "window_s": self.config.window_s,
                "tokens": dict(self.tokens),
                "compactions": self.compactions,
                "clearings": self.clearings,
                "summary_requests": self.summary_requests,
                "summary_peak_concurrent": peak_overlap(self.summary_spans),
                "count_tokens_requests": self.count_tokens_requests,
                "cache_entries": len(self.cache.entries),
                "batches": {k: self.batch_counts[k] for k in ("created", "ended", "canceled")},
                "batch_requests": self.batch_requests,
                "batch_outcomes": {
                    k: self.batch_outcomes[k] for k in ("succeeded", "errored", "canceled", "expired")
                },
                "batch_tokens": dict(self.batch_tokens),
                "recorded_requests": list(self.recorded),
            }


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (a span ending as another starts does not overlap it)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak
