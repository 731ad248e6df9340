"""Compaction strategies, one small class each behind :class:`Strategy`.

To add one: a new module here with a :class:`Strategy` subclass, its name in ``STRATEGIES`` and in
``config.Compaction``, and its tests.
"""

from __future__ import annotations

from ...config import Limits
from .base import Stages, Strategy
from .clear import ClearStrategy
from .client import ClientStrategy
from .mask import MaskStrategy
from .off import OffStrategy
from .server import ServerStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (ClientStrategy, ServerStrategy, ClearStrategy, MaskStrategy, OffStrategy)
}


def strategy_for(limits: Limits, server_side: bool = True) -> Strategy:
    """The job's strategy; where the backend cannot compact server-side, that strategy's fallback."""
    cls = STRATEGIES[limits.compaction]
    if cls.server_side and not server_side and cls.fallback:
        cls = STRATEGIES[cls.fallback]
    return cls(limits)


__all__ = ["STRATEGIES", "Stages", "Strategy", "strategy_for"]
