"""A job's spend: what it has cost so far, and whether its next call still fits its budgets.

Guarantees:
- :class:`Spend` is the one writer of the job's usage, cost and call counts in its record (every
  :class:`~runner.pricing.Usage` field and every ``SPENT`` field of
  :class:`~runner.rundir.docs.JobMetrics`; ``tests/test_one_writer.py`` checks the other modules):
  from each call's own reply (:meth:`Spend.charge`), summary (:meth:`Spend.charge_summary`) or
  failure (:meth:`Spend.count`), from a resumed job's ledger (:meth:`Spend.restore`) or earlier
  record (:meth:`Spend.carry_over`), and for a record a Ray worker reports (:func:`mirror`).
- The job's cost is its own calls priced on its model plus its summaries priced on the summary
  model, from one price table; it lives in the job's record (``cost_usd``; its own part without its
  subagents' in ``own_cost_usd``), nowhere else.
- A call a Message Batch answered (its usage also in the record's ``batch_usage`` or
  ``batch_summarizer_usage``) is priced at ``prices.batch_discount`` of its price: the same tokens,
  a lower cost, in every cost the record carries.
- Every change of the job's cost is charged to the run's budget once.
- ``max_turns`` is the whole job's: its own calls and its subagents' together (:meth:`Spend.job_turns`),
  its last one kept for its report. A subagent's call is made only when the job has room for it and
  for the job's report (:meth:`Spend.grant_turn`, through the subagent's :class:`ShareBudget`); a
  call let through counts from then on (the subagents of one reply run at once), so the job's calls
  stay within ``max_turns``. The exception: a subagent's report after a limit of its own other than
  turns (its timeout, its budget, thrashing) is one call past it, at most one a subagent.
- A call is made only when it, and then a short report, fit ``max_cost_usd`` (the reserve): the
  call that would not is the job's last one, its report (``JobEnded(..., last_call=True)``); the
  report's ``max_tokens`` never takes the job over its budget. Estimates are taken
  ``ESTIMATE_MARGIN`` higher.
- The run's ``max_cost_usd``: a call holds its likely cost (its job's last call's, at this call's
  tokens) in the run's budget while it is in flight (:meth:`Spend.run_hold`) and starts only when the
  run's spend, the other calls' holds and its own stay under the limit: it waits for a hold to be given
  back while the calls in flight take the room, and its job ends ``budget_exceeded`` only when what was
  spent and this call reach the limit. So concurrent jobs do not all cross the line at once. An
  estimate is not a bound (a cache that misses, a longer reply; summaries hold nothing), so the run may
  end a little over its limit, never by a call of every job in flight.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ..billing import CHARS_PER_TOKEN
from ..compaction.compactor import CompactionState
from ..compaction.summarizer import Summary
from ..config import Limits
from ..models.base import Reply
from ..models.wire import WireCounts
from ..pricing import PriceTable, Usage, sum_usage
from ..rundir.docs import JobMetrics, Status
from ..services import Budget
from .continuation import Ledger

REPORT_TOKENS = 1_000  # the output the budget's reserve plans for the report (max_output_tokens when smaller)
REPORT_SHARE = 0.1  # of max_cost_usd, kept for the report's output under a small budget
MIN_REPORT_TOKENS = 64  # a last call with less room than this is not made: the report is built without it
ESTIMATE_MARGIN = 1.05  # estimated costs are taken this much higher before a call is allowed


MAX_TURNS_HINT = (
    "to let it go on, raise max_turns: in the task file's [limits], [jobs.<name>] or [limits] of "
    "config.toml (the first that sets it wins), or RUNNER_JOBS__<NAME>__MAX_TURNS"
)


def turns_spent(limit: int, detail: str = "") -> str:
    """A job's error when its ``max_turns`` is reached: the limit, ``detail``, and which key to raise."""
    return f"reached max_turns = {limit}{detail}; {MAX_TURNS_HINT}"


class JobEnded(Exception):
    """Ends a job early with a status other than ``succeeded``; ``last_call``: the job is about to hit a
    limit it kept a reserve for, and gets one last call without tools for its report."""

    def __init__(self, status: str, error: str, last_call: bool = False):
        super().__init__(error)
        self.status = status
        self.error = error
        self.last_call = last_call


@dataclass
class Spend:
    """The spend of one job, kept in its record; the limits it is checked against."""

    record: JobMetrics
    limits: Limits
    model: str
    summary_model: str
    prices: PriceTable
    run_budget: Budget
    children: dict[str, JobMetrics] = field(default_factory=dict)  # its subagents' records, by directory
    own_cost: float = 0.0  # its own calls' and summaries' cost (the record's cost adds its subagents')
    most_output: int = 0  # the largest reply so far (output tokens): what the next call may write
    last_usage: Usage | None = None  # the last own call's, and whether a Message Batch answered it
    last_by_batch: bool = False
    growth: int = 0  # characters the window grew by from the call before to the last one
    last_sent: int = 0  # characters of messages the last call carried
    # a live subagent's turns counting the calls it was let make (by directory): it holds them now
    granted: dict[str, int] = field(default_factory=dict)

    def charge(self, reply: Reply) -> None:
        """One answered call of the job's own: a turn, its usage (its batch part when a Message Batch
        answered it), what it met on the wire, the job's cost (its summaries' so far included)."""
        record, usage = self.record, reply.usage
        record.turns += 1
        record.usage.add(usage)
        record.usage_estimated = record.usage_estimated or reply.estimated
        if reply.batch is not None:
            record.batch_usage = _plus(record.batch_usage, usage)
            record.batch_calls += 1
        self.count(reply.wire)
        self.most_output = max(self.most_output, usage.output_tokens)
        self.last_usage, self.last_by_batch = usage, reply.batch is not None
        self.settle()

    def charge_summary(self, summary: Summary) -> None:
        """One summary call, answered or failed (no usage): its usage (its batch part when a Message
        Batch answered it) and what it met on the wire. Its cost is settled with the next call's."""
        record = self.record
        record.summarizer_usage.add(summary.usage)
        if summary.batch is not None:
            record.batch_summarizer_usage = _plus(record.batch_summarizer_usage, summary.usage)
            record.batch_calls += 1
        self.count(summary.wire)

    def count(self, wire: WireCounts) -> None:
        """What one call met on the wire (a failed call's too): its attempts, their 429/529/5xx
        answers, its retries (the SDK's and a Message Batch's resends)."""
        record = self.record
        if wire.requests:
            record.requests += wire.requests
        if wire.rate_limited_429:
            record.rate_limited_429 += wire.rate_limited_429
        if wire.overloaded_529:
            record.overloaded_529 += wire.overloaded_529
        if wire.server_errors_5xx:
            record.server_errors_5xx += wire.server_errors_5xx
        if wire.retries:
            record.retries += wire.retries

    def resume_at(self, turns: int) -> None:
        """A resumed job's turns, as its kept history counts them (before its ledger is read)."""
        self.record.turns = turns

    def restore(self, ledger: Ledger) -> None:
        """A resumed job's spend as it stood at its last kept reply (``ledger``): its usage (its own,
        its summaries', their batch parts), turns, batch calls and cost, none of it charged to this
        run's budget (the earlier segments spent it)."""
        record, last = self.record, ledger.last
        record.usage = last.usage.model_copy() if last and last.usage else Usage()
        summaries = last.summarizer_usage if last else None
        record.summarizer_usage = summaries.model_copy() if summaries else Usage()
        record.turns = last.turn if last else 0
        record.usage_estimated = any(c.estimated for c in ledger.calls)
        batch = (last.model_extra or {}) if last else {}  # the part a Message Batch answered
        record.batch_usage = Usage.model_validate(batch.get("batch_usage") or {})
        record.batch_summarizer_usage = Usage.model_validate(batch.get("batch_summarizer_usage") or {})
        record.batch_calls = int(batch.get("batch_calls") or 0)
        self.settle(charge=False)

    def carry_over(self, prior: JobMetrics) -> None:
        """Continue from an earlier segment's record: every count it had (not its identity, status,
        error, where it ran, nor the live fields). Not settled: the caller settles without charging."""
        identity = {"job", "status", "model", "error", "worker", "source", *JobMetrics.LIVE}
        _copy_fields(self.record, prior, but=identity, deep=True)

    def settle(self, *, charge: bool = True) -> None:
        """Recompute the job's cost from its usage and its subagents' records, and charge the run's
        budget with the change of its own part (``charge=False``: a resumed job's earlier spend, which
        this run did not make; a subagent's spend is charged by the subagent)."""
        record = self.record
        prices = self.prices
        own = prices.cost_with_batch(self.model, record.usage, record.batch_usage) + prices.cost_with_batch(
            self.summary_model, record.summarizer_usage, record.batch_summarizer_usage
        )
        if charge:
            self.run_budget.charge(own - self.own_cost)
        self.own_cost = own
        record.own_cost_usd = own
        record.cost_usd = self.total()
        if self.children:
            record.subagents = [c.subagent_row() for c in sorted(self.children.values(), key=_ordinal)]
            record.subagent_usage = sum_usage(self.children.values())

    def total(self) -> float:
        """The job's whole spend as it stands: its own (as last settled) and its subagents' (live)."""
        return self.own_cost + sum(c.cost_usd for c in self.children.values())

    def sent(self, chars: int) -> None:
        """The last call carried ``chars`` characters of messages."""
        self.growth, self.last_sent = max(0, chars - self.last_sent), chars

    def check(self) -> None:
        """JobEnded when the job or the run has spent its budget."""
        limit = self.limits.max_cost_usd
        cost = self.record.cost_usd
        if limit is not None and cost >= limit:
            raise JobEnded(Status.BUDGET_EXCEEDED, f"spent ${cost:.4f}, max_cost_usd is ${limit:g}")
        self._check_run_budget()

    def check_before_call(self) -> None:
        """Before a call: JobEnded when the job's own turns, its turns with its subagents' or the run's
        budget leave no room for it (the last turn is kept for the report)."""
        if self.record.turns + 1 >= self.limits.max_turns:
            raise JobEnded(Status.MAX_TURNS, turns_spent(self.limits.max_turns), last_call=True)
        self.check_turns()
        self._check_run_budget()

    def job_turns(self, but: str | None = None) -> int:
        """The whole job's turns: its own and its subagents', the calls a running subagent was let
        through counted (``but``: that subagent's turns as made, its grant left out). A grant counts
        until its subagent's session has returned: one that has its ending already may still be making
        its last call, the report."""
        total = self.record.turns
        for name, child in self.children.items():
            total += child.turns if name == but else max(child.turns, self.granted.get(name, 0))
        return total

    def turns_left(self) -> int:
        """The calls the job's subagents may still make: ``max_turns`` less the job's turns and the
        job's report."""
        return self.limits.max_turns - 1 - self.job_turns()

    def check_turns(self) -> None:
        """JobEnded when the job's next call is its last (its subagents' turns counted), or, for a
        subagent, when its job has no room for this call (:meth:`grant_turn`)."""
        if isinstance(self.run_budget, ShareBudget):
            self.run_budget.parent.grant_turn(self.record, self.limits.max_turns)
            return
        limit, used, own = self.limits.max_turns, self.job_turns(), self.record.turns
        if used + 1 >= limit:
            raise JobEnded(
                Status.MAX_TURNS,
                turns_spent(limit, f" ({own} turns of its own and {used - own} of its subagents)"),
                last_call=True,
            )

    def grant_turn(self, child: JobMetrics, child_max_turns: int) -> None:
        """A subagent's next call, counted in this job's turns from now on; JobEnded when the job's
        ``max_turns`` has no room for it besides the job's report (then its report is built without
        a call), or room for this one only (then it is the subagent's report). When its next call
        after this one would be its own last (``child_max_turns``), that one is let through now too:
        its session makes it without asking."""
        limit = self.limits.max_turns
        room = limit - 1 - self.job_turns(but=child.job)
        spent = f"its job's max_turns = {limit} is spent (the job's turns and its subagents' together)"
        if room <= 0:
            raise JobEnded(Status.MAX_TURNS, spent)
        need = 2 if child.turns + 2 >= child_max_turns else 1
        self.granted[child.job] = child.turns + min(need, room)
        if room < need:
            raise JobEnded(Status.MAX_TURNS, f"{spent}; this call is its report", last_call=True)

    @asynccontextmanager
    async def run_hold(self, state: CompactionState) -> AsyncIterator[None]:
        """Around a call: its estimated cost held in the run's budget while it is in flight (charged
        when it is answered, inside the hold). While the other calls' holds take the room it waits for
        one to be given back; JobEnded when what was spent and this call reach the limit."""
        budget = self.run_budget
        if budget.limit is None and not (isinstance(budget, ShareBudget) and budget.run.limit is not None):
            yield  # no limit to hold against: nothing to estimate on the way of every call
            return
        usd = ESTIMATE_MARGIN * self.call_estimate(state)
        while (held := budget.hold(usd)) is None:
            await budget.released()
        if not held:
            raise JobEnded(
                Status.BUDGET_EXCEEDED,
                f"{self._run_spent()}, and this call (about ${usd:.4f}) would reach it",
            )
        try:
            yield
        finally:
            budget.release(usd)

    def call_estimate(self, state: CompactionState) -> float:
        """What the next call will likely cost: the last call's cost for its tokens, at this call's
        tokens (its cache reads and batch price as that one had them); before any call, its input at
        ``CHARS_PER_TOKEN`` characters a token, uncached."""
        tokens, last = state.estimated_tokens(), self.last_usage
        if tokens is not None and last is not None and last.context_tokens:
            cost = self.prices.cost_with_batch(self.model, last, last if self.last_by_batch else Usage())
            return cost * tokens / last.context_tokens
        tokens = (state.window.total + state.overhead_chars) // CHARS_PER_TOKEN
        return self.prices.cost(self.model, Usage(input_tokens=tokens, output_tokens=self.most_output))

    def _run_spent(self) -> str:
        """What was spent against which limit: the run's, or a subagent's share of its job's budget."""
        budget: Budget = self.run_budget
        if isinstance(budget, ShareBudget) and budget.limit is None:  # no share of its own: the run's
            budget = budget.run
        whose = "its job" if isinstance(budget, ShareBudget) else "the run"
        limit = "none" if budget.limit is None else f"${budget.limit:g}"
        return f"{whose} spent ${budget.spent:.4f}, its max_cost_usd is {limit}"

    def _check_run_budget(self) -> None:
        if self.run_budget.exceeded:
            raise JobEnded(Status.BUDGET_EXCEEDED, self._run_spent())

    def check_reserve(self, state: CompactionState) -> None:
        """Before a call, on the window it carries: when this call (as much output as the largest reply
        so far) and then a short report (the window one turn larger, the report's output) could
        together reach the job's budget, this call is the last one: the report. The reserve is what
        the job's own calls cost, so a small budget still works until near its cap."""
        limit = self.limits.max_cost_usd
        if limit is None:
            return
        this_call = self.next_call_cost(state)
        # the report's window: this one plus what the last turn added, compacted back to the limit
        window = state.window.total
        more = max(0, min(window + self.growth, max(window, state.char_limit())) - window)
        report = self.next_call_cost(state, output_tokens=self.report_floor(), more_chars=more)
        cost = self.record.cost_usd
        if cost + ESTIMATE_MARGIN * (this_call + report) >= limit:
            raise JobEnded(
                Status.BUDGET_EXCEEDED,
                f"spent ${cost:.4f} of max_cost_usd ${limit:g}, keeping ${report:.4f} for the report",
                last_call=True,
            )

    def report_floor(self) -> int:
        """The report's output the reserve plans for: what ``REPORT_SHARE`` of the budget buys, at least
        ``MIN_REPORT_TOKENS``, at most ``REPORT_TOKENS`` (and ``max_output_tokens``)."""
        most = min(REPORT_TOKENS, self.limits.max_output_tokens)
        per_token = self._per_output_token()
        limit = self.limits.max_cost_usd
        if limit is None or per_token <= 0:
            return most
        return max(MIN_REPORT_TOKENS, min(most, int(limit * REPORT_SHARE / per_token)))

    def report_tokens(self, state: CompactionState) -> int:
        """The last call's ``max_tokens``: what the job's budget still affords after the call's input
        (so the report never takes the job over ``max_cost_usd``), at most ``max_output_tokens``; 0 when
        the input alone would."""
        limit, most = self.limits.max_cost_usd, self.limits.max_output_tokens
        if limit is None:
            return most
        left = limit - self.record.cost_usd - ESTIMATE_MARGIN * self.next_call_cost(state, output_tokens=0)
        per_token = self._per_output_token()
        return max(0, min(most, int(left / per_token))) if per_token > 0 else most

    def next_call_cost(
        self, state: CompactionState, output_tokens: int | None = None, more_chars: int = 0
    ) -> float:
        """What a call carrying the current context (and ``more_chars``) would cost: its size in tokens
        as the last real usage measured it, and as much output as the largest reply so far."""
        tokens = state.estimated_tokens(more_chars)
        if tokens is None:
            return 0.0
        output = self.most_output if output_tokens is None else output_tokens
        return self.prices.cost(self.model, Usage(input_tokens=tokens, output_tokens=output))

    def _per_output_token(self) -> float:
        return self.prices.cost(self.model, Usage(output_tokens=1_000_000)) / 1_000_000


class ShareBudget:
    """A subagent's view of the run's budget: charges go to the run; it is exceeded when the run's
    is, or when its parent's whole spend reaches ``limit`` (the parent's budget less its report share).
    Its turns are its parent's to grant (:meth:`Spend.grant_turn`)."""

    def __init__(self, run: Budget, parent: Spend, limit: float | None):
        self.run = run
        self.parent = parent
        self.limit = limit

    @property
    def spent(self) -> float:
        return self.parent.total()

    @property
    def exceeded(self) -> bool:
        return self.run.exceeded or (self.limit is not None and self.parent.total() >= self.limit)

    def charge(self, usd: float) -> None:
        self.run.charge(usd)

    def hold(self, usd: float) -> bool | None:
        if self.limit is not None and self.parent.total() + usd >= self.limit:
            return False
        return self.run.hold(usd)

    def release(self, usd: float) -> None:
        self.run.release(usd)

    async def released(self) -> None:
        await self.run.released()


def mirror(shown: JobMetrics, report: JobMetrics) -> None:
    """``shown`` (the driver's record of a job: what the display and ``run.json`` read) takes on a Ray
    worker's ``report`` of it: every field the report set, its spend as the worker's spend wrote it."""
    _copy_fields(shown, report, but=set(), deep=False)


def _copy_fields(into: JobMetrics, source: JobMetrics, *, but: set[str], deep: bool) -> None:
    """Every field ``source`` set but those ``but`` names, into ``into`` (deep copies when ``deep``)."""
    for name in JobMetrics.model_fields:
        if name not in but and name in source.model_fields_set:
            value = getattr(source, name)
            setattr(into, name, copy.deepcopy(value) if deep else value)


def _plus(usage: Usage, more: Usage) -> Usage:
    """A new usage record: ``usage`` and ``more`` added."""
    total = usage.model_copy()
    total.add(more)
    return total


def _ordinal(record: JobMetrics) -> tuple[int, str]:
    """A subagent's place among its job's: the number its directory starts with (``3-pkg``: 3)."""
    head = record.job.split("-", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, record.job)
