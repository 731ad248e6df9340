"""What a job's model calls met on the wire: attempts, 429s, 529s, 5xx answers.

The SDK retries inside one ``create`` call, out of our sight; an HTTP event hook sees every attempt.
Each job sets :data:`CURRENT` to its own record in its own task (a context variable, so concurrent
jobs never count into each other's), and the hooks add to whichever record is current. Beside it,
:data:`ANSWER_BY`: when that job stops waiting for a reply.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ..rundir.docs import JobMetrics

CURRENT: ContextVar[JobMetrics | None] = ContextVar("runner_wire_counts", default=None)
# when the running job stops waiting for a reply (epoch seconds; its session sets it, see
# runner.agent.session): a call delivered late must go live before then (models/batches.py)
ANSWER_BY: ContextVar[float | None] = ContextVar("runner_answer_by", default=None)


async def on_request(request: Any) -> None:
    counts = CURRENT.get()
    if counts is not None:
        counts.requests += 1


def count_response(status: int) -> None:
    counts = CURRENT.get()
    if counts is None:
        return
    if status == 429:
        counts.rate_limited_429 += 1
    elif status == 529:
        counts.overloaded_529 += 1
    elif status >= 500:
        counts.server_errors_5xx += 1
