"""A resumed job made ready from its directory: the history it continues, its window, its spend and
what its tools had kept, as they stood at its last kept reply.

Guarantees:
- Spend is neither lost nor counted twice: the job's cost, usage, compactions, persisted bytes,
  turns and earlier segments' wall time are those of the ``model_call`` line of its last kept reply
  (:func:`~runner.agent.continuation.read_ledger`), after what came later was taken back
  (:func:`~runner.agent.continuation.cut_spend`); a run written before such lines keeps its
  ``metrics.json`` spend and counts its turns from the history.
- The window is the one the model last saw: what the last kept call carried is seen, what was
  written after it is not, so the stages that act on seen messages decide as they would have.
- The reserve and the thrash ladder learn again from the calls and compactions kept; the token
  estimate is calibrated by the last kept call; the memory folder and the tools' bookkeeping (ids,
  repeats) are those of the kept history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..compaction.compactor import HISTORY_STAGES
from ..compaction.window import Entry
from ..messages import Message, merge_adjacent
from ..rundir.store import in_thread
from .continuation import Ledger, cut_spend, read_ledger, rebuild_memory
from .history import History
from .spend import Spend

if TYPE_CHECKING:
    from ..tools.toolset import Toolset


class Resumer:
    """Makes a session ready to continue ``history`` (the transcript cut back to its last complete
    turn) in ``into`` (the session's :class:`History`): :meth:`restore` before the first call,
    :meth:`ready_tools` once the toolset is open."""

    def __init__(self, history: list[Message], *, into: History, spend: Spend):
        self.history = history
        self.dir = into.writer.dir
        self.into = into
        self.state = into.state
        self.spend = spend
        self.ledger: Ledger | None = None  # where the spend was rebuilt from (None: an older run's)
        self.wall_before = 0.0  # the earlier segments' wall time, as the last kept call measured it

    async def restore(self) -> None:
        """The window and the spend as they stood at the last kept reply."""
        history = self.history
        await in_thread(cut_spend)(self.dir, len(history))  # as a resume's cut does (a no-op after one)
        await self.into.resume(history)
        self.spend.resume_at(sum(1 for m in merge_adjacent(history) if m["role"] == "assistant"))
        ledger = await in_thread(read_ledger)(self.dir, len(history))
        if ledger is None:
            return
        self.ledger = ledger
        self._restore_spend(ledger)
        self._learn_thrash(ledger)
        self._unsee_after(ledger)

    async def ready_tools(self, toolset: Toolset) -> None:
        """The memory folder as the kept history left it, and the toolset's bookkeeping replayed."""
        await rebuild_memory(self.dir, self.history)
        calls = self.ledger.calls if self.ledger else []
        await toolset.replay(self.history, turns={c.lines: c.turn for c in calls if c.lines is not None})

    def calibrate(self) -> None:
        """The token estimate as the last kept call measured it (once the request's overhead is known)."""
        last = self.ledger.last if self.ledger is not None else None
        if last is not None and last.tokens:
            self.state.calibrate(last.tokens, last.chars + self.state.overhead_chars)

    def _restore_spend(self, ledger: Ledger) -> None:
        """Cost, usage (its own and its summaries'), compactions, persisted bytes and turns; and what the
        reserve had learned from the calls before the last kept reply."""
        spend, last = self.spend, ledger.last
        record = spend.record
        record.compactions = dict(last.compactions or {} if last else {})
        record.persisted_bytes = last.persisted_bytes or 0 if last else 0
        spend.restore(ledger)  # usage, turns, batch parts, cost: spent by the earlier segments
        self.wall_before = last.wall_s or 0.0 if last else 0.0
        outputs = [c.usage.output_tokens if c.usage else 0 for c in ledger.calls]
        spend.most_output = max((b - a for a, b in zip([0, *outputs], outputs, strict=False)), default=0)
        if last:
            previous = ledger.calls[-2].chars if len(ledger.calls) > 1 else 0
            spend.growth, spend.last_sent = max(0, last.chars - previous), last.chars

    def _learn_thrash(self, ledger: Ledger) -> None:
        """The thrash ladder, from the history compactions kept (the turns as the compactor counted them)."""
        state = self.state
        assistants = [i for i, m in enumerate(self.history) if m.get("role") == "assistant"]
        for event, before in ledger.compactions:
            if event.stage in HISTORY_STAGES:
                turns = sum(1 for i in assistants if before is not None and i <= before)
                freed = (event.chars_before - event.chars_after) / state.char_limit()
                state.thrash.observe(turns, freed, state.limits)

    def _unsee_after(self, ledger: Ledger) -> None:
        """What the last kept call carried is seen; the reply and results written after it are not."""
        lines = ledger.last.lines if ledger.last and ledger.last.lines is not None else 0
        window = self.state.window
        window.replace(
            [
                Entry(e.message, e.chars, e.seq, e.seen and not (e.seq is not None and e.seq > lines))
                for e in window.entries
            ]
        )
