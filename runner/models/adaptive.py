"""Adaptive concurrency towards the API, shared by every job of a batch.

The SDK retries a 429 or 529 by itself (honouring ``retry-after``); this module makes the whole
batch back off as well, instead of every job hammering on alone. It is additive-increase,
multiplicative-decrease (AIMD), as TCP and inspect_ai's adaptive connections do:

- every rate-limit or overload answer seen on the wire halves the number of model calls allowed in
  flight (at most once per ``cooldown_s``, never below one);
- every ``current`` successful calls in a row raise it by one again, up to ``maximum``.

Calls already in flight are never cancelled; a lower limit only holds back new calls.
"""

from __future__ import annotations

import anyio

from ..services import CallLimit
from .base import Model, Reply, Request


class AdaptiveLimit:
    def __init__(self, maximum: int, cooldown_s: float = 1.0):
        self.maximum = maximum
        self.cooldown_s = cooldown_s
        self.limiter = anyio.CapacityLimiter(maximum)
        self._last_decrease = float("-inf")
        self._successes = 0
        self.decreases = 0
        self.lowest = maximum

    @property
    def current(self) -> int:
        return int(self.limiter.total_tokens)

    def rate_limited(self) -> None:
        """A 429/529 was seen: halve the limit (once per cooldown)."""
        try:
            now = anyio.current_time()
        except RuntimeError:  # called outside an event loop (a sync transport hook)
            now = 0.0
        if now - self._last_decrease < self.cooldown_s:
            return
        self._last_decrease = now
        self._successes = 0
        new = max(1, self.current // 2)
        if new < self.current:
            self.limiter.total_tokens = new
            self.decreases += 1
            self.lowest = min(self.lowest, new)

    def slot(self) -> anyio.CapacityLimiter:
        """``async with limit.slot():`` around one model call."""
        return self.limiter

    def succeeded(self) -> None:
        self._successes += 1
        if self._successes >= self.current and self.current < self.maximum:
            self.limiter.total_tokens = self.current + 1
            self._successes = 0


class AdaptiveModel:
    """Wraps a model: each call waits for a slot of the adaptive limit."""

    def __init__(self, inner: Model, limit: CallLimit):
        self.inner = inner
        self.limit = limit
        self.name = inner.name
        self.server_compaction = inner.server_compaction

    async def create(self, request: Request) -> Reply:
        async with self.limit.slot():
            reply = await self.inner.create(request)
        self.limit.succeeded()
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()
