"""What a job's model calls met on the wire: attempts, 429s, 529s, 5xx answers.

The SDK retries inside one ``create`` call, out of our sight; an HTTP event hook sees every attempt.
Each job sets :data:`CURRENT` to its own :class:`WireCounts` in its own task (a context variable, so
concurrent jobs never count into each other's), and the hooks add to whichever counts are current.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class WireCounts:
    calls: int = 0  # create() calls made
    requests: int = 0  # HTTP attempts, the SDK's retries included
    rate_limited: int = 0  # 429 answers
    overloaded: int = 0  # 529 answers
    server_errors: int = 0  # other 5xx answers

    @property
    def retries(self) -> int:
        return max(0, self.requests - self.calls)

    def to_json(self) -> dict[str, int]:
        return {"retries": self.retries, "rate_limited_429": self.rate_limited, "overloaded_529": self.overloaded,
                "server_errors_5xx": self.server_errors, "requests": self.requests}

    def copy(self) -> WireCounts:
        return WireCounts(**asdict(self))

    @classmethod
    def from_json(cls, data: Any) -> WireCounts:
        """Counts from a metrics.json of an earlier run (requests and calls chosen so retries carry over)."""
        if not isinstance(data, dict):
            return cls()
        def num(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
        return cls(calls=0, requests=num("retries"), rate_limited=num("rate_limited_429"),
                   overloaded=num("overloaded_529"), server_errors=num("server_errors_5xx"))


CURRENT: ContextVar[WireCounts | None] = ContextVar("runner_wire_counts", default=None)


async def on_request(request: Any) -> None:
    counts = CURRENT.get()
    if counts is not None:
        counts.requests += 1


def count_response(status: int) -> None:
    counts = CURRENT.get()
    if counts is None:
        return
    if status == 429:
        counts.rate_limited += 1
    elif status == 529:
        counts.overloaded += 1
    elif status >= 500:
        counts.server_errors += 1
