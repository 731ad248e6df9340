"""``off``: no compaction; the history grows until the API refuses it (then reactive compaction)."""

from __future__ import annotations

from .base import Stages, Strategy


class OffStrategy(Strategy):
    name = "off"

    async def prepare(self, stages: Stages) -> None:
        return None
