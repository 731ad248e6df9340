"""The services a job uses besides its own files, each a small Protocol with its in-process
implementation. An executor on another engine (Ray) passes other implementations of the same
Protocols to :func:`runner.agent.runjob.run_job`; the session never knows which it has.

- :class:`Gate`: a slot for one call, bounded in concurrency and in starts per window (the summary
  gate); the batch shares one.
- :class:`Budget`: the run's ``max_cost_usd``; jobs charge what they spend and stop when it is spent;
  a call holds its estimated cost while it is in flight, and starts only when the spend, the holds of
  the calls in flight and its own stay under the limit.
- :class:`CallLimit`: the adaptive number of model calls in flight (halved on 429/529).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import anyio


class Gate(Protocol):
    def slot(self) -> AbstractAsyncContextManager[None]:
        """Wait for a slot; the call runs inside it. Cancelling the wait takes no slot."""


class Budget(Protocol):
    limit: float | None

    @property
    def spent(self) -> float: ...

    @property
    def exceeded(self) -> bool: ...

    def charge(self, usd: float) -> None:
        """Add ``usd`` to what the run spent (never raises; ``exceeded`` says when it is over)."""

    def hold(self, usd: float) -> bool | None:
        """Hold ``usd`` for a call about to start: True when held; None (nothing held) when the holds of
        the calls in flight take the room now (ask again after :meth:`released`); False when what was
        spent and ``usd`` reach the limit (no room will come)."""

    def release(self, usd: float) -> None:
        """Give back a call's hold (its cost is charged when it is answered)."""

    async def released(self) -> None:
        """Wait until some hold is given back."""


class CallLimit(Protocol):
    """How many model calls may be in flight; lowered when the API says it is overloaded."""

    def slot(self) -> AbstractAsyncContextManager[object]:
        """Wait for a slot; the call runs inside it."""

    def rate_limited(self) -> None:
        """A 429 or 529 was seen on the wire (callable from any thread of this process)."""

    def succeeded(self) -> None:
        """A call succeeded."""


class RateLimiter:
    """At most ``rate`` acquisitions in any ``window_s`` seconds; fair (FIFO) under anyio."""

    def __init__(self, rate: int, window_s: float = 60.0, clock: Callable[[], float] | None = None):
        self.rate = rate
        self.window_s = window_s
        self._clock = clock or anyio.current_time
        self._starts: deque[float] = deque()
        self._lock = anyio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # anyio.Lock is FIFO: waiters keep their order
            while True:
                now = self._clock()
                while self._starts and now - self._starts[0] >= self.window_s:
                    self._starts.popleft()
                if len(self._starts) < self.rate:
                    self._starts.append(now)
                    return
                await anyio.sleep(self._starts[0] + self.window_s - now)


class LocalGate:
    """At most ``max_concurrent`` slots held at once, at most ``per_window`` started in any
    ``window_s`` seconds; in this process."""

    def __init__(
        self,
        max_concurrent: int,
        per_window: int,
        window_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ):
        self.capacity = anyio.CapacityLimiter(max_concurrent)
        self.rate = RateLimiter(per_window, window_s, clock)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.capacity:
            await self.rate.acquire()
            yield


class RunBudget:
    """A whole run's ``max_cost_usd`` in this process (``None``: no limit)."""

    def __init__(self, limit: float | None = None):
        self.limit = limit
        self.spent = 0.0
        self.held = 0.0  # the estimated costs of the calls in flight
        self._releases = Wakeup()

    @property
    def exceeded(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def charge(self, usd: float) -> None:
        self.spent += usd

    def hold(self, usd: float) -> bool | None:
        if self.limit is None:
            return True
        if self.spent + usd >= self.limit:
            return False
        if self.spent + self.held + usd >= self.limit:
            return None
        self.held += usd
        return True

    def release(self, usd: float) -> None:
        if self.limit is not None:
            self.held = max(0.0, self.held - usd)
            self._releases.wake()

    async def released(self) -> None:
        await self._releases.wait()


class Wakeup:
    """Wakes every task waiting in :meth:`wait` at each :meth:`wake` (in one event loop)."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None  # made by the first waiter: an event needs a running loop

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
