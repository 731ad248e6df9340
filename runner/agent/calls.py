"""One model call of a job, and everything an answered one means.

Guarantees:
- Every request has the job's shape: its model, system prompt, tool definitions (as offered once its
  toolset is open), retries and delivery, the strategy's ``context_management``; its messages are
  API-valid (:func:`~runner.agent.safe_request.api_valid`) and it names its caller (the job and the
  turn it would be), which a batch delivery's ids are made from.
- An answered call is charged (:meth:`Spend.charge`: a turn, its usage, the job's cost) before
  anything else is done with it; its ``model_call`` line, the ledger a resume starts from, is queued
  with the job's whole spend (through the job's :class:`History`); then the compactor learns from it
  (:meth:`Compactor.record`), and a reply the API compacted server-side is added to the history
  before the compactor adopts that compaction (:meth:`Compactor.server_compacted`).
- The job's last call (:meth:`JobCalls.last`, its report after a limit) never takes it over
  ``max_cost_usd`` and asks no model for a summary: it is not made when the budget has no room.
- A call that needed retries or met 429/529/5xx answers leaves a ``retries`` line, answered or not,
  and a call that failed has what it met on the wire counted all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..compaction.compactor import Compactor
from ..jobs import JobSpec
from ..messages import Message, merge_adjacent
from ..models.base import Model, Reply, Request
from ..models.wire import WireCounts, counts_of
from ..protocol import NO_TOOLS, OUT_OF_TURNS
from ..rundir.docs import LastCallEvent, RetriesEvent
from .clock import JobClock
from .continuation import model_call_line
from .history import History
from .safe_request import api_valid
from .spend import MIN_REPORT_TOKENS, Spend


@dataclass(kw_only=True)
class JobCalls:
    """The model calls of one job: ``shape`` is what every request carries besides its messages."""

    model: Model
    shape: Request
    spend: Spend
    history: History
    compactor: Compactor
    clock: JobClock

    @classmethod
    def of_job(
        cls,
        spec: JobSpec,
        *,
        tools: list[dict[str, Any]],
        model: Model,
        spend: Spend,
        history: History,
        compactor: Compactor,
        clock: JobClock,
    ) -> JobCalls:
        """The calls of the job ``spec`` describes, offering ``tools``."""
        limits = spec.limits
        shape = Request(
            model=spec.model,
            messages=[],
            tools=tools,
            max_tokens=0,
            system=spec.system,
            max_retries=limits.max_retries,
            delivery=limits.delivery,
        )
        return cls(
            model=model,
            shape=shape,
            spend=spend,
            history=history,
            compactor=compactor,
            clock=clock,
        )

    async def turn(self, messages: list[Message]) -> Reply:
        """A turn's call: ``messages`` (the window, compacted) with the strategy's cache breakpoints."""
        state = self.history.state
        cache_points = state.strategy.cache_points(state.window)
        return await self.send(
            messages, max_tokens=self.spend.limits.max_output_tokens, cache_points=cache_points
        )

    def request(
        self,
        messages: list[Message],
        *,
        max_tokens: int,
        cache_points: tuple[int, ...] = (),
        no_tools: bool = False,
    ) -> Request:
        """A request of the job's shape carrying ``messages`` (``no_tools``: listed, none may be called)."""
        record = self.spend.record
        return replace(
            self.shape,
            messages=api_valid(messages),
            max_tokens=max_tokens,
            context_management=self.history.state.strategy.context_management(),
            cache_points=cache_points,
            tool_choice=NO_TOOLS if no_tools else None,
            caller=(record.job, record.turns + 1),
        )

    async def send(
        self,
        messages: list[Message],
        *,
        max_tokens: int,
        cache_points: tuple[int, ...] = (),
        no_tools: bool = False,
    ) -> Reply:
        """The call made (a :meth:`request`) and its answer kept: charged, its ledger line queued, the
        compactor told (and the history given a reply the API compacted server-side)."""
        history, record = self.history, self.spend.record
        state = history.state
        sent_chars = state.window.total
        request = self.request(messages, max_tokens=max_tokens, cache_points=cache_points, no_tools=no_tools)
        async with self.spend.run_hold(state):  # charged inside its hold
            reply = await self._create(request)
            self.spend.charge(reply)
        self.spend.sent(sent_chars)
        record.context_chars = sent_chars
        record.wall_s = self.clock.wall()
        history.log(model_call_line(record, chars=sent_chars, reply=reply, lines=history.n))
        self.compactor.record(state, reply, history.writer)
        if reply.compacted:
            if reply.content:
                history.add(reply.message())
            self.compactor.server_compacted(state, history.writer)
        return reply

    async def last(self, reason: str) -> Reply | None:
        """The job's last call, for its report: the tools listed but none allowed, the window compacted
        without asking a model (the time kept is one call's), the instruction with this request only
        (the transcript keeps alternating roles). None when ``max_cost_usd`` has no room left for it."""
        history = self.history
        history.log(LastCallEvent(reason=reason).line())
        messages = await self.compactor.prepare(history.state, history.writer, model_summary=False)
        messages = merge_adjacent(
            [*messages, {"role": "user", "content": OUT_OF_TURNS.format(reason=reason)}]
        )
        max_tokens = self.spend.report_tokens(history.state)
        if max_tokens < MIN_REPORT_TOKENS:
            return None
        return await self.send(messages, max_tokens=max_tokens, no_tools=True)

    async def _create(self, request: Request) -> Reply:
        """One model call (the SDK's retries inside it), and a line in events.jsonl when it needed any."""
        wire = WireCounts()
        try:
            reply = await self.model.create(request)
            wire = reply.wire  # charged with the reply (send)
            return reply
        except BaseException as e:
            wire = counts_of(e)
            self.spend.count(wire)  # a failed call's
            raise
        finally:
            if wire.needed_retries:
                event = RetriesEvent(
                    attempts=wire.requests,
                    rate_limited_429=wire.rate_limited_429,
                    overloaded_529=wire.overloaded_529,
                    server_errors_5xx=wire.server_errors_5xx,
                )
                self.history.log(event.line())
