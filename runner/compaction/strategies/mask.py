"""``mask``: observation masking only. Every tool result the model has seen, except the newest
``keep_recent_results``, becomes a one-line placeholder naming where it is saved; an oversized new
batch is persisted as in the client pipeline. No snip, no summary."""

from __future__ import annotations

from .. import stages as s
from ..stages import Stage
from ..window import Window
from .base import Stages, Strategy


class MaskStrategy(Strategy):
    name = "mask"

    async def prepare(self, stages: Stages) -> None:
        limits, window = self.limits, stages.window
        self.budget_results(stages)
        stages.adopt(
            Stage.OBSERVATION_MASK,
            s.micro_compact(
                window.entries,
                window.total,
                0,
                keep_recent=limits.keep_recent_results,
                name_for=stages.name_for,
                saved_for=stages.saved_for,
            ),
        )

    def rewrites_next(self, window: Window, settled: int) -> bool:
        """Every call masks the results older than the newest ``keep_recent_results``."""
        return self.oldest_open_result_goes(window, settled)
