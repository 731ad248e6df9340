"""``client``: the whole pipeline of DESIGN.md, run by the runner before every model call.

tool_result_budget and snip on every call; over the context limit micro_compact (sparing the newest
``keep_recent_results`` seen results), then fit_tool_results, then micro_compact of those newest seen
results too (each is saved and recallable, a summary loses more), then a summary of the history.
The model may also call ``compact`` itself.
"""

from __future__ import annotations

from ...protocol import SNIP_DIGEST_CHARS, SNIP_DIGEST_MAX_CHARS
from .. import stages as s
from ..stages import Stage
from .base import Stages, Strategy


def digest_chars(char_limit: int, share: float) -> int:
    """A snip digest's room: ``share`` of the context limit, from 1,500 to 8,000 characters."""
    return max(SNIP_DIGEST_CHARS, min(SNIP_DIGEST_MAX_CHARS, int(char_limit * share)))


class ClientStrategy(Strategy):
    name = "client"
    offers_compact_tool = True

    async def prepare(self, stages: Stages) -> None:
        limits, window = self.limits, stages.window
        self.budget_results(stages)
        stages.adopt(
            Stage.SNIP,
            s.snip(
                window.entries,
                limits.snip_trigger,
                limits.snip_head,
                target=limits.snip_target,
                name_for=stages.name_for,
                saved_for=stages.saved_for,
                digest_chars=digest_chars(stages.char_limit(), limits.snip_digest_share),
            ),
        )
        limit = stages.char_limit()
        if window.total <= limit:
            return
        target = int(limit * limits.compact_target_ratio)
        stages.adopt(
            Stage.MICRO_COMPACT,
            s.micro_compact(
                window.entries,
                window.total,
                target,
                keep_recent=limits.keep_recent_results,
                name_for=stages.name_for,
                saved_for=stages.saved_for,
            ),
        )
        if window.total > limit:
            stages.adopt(
                Stage.FIT_TOOL_RESULTS,
                s.fit_tool_results(
                    window.entries,
                    window.total,
                    target,
                    preview_chars=limits.fit_preview_chars,
                    name_for=stages.name_for,
                ),
            )
        if (
            window.total > limit and limits.keep_recent_results
        ):  # the newest seen results too, before a summary
            stages.adopt(
                Stage.MICRO_COMPACT,
                s.micro_compact(
                    window.entries,
                    window.total,
                    target,
                    keep_recent=0,
                    name_for=stages.name_for,
                    saved_for=stages.saved_for,
                ),
            )
        if window.total > limit:
            await stages.summarize(Stage.COMPACT_HISTORY)
