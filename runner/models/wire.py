"""What one model call met on the wire: attempts, 429s, 529s, 5xx answers, batch resends.

The SDK retries inside one ``create`` call, out of our sight; an HTTP event hook sees every attempt.
A backend's ``create`` opens a :class:`Tally` around the call (:func:`counting`, a context variable,
so concurrent calls never count into each other's), the hooks add to whichever tally is open, and
the call's :class:`WireCounts` go with its reply (``Reply.wire``) or, when it raises, with its
exception (:func:`attach`, read back with :func:`counts_of`). Nothing here knows a job: the caller
counts a call's numbers where it keeps them (``runner/agent/spend.py``). Beside it,
:data:`ANSWER_BY`: when the running job stops waiting for a reply.

Guarantees:
- A call's counts are its own HTTP attempts (the SDK's retries included) and the 429/529/5xx answers
  among them, and the times a Message Batch was asked again for it; a call that fails carries the
  counts it met all the same.
- Requests made while no tally is open (the batches API's own, :func:`uncounted`) are no call's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

# when the running job stops waiting for a reply (epoch seconds; its session sets it, see
# runner.agent.session): a call delivered late must go live before then (models/batches.py)
ANSWER_BY: ContextVar[float | None] = ContextVar("runner_answer_by", default=None)
# the attribute of an exception that carries the counts of the call that raised it
ATTRIBUTE = "runner_wire_counts"


@dataclass(frozen=True)
class WireCounts:
    """What one call met: its HTTP attempts and the 429/529/5xx answers among them, and how many times
    a Message Batch was asked again for it (``resends``)."""

    requests: int = 0  # HTTP attempts
    rate_limited_429: int = 0
    overloaded_529: int = 0
    server_errors_5xx: int = 0
    resends: int = 0  # a Message Batch's answer that was not one (expired, canceled, a retryable error)

    @property
    def retries(self) -> int:
        """The attempts beyond the first (the SDK's retries) and the batch resends."""
        return self.resends + max(0, self.requests - 1)

    @property
    def needed_retries(self) -> bool:
        """More than one attempt, or a 429, 529 or 5xx answer among them (its ``retries`` event)."""
        return self.requests > 1 or any((self.rate_limited_429, self.overloaded_529, self.server_errors_5xx))


class Tally:
    """The counts of the call in flight in this context, as its attempts happen."""

    def __init__(self) -> None:
        self.requests = 0
        self.rate_limited_429 = 0
        self.overloaded_529 = 0
        self.server_errors_5xx = 0

    def request(self) -> None:
        self.requests += 1

    def response(self, status: int) -> None:
        if status == 429:
            self.rate_limited_429 += 1
        elif status == 529:
            self.overloaded_529 += 1
        elif status >= 500:
            self.server_errors_5xx += 1

    def counts(self) -> WireCounts:
        return WireCounts(self.requests, self.rate_limited_429, self.overloaded_529, self.server_errors_5xx)


_TALLY: ContextVar[Tally | None] = ContextVar("runner_wire_tally", default=None)


@contextmanager
def counting() -> Iterator[Tally]:
    """A new tally for the call made inside (the hooks count into it), closed after it."""
    tally = Tally()
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


@contextmanager
def uncounted() -> Iterator[None]:
    """Requests made inside are no call's (the batches API's own): the hooks see no tally."""
    token = _TALLY.set(None)
    try:
        yield
    finally:
        _TALLY.reset(token)


async def on_request(request: Any) -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally.request()


def count_response(status: int) -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally.response(status)


def attach(error: BaseException, counts: WireCounts) -> None:
    """``error`` carries ``counts``: the call that raised it met them."""
    try:
        setattr(error, ATTRIBUTE, counts)
    except (AttributeError, TypeError):  # an exception type that takes no attributes: nothing counted
        pass


def counts_of(error: BaseException) -> WireCounts:
    """The counts a failed call's exception carries (none when it carries none)."""
    counts = getattr(error, ATTRIBUTE, None)
    return counts if isinstance(counts, WireCounts) else WireCounts()
