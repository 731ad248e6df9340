"""A job's time: how long its segment may run, the part kept for its last call, when its calls must
be answered, and its wall time over every segment it ran.

Guarantees:
- A segment ends by ``timeout_s``, and by the run's deadline when that comes first; a tenth of it
  (at most a minute) is kept for the job's last call, its report.
- A call is answered by :meth:`JobClock.answer_by` (what a late batch delivery goes live in time
  for), never after an enclosing session's (a subagent's calls end with its parent's).
- Wall time adds every segment: the earlier ones' (from the record they left) and this one's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def time_reserve(timeout_s: float) -> float:
    """The part of a job's timeout kept for its last call: a tenth, at most a minute."""
    return min(60.0, timeout_s / 10)


def answer_within(seconds: float, outer: float | None) -> float:
    """When a session's calls must be answered (epoch seconds; :data:`~runner.models.wire.ANSWER_BY`):
    ``seconds`` from now, never after ``outer`` (an enclosing session's, for a subagent)."""
    mine = time.time() + seconds
    return mine if outer is None else min(mine, outer)


@dataclass
class JobClock:
    """One segment of a job: its timeout, the run's deadline (epoch seconds), its earlier segments'
    wall time, and when this one started (``time.monotonic()``)."""

    timeout_s: float
    deadline: float | None = None
    wall_before: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        self.started = time.monotonic()

    def segment(self) -> tuple[float, str]:
        """The seconds this segment may run and what the job's error says when they are up: ``timeout_s``,
        or less when the run's deadline comes first (the report's reserve is then kept before it)."""
        if self.deadline is not None and self.deadline - time.time() < self.timeout_s:
            at = time.strftime("%H:%M:%S", time.localtime(self.deadline))
            return max(1.0, self.deadline - time.time()), f"reached the run's deadline ({at})"
        return self.timeout_s, f"timed out after {self.timeout_s:g} s"

    def ends_working(self) -> float:
        """When the segment's work ends (``time.monotonic()``): every subagent has ended by then."""
        timeout, _ = self.segment()
        return self.started + timeout - time_reserve(timeout)

    def wall(self) -> float:
        """Wall time of every segment the job ran: the earlier ones' and this one's so far."""
        return self.wall_before + time.monotonic() - self.started
