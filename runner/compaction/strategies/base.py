"""The interface every compaction strategy implements.

A strategy owns two things: what it adds to a request (the server's ``context_management`` edit,
the ``compact`` tool, prompt-cache points) and how it prepares the history before each model call.
The session asks the job's strategy; it never compares mode names.

:meth:`Strategy.prepare` works through a :class:`Stages` object, the narrow interface to the
Compactor: ``adopt`` a pure stage's outcome (its outputs are written before the call returns),
or ``summarize`` the history through the shared summary gate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

from ...config import Limits
from ..stages import Outcome, Stage, tool_result_budget
from ..window import Window


class Stages(Protocol):
    """What a strategy may do to a session's window during :meth:`Strategy.prepare`."""

    window: Window
    limits: Limits

    def adopt(self, stage: Stage, outcome: Outcome | None) -> None:
        """Adopt a pure stage's outcome; its outputs and event line are written before prepare returns."""

    def char_limit(self) -> int:
        """The context limit in characters (tighter when a token limit is set)."""

    def name_for(self, tool_use_id: str, content: str) -> str:
        """The path an output of ``tool_use_id`` is saved under."""

    def saved_for(self, tool_use_id: str, path: str) -> bool:
        """Whether ``path`` holds an output of ``tool_use_id`` that this job saved."""

    async def summarize(self, stage: Stage) -> None:
        """Replace the history the model has seen with a summary (outputs queued so far are written first)."""


class Strategy(ABC):
    """One way of keeping a history inside its budget. One instance per job."""

    name: ClassVar[str]
    #: the model may call ``compact`` itself
    offers_compact_tool: ClassVar[bool] = False
    #: the API compacts: a backend without server-side compaction runs ``fallback`` instead
    server_side: ClassVar[bool] = False
    fallback: ClassVar[str | None] = None

    def __init__(self, limits: Limits):
        self.limits = limits

    def context_management(self) -> dict[str, Any] | None:
        """What the request carries in ``context_management`` (None: nothing)."""
        return None

    def cache_points(self, window: Window) -> tuple[int, ...]:
        """Messages after which a prompt-cache breakpoint pays off (with ``cache_aware``; without, none
        is named and the backend marks the newest message):

        - the newest message compaction will not rewrite: a write the next calls read back;
        - the longest prefix an earlier call cached that no stage has rewritten since: a read (the API
          looks back only about 20 blocks from a breakpoint, and a compaction's rewrite or a large
          batch can put more than that between the newest message and the prefix still cached);
        - the newest message, unless :meth:`rewrites_next` says the next call surely rewrites from the
          settled message on: then everything after it is sent as plain input (a write there would
          cost 1.25x the input price and never be read)."""
        if not self.limits.cache_aware:
            return ()
        newest = len(window) - 1
        settled = window.settled_prefix()
        points = {settled - 1} if settled > 0 else set()
        cached = window.cached_points()
        if cached:
            points.add(cached[-1])
        chosen = sorted(p for p in points if 0 <= p < newest)[-2:]
        if newest >= 0 and not (chosen and settled - 1 in chosen and self.rewrites_next(window, settled)):
            chosen.append(newest)
        window.caching(tuple(chosen))
        return tuple(chosen)

    def rewrites_next(self, window: Window, settled: int) -> bool:
        """Whether the next call surely rewrites message ``settled`` (the first that is not settled),
        and with it every message after it: by default, never (the client pipeline rewrites only when
        the next call goes over the limit, which depends on results not yet known; a guess from this
        call's growth saved 3% on the cost table but cost 5% more on the big-tree's 400,000-char
        window, where snip, not micro_compact, keeps the window in bounds)."""
        return False

    def oldest_open_result_goes(self, window: Window, settled: int) -> bool:
        """Whether the oldest result micro_compact could still rewrite (in message ``settled``) is older
        than the newest ``keep_recent_results``, once the model has seen this call's."""
        return window.open_results_from(settled) > self.limits.keep_recent_results

    def budget_results(self, stages: Stages) -> None:
        """1. ``tool_result_budget``, every strategy's first stage: a batch of results over its budget
        has its largest ones saved."""
        limits = self.limits
        stages.adopt(
            Stage.TOOL_RESULT_BUDGET,
            tool_result_budget(
                stages.window.entries,
                limits.batch_char_limit,
                limits.large_result_chars,
                preview_chars=limits.preview_chars,
                name_for=stages.name_for,
            ),
        )

    @abstractmethod
    async def prepare(self, stages: Stages) -> None:
        """Bring the window inside the budget, cheapest and most recoverable step first."""
