"""The batch's services as one Ray actor for the whole cluster, and the Protocols that talk to it.

:class:`RunServices` (a named async actor, one per run) holds the summary gate (``max_concurrent`` +
``requests_per_minute``), the adaptive API concurrency (halved on 429/529) and the run budget, so
that their limits hold for the whole batch however many workers run it. :class:`RayGate`,
:class:`RayCallLimit` and :class:`RayBudget` implement :mod:`runner.services`' ``Gate``,
``CallLimit`` and ``Budget`` on a worker by calling it.

Guarantees:
- A slot is named by a token ``<owner>:<kind>:<n>`` (kind ``gate`` or ``call``): a worker's summary
  slots and call slots never share a name, and a token already held or waited for is refused, never
  overwritten (two kinds numbered alike once made a summary slot that was never given back).
- A slot whose waiter was cancelled is given back. A worker that died (the driver calls
  :meth:`RunServices.release_owner` when Ray reports it dead, or when it stopped answering) gets
  every slot it held or waited for given back, and from then on is fenced: its late acquires are
  refused and its late releases ignored, so a dead worker never holds capacity and a released slot
  is never released twice.
- A worker sends its releases without waiting for them (one message, no round trip per call);
  :meth:`_Slots.settled` returns once the actor has carried out every release it sent so far.
- :meth:`RunServices.state` counts what is held and waited for, per owner; at the end of a run
  every count is zero (the driver writes them to ``run.json`` as ``slots_at_end``, read after every
  live worker's releases were carried out, waited for at most ``SETTLE_WAIT_S``: a release still on
  its way is no leak).
- The budget a worker sees is the cluster's total as of its last charge plus its own charges not
  yet confirmed: a worker learns of other workers' spending when it next charges.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import ray

from ..models.adaptive import AdaptiveLimit
from ..services import RateLimiter, Wakeup

KINDS = ("gate", "call")


def owner_of(token: str) -> str:
    return token.split(":", 1)[0]


@ray.remote(num_cpus=0)
class RunServices:
    """One per run, named ``runner-services-<run id>``. Every method is called by workers or the driver."""

    def __init__(
        self,
        max_concurrent: int,
        requests_per_minute: int,
        window_s: float,
        max_calls: int,
        budget_limit: float | None,
    ):
        self._args = (max_concurrent, requests_per_minute, window_s, max_calls)
        self.budget_limit = budget_limit
        self.spent = 0.0
        self._ready = False
        self._held: dict[str, anyio.CapacityLimiter] = {}  # token -> the limiter it holds
        self._waiting: dict[str, asyncio.Task[Any]] = {}
        self._gone: set[str] = set()  # released before its acquire began
        self._dead: set[str] = set()  # owners released by release_owner: fenced for good
        self.gate_starts = 0

    def _setup(self) -> None:
        """anyio's primitives need the actor's running event loop, which ``__init__`` does not have."""
        if not self._ready:
            max_concurrent, rpm, window_s, max_calls = self._args
            self.gate = anyio.CapacityLimiter(max_concurrent)
            self.rate = RateLimiter(rpm, window_s)
            self.calls = AdaptiveLimit(maximum=max_calls)
            self._ready = True

    async def _acquire(
        self, limiter: anyio.CapacityLimiter, token: str, kind: str, rate: RateLimiter | None
    ) -> None:
        if token.split(":")[1:2] != [kind]:
            raise RuntimeError(f"slot {token} is not a {kind} token")
        if owner_of(token) in self._dead:
            raise RuntimeError(f"slot {token}: its worker was declared dead")
        if token in self._gone:
            self._gone.discard(token)
            raise RuntimeError(f"slot {token} was released before it was taken")
        if token in self._held or token in self._waiting:
            raise RuntimeError(f"slot {token} is already held or waited for")
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
        await self._acquire(self.gate, token, "gate", self.rate)
        self.gate_starts += 1

    async def call_acquire(self, token: str) -> None:
        self._setup()
        await self._acquire(self.calls.limiter, token, "call", None)

    async def release(self, token: str, successes: int = 0) -> None:
        """Give back ``token``'s slot, or stop its wait; a token not seen yet is refused when it comes.
        ``successes``: calls that succeeded since the caller's last release (one message for both).
        A dead owner's release is ignored: :meth:`release_owner` gave back all it had."""
        if owner_of(token) in self._dead:
            return
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

    async def release_owner(self, owner: str) -> dict[str, int]:
        """A worker died (or stopped answering): give back every slot it held or waited for, and fence
        it. Returns how many were given back, by kind and state (``gate_held``, ``call_waiting``, ...)."""
        prefix = f"{owner}:"
        counts: Counter[str] = Counter()
        for token in [t for t in self._held if t.startswith(prefix)]:
            counts[f"{token.split(':')[1]}_held"] += 1
            self._held.pop(token).release_on_behalf_of(token)
        for token in [t for t in self._waiting if t.startswith(prefix)]:
            counts[f"{token.split(':')[1]}_waiting"] += 1
            self._waiting.pop(token).cancel()
        self._gone = {t for t in self._gone if not t.startswith(prefix)}
        self._dead.add(owner)
        return dict(counts)

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
        """What is held and waited for now: totals (the limiters' own counts and ours) and per owner."""
        self._setup()
        owners: dict[str, dict[str, int]] = {}
        for state, tokens in (("held", self._held), ("waiting", self._waiting)):
            for token in tokens:
                kind = token.split(":")[1]
                entry = owners.setdefault(
                    owner_of(token),
                    dict.fromkeys((f"{k}_{s}" for k in KINDS for s in ("held", "waiting")), 0),
                )
                entry[f"{kind}_{state}"] += 1
        return {
            "spent": self.spent,
            "gate_starts": self.gate_starts,
            "gate_held": self.gate.borrowed_tokens,
            "gate_waiting": self.gate.statistics().tasks_waiting,
            "calls_limit": self.calls.current,
            "calls_held": self.calls.limiter.borrowed_tokens,
            "calls_waiting": self.calls.limiter.statistics().tasks_waiting,
            "held": len(self._held),
            "waiting": len(self._waiting),
            "owners": owners,
            "dead": sorted(self._dead),
        }


SLOT_KEYS = ("gate_held", "gate_waiting", "calls_held", "calls_waiting", "held", "waiting")


def leaked(state: dict[str, Any]) -> int:
    """Slots still held or waited for (:data:`SLOT_KEYS`) in a :meth:`RunServices.state` taken after
    every job ended."""
    return sum(int(state.get(k, 0)) for k in SLOT_KEYS)


class _Slots:
    """Tokens of one owner (a worker) for one kind of slot at the services actor."""

    def __init__(self, actor: Any, owner: str, kind: str):
        self.actor = actor
        self.owner = owner
        self.kind = kind
        self.acquire = getattr(actor, f"{kind}_acquire")
        self._ids = itertools.count()
        self._unconfirmed: set[concurrent.futures.Future[Any]] = set()  # releases sent, not carried out
        self._lock = threading.Lock()  # confirmations arrive on Ray's threads

    def _send_release(self, *args: Any) -> None:
        future = self.actor.release.remote(*args).future()
        with self._lock:
            self._unconfirmed.add(future)
        future.add_done_callback(self._confirmed)

    def _confirmed(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._unconfirmed.discard(future)

    async def settled(self) -> None:
        """Returns once the actor has carried out (or refused) every release sent so far. Ray does not
        order one caller's messages against another's: a release sent just before a job's result
        can reach the actor after a question the driver asks once it has the result."""
        with self._lock:
            sent = list(self._unconfirmed)
        if sent:  # asyncio.wait: a cancelled wait leaves the releases' futures to Ray (and raises nothing)
            await asyncio.wait([asyncio.wrap_future(f) for f in sent])

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        token = f"{self.owner}:{self.kind}:{next(self._ids)}"
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
        self._send_release(token)


class RayGate(_Slots):
    """The summary gate (``runner.services.Gate``) of the whole cluster."""

    def __init__(self, actor: Any, owner: str):
        super().__init__(actor, owner, "gate")


class RayCallLimit(_Slots):
    """The adaptive API concurrency (``runner.services.CallLimit``) of the whole cluster. Successes are
    counted here and told to the actor with the next release: two messages per call, not three."""

    def __init__(self, actor: Any, owner: str):
        super().__init__(actor, owner, "call")
        self._successes = 0

    def _release(self, token: str) -> None:
        successes, self._successes = self._successes, 0
        self._send_release(token, successes)

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
        self._held = 0.0  # the estimated costs of this worker's calls in flight
        self._releases = Wakeup()  # this worker's calls wait on this worker's releases
        self._lock = threading.Lock()  # confirmations arrive on Ray's threads

    @property
    def spent(self) -> float:
        with self._lock:
            return self._cluster + self._pending

    @property
    def exceeded(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def hold(self, usd: float) -> bool | None:
        """As the local budget's, with this worker's holds only: another worker's calls in flight are
        seen when they are charged."""
        if self.limit is None:
            return True
        with self._lock:
            spent = self._cluster + self._pending
            if spent + usd >= self.limit:
                return False
            if spent + self._held + usd >= self.limit:
                return None
            self._held += usd
            return True

    def release(self, usd: float) -> None:
        if self.limit is not None:
            with self._lock:
                self._held = max(0.0, self._held - usd)
            self._releases.wake()

    async def released(self) -> None:
        await self._releases.wait()

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
