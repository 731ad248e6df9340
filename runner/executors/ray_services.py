"""The batch's services as one Ray actor for the whole cluster, and the Protocols that talk to it.

:class:`RunServices` (a named async actor, one per run) holds the summary gate (``max_concurrent`` +
``requests_per_minute``), the adaptive API concurrency (halved on 429/529) and the run budget, so
that their limits hold for the whole batch however many workers run it. :class:`RayGate`,
:class:`RayCallLimit` and :class:`RayBudget` implement :mod:`runner.services`' ``Gate``,
``CallLimit`` and ``Budget`` on a worker by calling it.

Guarantees:
- A slot is named by a token ``<owner>:<n>``; a slot whose waiter was cancelled, or whose worker
  died (:meth:`RunServices.release_owner`), is given back, so lost workers never leak capacity.
- The budget a worker sees is the cluster's total as of its last charge plus its own charges not
  yet confirmed: a worker learns of other workers' spending when it next charges.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import ray

from ..models.adaptive import AdaptiveLimit
from ..services import RateLimiter


@ray.remote(num_cpus=0)
class RunServices:
    """One per run, named ``runner-services-<run id>``. Every method is called by workers or the driver."""

    def __init__(self, max_concurrent: int, requests_per_minute: int, window_s: float, max_calls: int,
                 budget_limit: float | None):
        self._args = (max_concurrent, requests_per_minute, window_s, max_calls)
        self.budget_limit = budget_limit
        self.spent = 0.0
        self._ready = False
        self._held: dict[str, anyio.CapacityLimiter] = {}  # token -> the limiter it holds
        self._waiting: dict[str, asyncio.Task[Any]] = {}
        self._gone: set[str] = set()  # released before its acquire began
        self.gate_starts = 0

    def _setup(self) -> None:
        """anyio's primitives need the actor's running event loop, which ``__init__`` does not have."""
        if not self._ready:
            max_concurrent, rpm, window_s, max_calls = self._args
            self.gate = anyio.CapacityLimiter(max_concurrent)
            self.rate = RateLimiter(rpm, window_s)
            self.calls = AdaptiveLimit(maximum=max_calls)
            self._ready = True

    async def _acquire(self, limiter: anyio.CapacityLimiter, token: str, rate: RateLimiter | None) -> None:
        if token in self._gone:
            self._gone.discard(token)
            raise RuntimeError(f"slot {token} was released before it was taken")
        self._waiting[token] = asyncio.current_task()  # type: ignore[assignment]
        try:
            await limiter.acquire_on_behalf_of(token)
            try:
                if rate is not None:
                    await rate.acquire()
            except BaseException:
                limiter.release_on_behalf_of(token)
                raise
            self._held[token] = limiter
        finally:
            self._waiting.pop(token, None)

    async def gate_acquire(self, token: str) -> None:
        self._setup()
        await self._acquire(self.gate, token, self.rate)
        self.gate_starts += 1

    async def call_acquire(self, token: str) -> None:
        self._setup()
        await self._acquire(self.calls.limiter, token, None)

    async def release(self, token: str, successes: int = 0) -> None:
        """Give back ``token``'s slot, or stop its wait; a token not seen yet is refused when it comes.
        ``successes``: calls that succeeded since the caller's last release (one message for both)."""
        if successes:
            self._setup()
            for _ in range(successes):
                self.calls.succeeded()
        limiter = self._held.pop(token, None)
        if limiter is not None:
            limiter.release_on_behalf_of(token)
        elif token in self._waiting:
            self._waiting.pop(token).cancel()
        else:
            self._gone.add(token)

    async def release_owner(self, owner: str) -> int:
        """A worker died: give back every slot it held or waited for; returns how many."""
        prefix = f"{owner}:"
        tokens = [t for t in [*self._held, *self._waiting] if t.startswith(prefix)]
        for token in tokens:
            await self.release(token)
        return len(tokens)

    async def rate_limited(self) -> None:
        self._setup()
        self.calls.rate_limited()

    async def succeeded(self) -> None:
        self._setup()
        self.calls.succeeded()

    async def charge(self, usd: float) -> float:
        self.spent += usd
        return self.spent

    async def state(self) -> dict[str, Any]:
        self._setup()
        return {"spent": self.spent, "gate_starts": self.gate_starts, "gate_held": self.gate.borrowed_tokens,
                "calls_limit": self.calls.current, "calls_held": self.calls.limiter.borrowed_tokens,
                "held": len(self._held)}


class _Slots:
    """Tokens of one owner (a worker) for one kind of slot at the services actor."""

    def __init__(self, actor: Any, owner: str, acquire: str):
        self.actor = actor
        self.owner = owner
        self.acquire = getattr(actor, acquire)
        self._ids = itertools.count()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        token = f"{self.owner}:{next(self._ids)}"
        try:
            await self.acquire.remote(token)
        except BaseException:  # cancelled while waiting: the actor gives the slot back or stops the wait
            self._release(token)
            raise
        try:
            yield
        finally:
            self._release(token)

    def _release(self, token: str) -> None:
        self.actor.release.remote(token)


class RayGate(_Slots):
    """The summary gate (``runner.services.Gate``) of the whole cluster."""

    def __init__(self, actor: Any, owner: str):
        super().__init__(actor, owner, "gate_acquire")


class RayCallLimit(_Slots):
    """The adaptive API concurrency (``runner.services.CallLimit``) of the whole cluster. Successes are
    counted here and told to the actor with the next release: two messages per call, not three."""

    def __init__(self, actor: Any, owner: str):
        super().__init__(actor, owner, "call_acquire")
        self._successes = 0

    def _release(self, token: str) -> None:
        successes, self._successes = self._successes, 0
        self.actor.release.remote(token, successes)

    def rate_limited(self) -> None:
        self.actor.rate_limited.remote()

    def succeeded(self) -> None:
        self._successes += 1


class RayBudget:
    """The run's ``max_cost_usd`` (``runner.services.Budget``) counted at the services actor."""

    def __init__(self, actor: Any, limit: float | None):
        self.actor = actor
        self.limit = limit
        self._cluster = 0.0  # the cluster's total as of the last confirmed charge
        self._pending = 0.0  # this worker's charges not confirmed yet
        self._lock = threading.Lock()  # confirmations arrive on Ray's threads

    @property
    def spent(self) -> float:
        with self._lock:
            return self._cluster + self._pending

    @property
    def exceeded(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def charge(self, usd: float) -> None:
        if not usd or self.limit is None:  # no limit: nothing to tell the cluster (metrics.json has the cost)
            return
        with self._lock:
            self._pending += usd
        future = self.actor.charge.remote(usd).future()

        def confirmed(f: Any) -> None:
            with self._lock:
                self._pending -= usd
                if not f.cancelled() and f.exception() is None:
                    self._cluster = max(self._cluster, f.result())
                else:
                    self._cluster += usd

        future.add_done_callback(confirmed)
